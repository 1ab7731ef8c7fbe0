#pragma once
// teacher_inputs: every step trains a segment on the teacher's boundary features. The easy, clean
// local task: segments are independent, so they may run in any order or in parallel, but none learns
// to absorb the error its upstream will hand it at inference.

#include <string_view>

#include "lwcl/policies/curriculum/concept.hpp"

namespace lwcl::policies::curriculum {

struct teacher_inputs {
  static constexpr std::string_view name = "teacher_inputs";
  static constexpr bool uses_student_inputs = false;

  double student_fraction(index_t) const { return 0.0; }
};
static_assert(input_schedule<teacher_inputs>);

}  // namespace lwcl::policies::curriculum
