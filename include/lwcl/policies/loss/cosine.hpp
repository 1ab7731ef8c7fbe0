#pragma once
// cosine: the mean over tokens of 1 - cos(student, teacher): matches directions and ignores feature
// scale.
// Forwards to ops::cosine_loss (ops/distill_loss.hpp).

#include <string_view>

#include "lwcl/ops/distill_loss.hpp"
#include "lwcl/policies/loss/concept.hpp"

namespace lwcl::policies::loss {

struct cosine {
  static constexpr std::string_view name = "cosine";
  static constexpr loss_target target = loss_target::features;

  template <class Backend>
  double compute(Backend& be, const tensor& dstudent, const tensor& scratch, const tensor& student,
                 const tensor& teacher, double grad_scale = 1.0) const {
    return ops::cosine_loss(be, dstudent, scratch, student, teacher, grad_scale);
  }
};
static_assert(loss_policy<cosine>);

}  // namespace lwcl::policies::loss
