#pragma once
// mse: the mean squared error over all elements: the plain reconstruction loss of a segment's
// output features.
// Forwards to ops::mse_loss (ops/distill_loss.hpp).

#include <string_view>

#include "lwcl/ops/distill_loss.hpp"
#include "lwcl/policies/loss/concept.hpp"

namespace lwcl::policies::loss {

struct mse {
  static constexpr std::string_view name = "mse";
  static constexpr loss_target target = loss_target::features;

  template <class Backend>
  double compute(Backend& be, const tensor& dstudent, const tensor& scratch, const tensor& student,
                 const tensor& teacher, double grad_scale = 1.0) const {
    return ops::mse_loss(be, dstudent, scratch, student, teacher, grad_scale);
  }
};
static_assert(loss_policy<mse>);

}  // namespace lwcl::policies::loss
