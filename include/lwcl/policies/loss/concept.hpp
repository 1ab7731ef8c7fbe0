#pragma once
// The loss policy kind: a segment's local loss on boundary features, or a logit loss (end-to-end KD),
// computed on any backend.

#include <concepts>
#include <type_traits>

#include "lwcl/policies/named.hpp"
#include "lwcl/tensor/tensor.hpp"

namespace lwcl::policies {

// What a loss compares: hidden states at a segment boundary, or LM logits (end-to-end KD).
enum class loss_target { features, logits };

// Requires: named_policy; P::target, a static constexpr loss_target; and a const
// p.compute(be, dstudent, scratch, student, teacher, grad_scale) returning the loss as a double and,
// when dstudent is non-empty, accumulating grad_scale * dloss/dstudent into it (the conventions of
// ops/distill_loss.hpp; scratch holds at least 2 * rows elements). compute is a template over the
// backend; the concept checks its signature against loss_check_backend, a stand-in that names no real
// backend, so that naming a loss does not pull a backend in.
struct loss_check_backend {};

template <class P>
concept loss_policy = named_policy<P> && requires(const P& p, loss_check_backend& be, const tensor& t, double scale) {
  requires std::same_as<std::remove_cv_t<decltype(P::target)>, loss_target>;
  { p.compute(be, t, t, t, t, scale) } -> std::same_as<double>;
};

}  // namespace lwcl::policies
