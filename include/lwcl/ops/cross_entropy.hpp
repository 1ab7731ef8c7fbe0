#pragma once
// Softmax cross-entropy of logits against integer targets, mean over the counted rows, with its gradient
// fused into the same pass. A negative target marks a row to ignore (padding, prompt tokens): it adds no
// loss, no gradient and does not count towards the mean.

#include <cmath>
#include <cstdint>

#include "lwcl/core/config.hpp"
#include "lwcl/core/math.hpp"
#include "lwcl/ops/common.hpp"

namespace lwcl::ops {

namespace kernel {

// 1 for a counted row, 0 for an ignored one; summed by the backend to give the mean's denominator.
template <class T>
struct cross_entropy_count_row {
  T* counted;
  const std::int32_t* targets;
  LWCL_HD void operator()(index_t row) const { counted[row] = targets[row] >= 0 ? T(1) : T(0); }
};

// One row: loss = logsumexp(x) - x[target] with the maximum subtracted before exponentiating, and
// dlogits += scale * (softmax(x) - onehot(target)). A target >= V (rejected on the host before launch)
// gives a NaN loss on a device rather than an out-of-bounds read.
template <class T>
struct cross_entropy_row {
  T* dlogits;  // may be null: loss only
  T* row_loss;
  const T* logits;
  const std::int32_t* targets;
  index_t V;
  T scale;

  LWCL_HD void operator()(index_t row) const {
    const index_t target = targets[row];
    if (target < 0) {
      row_loss[row] = T(0);
      return;
    }
    if (target >= V) {
      row_loss[row] = static_cast<T>(NAN);
      return;
    }
    const T* x = logits + row * V;
    T m = x[0];
    for (index_t i = 1; i < V; ++i) m = math::max(m, x[i]);
    T z = 0;
    for (index_t i = 0; i < V; ++i) z += math::exp(x[i] - m);
    const T lse = m + math::log(z);
    row_loss[row] = lse - x[target];
    if (!dlogits) return;
    T* g = dlogits + row * V;
    for (index_t i = 0; i < V; ++i) g[i] += scale * (math::exp(x[i] - lse) - (i == target ? T(1) : T(0)));
  }
};

}  // namespace kernel

// Returns the mean cross-entropy over rows whose target is >= 0 (0 when every row is ignored) and, when
// dlogits is non-empty, accumulates grad_scale * d(mean loss)/d(logits) = grad_scale * (softmax - onehot)
// / count into it. logits, dlogits: (..., V); targets: i32 with one id per row (a target >= V is an
// error); row_loss: one element per row in the logits' dtype, left holding each row's loss (0 if ignored).
//
// The count of counted rows is needed before the gradient can be scaled. It is found the same way on
// every backend: a first pass writes 1 or 0 per row into row_loss and the backend sums it; the fused
// loss-and-gradient pass then overwrites row_loss with the losses, and a second sum gives the mean.
template <class Backend>
double cross_entropy(Backend& be, const tensor& dlogits, const tensor& row_loss, const tensor& logits, const tensor& targets,
                     double grad_scale = 1.0) {
  constexpr std::string_view op = "cross_entropy";
  expect_nonempty(op, "logits", logits);
  const index_t V = logits.shape.last(), N = rows_of(logits);
  expect_nonempty(op, "targets", targets);
  check(targets.type == dtype::i32, op, ": targets has dtype ", dtype_name(targets.type), ", expected i32");
  check(targets.numel() == N, op, ": targets has shape ", targets.shape.str(), " (", targets.numel(),
        " elements), expected one per row of logits ", logits.shape.str(), " (", N, ")");
  expect_numel(op, "row_loss", row_loss, N);
  if (dlogits.data) expect_shape(op, "dlogits", dlogits, logits.shape);
  expect_same_dtype(op, {{"logits", &logits}, {"row_loss", &row_loss}, {"dlogits", &dlogits}});
  if constexpr (!Backend::is_device) {
    const auto* ids = static_cast<const std::int32_t*>(targets.data);
    for (index_t r = 0; r < N; ++r)
      check(ids[r] < V, op, ": target ", ids[r], " at row ", r, " is outside the vocabulary [0, ", V,
            ") (negative targets are ignored)");
  }
  return dispatch_float(op, logits.type, [&](auto t) -> double {
    using T = decltype(t);
    T* losses = row_loss.ptr<T>();
    const auto* ids = targets.ptr<std::int32_t>();
    be.for_each(N, kernel::cross_entropy_count_row<T>{losses, ids});
    const double count = be.sum(losses, N);
    const double scale = count > 0 ? grad_scale / count : 0.0;
    be.for_each(N, kernel::cross_entropy_row<T>{static_cast<T*>(dlogits.data), losses, logits.ptr<T>(), ids, V, static_cast<T>(scale)},
                (dlogits.data ? 8 : 4) * V);
    return count > 0 ? be.sum(losses, N) / count : 0.0;
  });
}

}  // namespace lwcl::ops
