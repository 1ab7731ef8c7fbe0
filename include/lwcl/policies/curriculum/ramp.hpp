#pragma once
// ramp: move a segment from teacher inputs to student inputs over its training. The share of student
// inputs is 0 until step `start`, rises linearly to 1 at step `end`, and stays 1 after:
//   r(step) = clamp((step - start) / (end - start), 0, 1),   r = (step >= start) when start == end.
// The trainer uses r as the mix ratio or as the probability of a student batch.

#include <cmath>
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

  // The ramp from `start_fraction` to `end_fraction` of a visit of `visit_steps` steps, each rounded to
  // the nearest step.
  static ramp over(index_t visit_steps, double start_fraction, double end_fraction) {
    check(visit_steps >= 0 && 0 <= start_fraction && start_fraction <= end_fraction && end_fraction <= 1, name,
          ": over(", visit_steps, ", ", start_fraction, ", ", end_fraction,
          "), expected visit steps >= 0 and 0 <= start fraction <= end fraction <= 1");
    const auto at = [&](double f) { return static_cast<index_t>(std::lround(f * static_cast<double>(visit_steps))); };
    return {at(start_fraction), at(end_fraction)};
  }
};
static_assert(input_schedule<ramp>);

}  // namespace lwcl::policies::curriculum
