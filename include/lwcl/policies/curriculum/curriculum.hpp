#pragma once
// curriculum<Order, Inputs, Growth>: the three axes of the layer-wise curriculum composed into one
// policy. Every stage that Growth makes of the segmentation becomes one phase whose segments are
// visited in Order and trained on inputs following the Inputs schedule; Growth's final_kd closes with
// end-to-end logit distillation. curriculum<easy_to_hard, ramp, doubling> is LWCL with all three axes.

#include <span>
#include <string_view>
#include <vector>

#include "lwcl/policies/curriculum/concept.hpp"
#include "lwcl/policies/curriculum/as_segmented.hpp"
#include "lwcl/policies/curriculum/front_to_back.hpp"
#include "lwcl/policies/curriculum/student_inputs.hpp"
#include "lwcl/policies/name.hpp"

namespace lwcl::policies::curriculum {

namespace detail {
struct curriculum_head {
  static constexpr std::string_view name = "curriculum";
};
}  // namespace detail

template <order_policy Order = front_to_back, input_schedule Inputs = student_inputs,
          growth_policy Growth = as_segmented>
struct curriculum {
  static constexpr std::string_view name =
      policies::detail::template_name<detail::curriculum_head, Order, Inputs, Growth>::value;

  Order order{};
  Inputs inputs{};
  Growth growth{};

  std::vector<curriculum_phase> phases(const segment_stages& from_segmentation) const {
    std::vector<curriculum_phase> out;
    for (auto& segs : growth.stages(from_segmentation))
      out.push_back({out.size(), std::move(segs), Inputs::uses_student_inputs, Order::needs_difficulty, Order::name,
                     Inputs::name});
    return out;
  }
  std::vector<index_t> visiting_order(const curriculum_phase& phase, std::span<const double> difficulty) const {
    return order.visiting_order(static_cast<index_t>(phase.segments.size()), difficulty);
  }
  double student_fraction(const curriculum_phase&, index_t step) const { return inputs.student_fraction(step); }
  bool has_final_kd() const { return growth.final_kd; }
};
static_assert(curriculum_policy<curriculum<>>);

}  // namespace lwcl::policies::curriculum
