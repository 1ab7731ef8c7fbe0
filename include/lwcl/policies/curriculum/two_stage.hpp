#pragma once
// two_stage: the default curriculum, our reading of the LWCL paper. Per stage of the segmentation, phase
// 1 trains every segment on teacher inputs (independent, so in any order: Stage1Order), then phase 2
// walks the segments front to back on student inputs. final_kd closes with end-to-end logit KD.

#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "lwcl/policies/curriculum/concept.hpp"
#include "lwcl/policies/curriculum/front_to_back.hpp"
#include "lwcl/policies/curriculum/student_inputs.hpp"
#include "lwcl/policies/curriculum/teacher_inputs.hpp"
#include "lwcl/policies/name.hpp"

namespace lwcl::policies::curriculum {

namespace detail {
struct two_stage_head {
  static constexpr std::string_view name = "two_stage";
};
}  // namespace detail

template <order_policy Stage1Order = front_to_back>
struct two_stage {
  // "two_stage" for the default, "two_stage<easy_to_hard>" when stage 1's order is chosen.
  static constexpr std::string_view name =
      std::is_same_v<Stage1Order, front_to_back>
          ? detail::two_stage_head::name
          : policies::detail::template_name<detail::two_stage_head, Stage1Order>::value;

  Stage1Order stage1_order{};
  bool final_kd = false;

  // Phase 2 goes front to back because each segment must read student features refreshed by the
  // segments retrained before it; phase 1 reads teacher features only, so its order is free.
  std::vector<curriculum_phase> phases(const segment_stages& from_segmentation) const {
    std::vector<curriculum_phase> out;
    for (const auto& segs : from_segmentation) {
      out.push_back({out.size(), segs, false, Stage1Order::needs_difficulty, Stage1Order::name, teacher_inputs::name});
      out.push_back({out.size(), segs, true, false, front_to_back::name, student_inputs::name});
    }
    return out;
  }
  std::vector<index_t> visiting_order(const curriculum_phase& phase, std::span<const double> difficulty) const {
    const auto n = static_cast<index_t>(phase.segments.size());
    return is_teacher_phase(phase) ? stage1_order.visiting_order(n, difficulty)
                                   : front_to_back{}.visiting_order(n, difficulty);
  }
  double student_fraction(const curriculum_phase& phase, index_t step) const {
    return is_teacher_phase(phase) ? teacher_inputs{}.student_fraction(step) : student_inputs{}.student_fraction(step);
  }
  bool has_final_kd() const { return final_kd; }

 private:
  static bool is_teacher_phase(const curriculum_phase& phase) { return phase.index % 2 == 0; }
};
static_assert(curriculum_policy<two_stage<>>);
static_assert(two_stage<>::name == "two_stage");

}  // namespace lwcl::policies::curriculum
