#pragma once
// Learning-rate schedule: linear warm-up, then cosine decay to a floor. Steps are 1-based (the step
// about to be taken), so a trainer asks lr(step) right before adamw_step(..., step, lr).

#include <cmath>
#include <numbers>

#include "lwcl/core/error.hpp"

namespace lwcl::optim {

// lr(s) = max_lr * s / warmup_steps                                for 1 <= s <= warmup_steps
//       = min_lr + (max_lr - min_lr) * (1 + cos(pi * t)) / 2,
//         t = (s - warmup_steps) / (total_steps - warmup_steps)     for warmup_steps < s <= total_steps
//       = min_lr                                                    for s > total_steps
// The warm-up starts at max_lr / warmup_steps rather than 0, so no step is wasted on a zero update.
// With warmup_steps == 0 the cosine starts at step 1 (already slightly below max_lr).
struct cosine_schedule {
  double max_lr = 0;
  double min_lr = 0;
  long warmup_steps = 0;
  long total_steps = 0;

  void validate() const {
    constexpr const char* who = "cosine_schedule";
    check(std::isfinite(max_lr) && max_lr >= 0, who, ": max_lr is ", max_lr, ", expected a finite value >= 0");
    check(std::isfinite(min_lr) && min_lr >= 0, who, ": min_lr is ", min_lr, ", expected a finite value >= 0");
    check(warmup_steps >= 0, who, ": warmup_steps is ", warmup_steps, ", expected >= 0");
    check(total_steps >= warmup_steps, who, ": total_steps (", total_steps, ") is less than warmup_steps (", warmup_steps,
          ")");
  }

  double lr(long step) const {
    validate();
    check(step >= 1, "cosine_schedule: step ", step, " is not 1-based (expected >= 1)");
    if (step <= warmup_steps) return max_lr * static_cast<double>(step) / static_cast<double>(warmup_steps);
    if (step >= total_steps) return min_lr;
    const double t = static_cast<double>(step - warmup_steps) / static_cast<double>(total_steps - warmup_steps);
    return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + std::cos(std::numbers::pi * t));
  }
};

}  // namespace lwcl::optim
