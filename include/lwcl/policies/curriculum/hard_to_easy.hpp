#pragma once
// hard_to_easy: visit segments from the highest measured difficulty to the lowest: the anti-curriculum
// ablation for easy_to_hard. Equal difficulties keep model order.

#include <algorithm>
#include <numeric>
#include <span>
#include <string_view>
#include <vector>

#include "lwcl/policies/curriculum/concept.hpp"

namespace lwcl::policies::curriculum {

struct hard_to_easy {
  static constexpr std::string_view name = "hard_to_easy";
  static constexpr bool needs_difficulty = true;

  std::vector<index_t> visiting_order(index_t n, std::span<const double> difficulty) const {
    check(static_cast<index_t>(difficulty.size()) == n, name, ": got ", difficulty.size(),
          " segment difficulties, expected one per segment (", n, ")");
    std::vector<index_t> order(static_cast<std::size_t>(n));
    std::iota(order.begin(), order.end(), index_t{0});
    std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) {
      return difficulty[static_cast<std::size_t>(a)] > difficulty[static_cast<std::size_t>(b)];
    });
    return order;
  }
};
static_assert(order_policy<hard_to_easy>);

}  // namespace lwcl::policies::curriculum
