#pragma once
// random: visit segments in a random order fixed by `seed`, the ablation that separates the effect of
// ordering from that of the input schedule. A Fisher-Yates shuffle driven by Philox, so a seed gives
// the same order on every machine.

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "lwcl/core/rng.hpp"
#include "lwcl/policies/curriculum/concept.hpp"

namespace lwcl::policies::curriculum {

struct random {
  static constexpr std::string_view name = "random";
  static constexpr bool needs_difficulty = false;

  std::uint64_t seed = 0;

  std::vector<index_t> visiting_order(index_t n, std::span<const double>) const {
    std::vector<index_t> order(static_cast<std::size_t>(n));
    std::iota(order.begin(), order.end(), index_t{0});
    // for i = n - 1 down to 1: swap(order[i], order[j]), j = floor(u_i (i + 1)), with u_i the 53-bit
    // uniform of draws 2i and 2i + 1 of philox_stream{seed, 0} (as pruning::random draws).
    const philox_stream s{seed, 0};
    for (std::size_t i = order.size(); i-- > 1;) {
      const auto hi = static_cast<std::uint64_t>(s.bits(2 * i) >> 5),
                 lo = static_cast<std::uint64_t>(s.bits(2 * i + 1) >> 6);
      const double u = static_cast<double>((hi << 26) | lo) * 0x1p-53;
      const auto j = static_cast<std::size_t>(u * static_cast<double>(i + 1));
      std::swap(order[i], order[std::min(j, i)]);  // u < 1, so j <= i; min() guards rounding
    }
    return order;
  }
};
static_assert(order_policy<random>);

}  // namespace lwcl::policies::curriculum
