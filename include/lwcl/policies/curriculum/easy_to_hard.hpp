#pragma once
// easy_to_hard: visit segments from the lowest measured difficulty (initial local loss) to the highest,
// the curriculum-learning order: early, easy problems converge fast and stably. Equal difficulties keep
// model order.

#include <algorithm>
#include <numeric>
#include <span>
#include <string_view>
#include <vector>

#include "lwcl/policies/curriculum/concept.hpp"

namespace lwcl::policies::curriculum {

struct easy_to_hard {
  static constexpr std::string_view name = "easy_to_hard";
  static constexpr bool needs_difficulty = true;

  std::vector<index_t> visiting_order(index_t n, std::span<const double> difficulty) const {
    check(static_cast<index_t>(difficulty.size()) == n, name, ": got ", difficulty.size(),
          " segment difficulties, expected one per segment (", n, ")");
    std::vector<index_t> order(static_cast<std::size_t>(n));
    std::iota(order.begin(), order.end(), index_t{0});
    std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) {
      return difficulty[static_cast<std::size_t>(a)] < difficulty[static_cast<std::size_t>(b)];
    });
    return order;
  }
};
static_assert(order_policy<easy_to_hard>);

}  // namespace lwcl::policies::curriculum
