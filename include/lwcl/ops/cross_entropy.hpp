#pragma once
// Softmax cross-entropy of logits against integer targets, mean over the counted rows, with its gradient
// fused into the same pass. A negative target marks a row to ignore (padding, prompt tokens): it adds no
// loss, no gradient and does not count towards the mean.

#include <cmath>
#include <cstdint>

#include "lwcl/core/config.hpp"
#include "lwcl/core/math.hpp"
#include "lwcl/ops/common.hpp"
#include "lwcl/ops/fused.hpp"

namespace lwcl::ops {

namespace kernel {

// Per-row math shared by the row functor below and the fused CUDA kernel (backend/cuda/cross_entropy.cuh).
// The functor finds the row maximum, then sums exp(x - max) left to right; the kernel gathers the same
// (max, sum) pair in one read of the row, merging partial pairs by block reduction, so only the
// summation order differs between the backends.

// One term of the normaliser: exp(x - m) for the row maximum m (no overflow, the largest term is 1).
template <class T>
LWCL_HD_INLINE T cross_entropy_term(T x, T m) {
  return math::exp(x - m);
}
// log(sum exp(x)) from the row maximum m and the normaliser z = sum exp(x - m).
template <class T>
LWCL_HD_INLINE T cross_entropy_lse(T m, T z) {
  return m + math::log(z);
}
// The row's loss -log softmax(x)[target] = logsumexp(x) - x[target].
template <class T>
LWCL_HD_INLINE T cross_entropy_loss(T lse, T x_target) {
  return lse - x_target;
}
// The dlogits increment of one element: scale * (softmax(x) - onehot(target)). The probability is
// formed here from the log-sum-exp and never stored.
template <class T>
LWCL_HD_INLINE T cross_entropy_dx(T x, T lse, T scale, bool is_target) {
  return scale * (math::exp(x - lse) - (is_target ? T(1) : T(0)));
}

// A running row maximum m and normaliser z = sum exp(x - m) over the elements seen so far, updated one
// element at a time (one exp each: the normaliser is rescaled when the maximum moves) and merged with
// operator+, so that a block of threads can gather them in a single read of the row. Start from
// {-inf, 0}. Elements of -inf (masked logits) add nothing; a pair with z == 0 has seen only such
// elements and is dropped when merged, so the -inf - -inf of two empty pairs never forms a NaN.
template <class T>
struct cross_entropy_stats {
  T m;
  T z;
  LWCL_HD void add(T x) {
    if (x > m) {
      z = z * cross_entropy_term(m, x) + T(1);
      m = x;
    } else if (x > -static_cast<T>(INFINITY)) {
      z += cross_entropy_term(x, m);
    } else if (x != x) {
      z = x;  // a NaN logit makes the row's loss NaN, as in the functor
    }
  }
  LWCL_HD friend cross_entropy_stats operator+(const cross_entropy_stats& a, const cross_entropy_stats& b) {
    if (b.z == T(0)) return a;
    if (a.z == T(0)) return b;
    const cross_entropy_stats& hi = a.m >= b.m ? a : b;
    const cross_entropy_stats& lo = a.m >= b.m ? b : a;
    return {hi.m, hi.z + lo.z * cross_entropy_term(lo.m, hi.m)};
  }
};

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
  compute_t<T> scale;

  LWCL_HD void operator()(index_t row) const {
    using A = compute_t<T>;
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
    A m = x[0];
    for (index_t i = 1; i < V; ++i) m = math::max(m, A(x[i]));
    A z = 0;
    for (index_t i = 0; i < V; ++i) z += cross_entropy_term(A(x[i]), m);
    const A lse = cross_entropy_lse(m, z);
    row_loss[row] = T(cross_entropy_loss(lse, A(x[target])));
    if (!dlogits) return;
    T* g = dlogits + row * V;
    for (index_t i = 0; i < V; ++i) g[i] += cross_entropy_dx(A(x[i]), lse, scale, i == target);
  }
};

}  // namespace kernel

// Returns the mean cross-entropy over rows whose target is >= 0 (0 when every row is ignored) and, when
// dlogits is non-empty, accumulates grad_scale * d(mean loss)/d(logits) = grad_scale * (softmax - onehot)
// / count into it. logits, dlogits: (..., V); targets: i32 with one id per row (a target >= V is an
// error); row_loss: one element per row in the logits' dtype, left holding each row's loss (0 if ignored).
//
// A backend that declares fused_cross_entropy (ops/fused.hpp), with a member
// cross_entropy_rows(dlogits, row_loss, logits, targets, scale) (backend::cuda:
// a fused block-per-row kernel) runs it in place of the row functor for the loss-and-gradient pass.
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
  // Tested here rather than inside the dtype lambda below, where nvcc's front end does not discard the
  // call for a backend without the member.
  constexpr bool fused_rows = offers_fused_cross_entropy<Backend>;
  return dispatch_storage(op, logits.type, [&](auto t) -> double {
    using T = decltype(t);
    T* losses = row_loss.ptr<T>();
    const auto* ids = targets.ptr<std::int32_t>();
    be.for_each(N, kernel::cross_entropy_count_row<T>{losses, ids});
    const double count = be.sum(losses, N);
    const double scale = count > 0 ? grad_scale / count : 0.0;
    if constexpr (fused_rows)
      be.cross_entropy_rows(dlogits, row_loss, logits, targets, scale);
    else
      be.for_each(N, kernel::cross_entropy_row<T>{static_cast<T*>(dlogits.data), losses, logits.ptr<T>(), ids, V, static_cast<compute_t<T>>(scale)},
                  (dlogits.data ? 8 : 4) * V);
    return count > 0 ? be.sum(losses, N) / count : 0.0;
  });
}

}  // namespace lwcl::ops
