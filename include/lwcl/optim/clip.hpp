#pragma once
// Gradient clipping by global L2 norm, as torch.nn.utils.clip_grad_norm_ does it. The gradients of a
// whole model (or segment) live in one flat buffer, so one call clips them all together.

#include <cmath>
#include <string_view>

#include "lwcl/core/config.hpp"
#include "lwcl/ops/common.hpp"

namespace lwcl::optim {

namespace kernel {

template <class T>
struct scale_inplace {
  T* x;
  compute_t<T> factor;

  LWCL_HD void operator()(index_t i) const { x[i] *= factor; }
};

}  // namespace kernel

// Returns the L2 norm of grad before clipping. When max_norm / (norm + 1e-6) < 1 (i.e. norm exceeds
// max_norm, up to PyTorch's 1e-6 guard) grad is scaled in place by that ratio. A non-finite norm
// throws, leaving grad untouched: continuing would write NaN into the parameters.
template <class Backend>
double clip_grad_norm(Backend& be, const tensor& grad, double max_norm) {
  constexpr std::string_view op = "clip_grad_norm";
  ops::expect_nonempty(op, "grad", grad);
  check(max_norm > 0 && std::isfinite(max_norm), op, ": max_norm is ", max_norm, ", expected a finite value > 0");
  return ops::dispatch_storage(op, grad.type, [&](auto t) {
    using T = decltype(t);
    T* g = grad.ptr<T>(op);
    const double norm = std::sqrt(be.sum_squares(g, grad.numel()));
    check(std::isfinite(norm), op, ": gradient norm is ", norm, " (non-finite) over ", grad.numel(), " elements of ",
          grad.describe());
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0) be.for_each(grad.numel(), kernel::scale_inplace<T>{g, static_cast<compute_t<T>>(coef)}, 1);
    return norm;
  });
}

}  // namespace lwcl::optim
