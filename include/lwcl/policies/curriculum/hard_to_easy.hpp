#pragma once
// hard_to_easy: visit segments from the highest measured difficulty to the lowest: the anti-curriculum
// ablation for easy_to_hard. Equal difficulties keep model order.

#include <string_view>

#include "lwcl/policies/curriculum/by_difficulty.hpp"
#include "lwcl/policies/curriculum/concept.hpp"

namespace lwcl::policies::curriculum {

struct hard_to_easy : detail::by_difficulty<hard_to_easy, false> {
  static constexpr std::string_view name = "hard_to_easy";
};
static_assert(order_policy<hard_to_easy>);

}  // namespace lwcl::policies::curriculum
