#pragma once
// front_to_back: visit segments in model order, 0, 1, ..., n - 1. The only order under which every
// segment trained on student inputs sees an upstream that is already trained.

#include <numeric>
#include <span>
#include <string_view>
#include <vector>

#include "lwcl/policies/curriculum/concept.hpp"

namespace lwcl::policies::curriculum {

struct front_to_back {
  static constexpr std::string_view name = "front_to_back";
  static constexpr bool needs_difficulty = false;

  std::vector<index_t> visiting_order(index_t n, std::span<const double>) const {
    std::vector<index_t> order(static_cast<std::size_t>(n));
    std::iota(order.begin(), order.end(), index_t{0});
    return order;
  }
};
static_assert(order_policy<front_to_back>);

}  // namespace lwcl::policies::curriculum
