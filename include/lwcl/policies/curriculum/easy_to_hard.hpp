#pragma once
// easy_to_hard: visit segments from the lowest measured difficulty (initial local loss) to the highest,
// the curriculum-learning order: early, easy problems converge fast and stably. Equal difficulties keep
// model order.

#include <string_view>

#include "lwcl/policies/curriculum/by_difficulty.hpp"
#include "lwcl/policies/curriculum/concept.hpp"

namespace lwcl::policies::curriculum {

struct easy_to_hard : detail::by_difficulty<easy_to_hard, true> {
  static constexpr std::string_view name = "easy_to_hard";
};
static_assert(order_policy<easy_to_hard>);

}  // namespace lwcl::policies::curriculum
