#pragma once
// student_inputs: every step trains a segment on the student's own upstream output, the input it will
// see at inference, with the error accumulated by every earlier segment.

#include <string_view>

#include "lwcl/policies/curriculum/concept.hpp"

namespace lwcl::policies::curriculum {

struct student_inputs {
  static constexpr std::string_view name = "student_inputs";
  static constexpr bool uses_student_inputs = true;

  double student_fraction(index_t) const { return 1.0; }
};
static_assert(input_schedule<student_inputs>);

}  // namespace lwcl::policies::curriculum
