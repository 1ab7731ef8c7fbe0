#pragma once
// nmse: the squared error relative to the teacher's energy, sum (s - t)^2 / sum t^2: comparable
// across depths whose feature scales differ, so segment difficulties (initial losses) can be
// ranked. The default local loss.
// Forwards to ops::nmse_loss (ops/distill_loss.hpp).

#include <string_view>

#include "lwcl/ops/distill_loss.hpp"
#include "lwcl/policies/loss/concept.hpp"

namespace lwcl::policies::loss {

struct nmse {
  static constexpr std::string_view name = "nmse";
  static constexpr loss_target target = loss_target::features;

  template <class Backend>
  double compute(Backend& be, const tensor& dstudent, const tensor& scratch, const tensor& student,
                 const tensor& teacher, double grad_scale = 1.0) const {
    return ops::nmse_loss(be, dstudent, scratch, student, teacher, grad_scale);
  }
};
static_assert(loss_policy<nmse>);

}  // namespace lwcl::policies::loss
