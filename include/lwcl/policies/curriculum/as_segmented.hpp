#pragma once
// as_segmented: train the stages the segmentation policy gives, unchanged: one stage for every
// segmentation except `growing`, whose segments grow stage by stage. final_kd adds an end-to-end logit
// distillation stage after the last one.

#include <string_view>

#include "lwcl/policies/curriculum/concept.hpp"

namespace lwcl::policies::curriculum {

struct as_segmented {
  static constexpr std::string_view name = "as_segmented";

  bool final_kd = false;

  segment_stages stages(const segment_stages& from_segmentation) const {
    check(!from_segmentation.empty(), name, ": the segmentation gave no stages");
    return from_segmentation;
  }
};
static_assert(growth_policy<as_segmented>);

}  // namespace lwcl::policies::curriculum
