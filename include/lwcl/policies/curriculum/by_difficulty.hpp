#pragma once
// The visiting order by measured difficulty (each segment's initial local loss), shared by easy_to_hard
// (lowest first) and hard_to_easy (highest first): the two differ only in the direction. Equal
// difficulties keep model order (a stable sort).

#include <algorithm>
#include <numeric>
#include <span>
#include <vector>

#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"

namespace lwcl::policies::curriculum::detail {

// Self supplies `name` (for messages); Ascending: lowest difficulty first.
template <class Self, bool Ascending>
struct by_difficulty {
  static constexpr bool needs_difficulty = true;

  std::vector<index_t> visiting_order(index_t n, std::span<const double> difficulty) const {
    check(static_cast<index_t>(difficulty.size()) == n, Self::name, ": got ", difficulty.size(),
          " segment difficulties, expected one per segment (", n, ")");
    std::vector<index_t> order(static_cast<std::size_t>(n));
    std::iota(order.begin(), order.end(), index_t{0});
    std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) {
      const double da = difficulty[static_cast<std::size_t>(a)], db = difficulty[static_cast<std::size_t>(b)];
      return Ascending ? da < db : da > db;
    });
    return order;
  }
};

}  // namespace lwcl::policies::curriculum::detail
