#pragma once
// ramp: move a segment from teacher inputs to student inputs over its training. The share of student
// inputs is 0 until step `start`, rises linearly to 1 at step `end`, and stays 1 after:
//   r(step) = clamp((step - start) / (end - start), 0, 1),   r = (step >= start) when start == end.
// The trainer uses r as the mix ratio or as the probability of a student batch.

#include <string_view>

#include "lwcl/policies/curriculum/concept.hpp"

namespace lwcl::policies::curriculum {

struct ramp {
  static constexpr std::string_view name = "ramp";
  static constexpr bool uses_student_inputs = true;

  index_t start = 0;  // last step on teacher inputs alone
  index_t end = 0;    // first step on student inputs alone

  double student_fraction(index_t step) const {
    check(0 <= start && start <= end, name, ": start ", start, ", end ", end, ", expected 0 <= start <= end steps");
    if (step >= end) return 1.0;
    if (step <= start) return 0.0;
    return static_cast<double>(step - start) / static_cast<double>(end - start);
  }
};
static_assert(input_schedule<ramp>);

}  // namespace lwcl::policies::curriculum
