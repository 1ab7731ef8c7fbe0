#pragma once
// logit_kl: Hinton's distillation loss on LM logits, tau^2 KL(softmax(t / tau) || softmax(s / tau))
// averaged over tokens, for end-to-end KD (the baseline and the curriculum's optional final stage).
// Forwards to ops::logit_kl_loss (ops/distill_loss.hpp).

#include <string_view>

#include "lwcl/ops/distill_loss.hpp"
#include "lwcl/policies/loss/concept.hpp"

namespace lwcl::policies::loss {

struct logit_kl {
  static constexpr std::string_view name = "logit_kl";
  static constexpr loss_target target = loss_target::logits;

  double temperature = 1.0;  // tau

  template <class Backend>
  double compute(Backend& be, const tensor& dstudent, const tensor& scratch, const tensor& student,
                 const tensor& teacher, double grad_scale = 1.0) const {
    return ops::logit_kl_loss(be, dstudent, scratch, student, teacher, temperature, grad_scale);
  }
};
static_assert(loss_policy<logit_kl>);

}  // namespace lwcl::policies::loss
