#pragma once
// RMSNorm over the last axis, forward and backward (llama, qwen2): no mean subtraction and no bias.
// Forward saves each row's reciprocal root mean square for the backward pass, which accumulates (+=)
// into dinp and dweight.

#include "lwcl/core/config.hpp"
#include "lwcl/core/math.hpp"
#include "lwcl/ops/common.hpp"
#include "lwcl/ops/fused.hpp"

namespace lwcl::ops {

namespace kernel {

// Per-row math shared by the row functors below and the fused CUDA kernels (backend/cuda/norms.cuh),
// which form the row sums by block reduction instead of left to right.

// rstd from the row's sum of squares.
template <class T>
LWCL_HD_INLINE T rmsnorm_rstd(T sum_sq, index_t C, T eps) {
  const T ms = sum_sq / static_cast<T>(C);
  return T(1) / math::sqrt(ms + eps);
}
template <class T>
LWCL_HD_INLINE T rmsnorm_out(T x, T rstd, T weight) {
  return x * rstd * weight;
}
// One term of the backward row sum, g * x with g = dout * weight.
template <class T>
LWCL_HD_INLINE T rmsnorm_grad_term(T dy, T w, T x) {
  return dy * w * x;
}
// The dinp increment of one element: s * g - s^3 * x * mean(g * x), since d s / d x = -s^3 x / C.
template <class T>
LWCL_HD_INLINE T rmsnorm_dx(T dy, T w, T x, T rstd, T gx_mean) {
  const T s3 = rstd * rstd * rstd;
  return rstd * dy * w - s3 * x * gx_mean;
}

template <class T>
struct rmsnorm_forward_row {
  T* out;
  T* rstd;
  const T* inp;
  const T* weight;
  index_t C;
  compute_t<T> eps;

  LWCL_HD void operator()(index_t row) const {
    using A = compute_t<T>;
    const T* x = inp + row * C;
    T* y = out + row * C;
    A sq = 0;
    for (index_t i = 0; i < C; ++i) sq += A(x[i]) * A(x[i]);
    const A s = rmsnorm_rstd(sq, C, eps);
    for (index_t i = 0; i < C; ++i) y[i] = T(rmsnorm_out(A(x[i]), s, A(weight[i])));
    rstd[row] = T(s);
  }
};

template <class T>
struct rmsnorm_backward_row {
  T* dinp;
  const T* dout;
  const T* inp;
  const T* weight;
  const T* rstd;
  index_t C;

  LWCL_HD void operator()(index_t row) const {
    const T* x = inp + row * C;
    const T* dy = dout + row * C;
    T* dx = dinp + row * C;
    using A = compute_t<T>;
    const A s = rstd[row];
    A gx = 0;
    for (index_t i = 0; i < C; ++i) gx += rmsnorm_grad_term(A(dy[i]), A(weight[i]), A(x[i]));
    const A gx_mean = gx / static_cast<A>(C);
    for (index_t i = 0; i < C; ++i) dx[i] += rmsnorm_dx(A(dy[i]), A(weight[i]), A(x[i]), s, gx_mean);
  }
};

// dweight for one channel, summed over all rows (deterministic: one writer per channel).
template <class T>
struct rmsnorm_backward_weight {
  T* dweight;
  const T* dout;
  const T* inp;
  const T* rstd;
  index_t N;
  index_t C;

  // One chunk of column_chunk adjacent channels.
  LWCL_HD void operator()(index_t chunk) const {
    const index_t c0 = chunk * column_chunk;
    const index_t n = C - c0 < column_chunk ? C - c0 : column_chunk;
    using A = compute_t<T>;
    A dw[column_chunk] = {};
    for (index_t r = 0; r < N; ++r) {
      const T* dy = dout + r * C + c0;
      const T* x = inp + r * C + c0;
      for (index_t j = 0; j < n; ++j) dw[j] += A(dy[j]) * A(x[j]) * A(rstd[r]);
    }
    for (index_t j = 0; j < n; ++j) dweight[c0 + j] += dw[j];
  }
};

}  // namespace kernel

// out = inp * rstd * weight over the last axis with rstd = 1 / sqrt(mean(inp^2) + eps). inp, out: (..., C);
// weight: (C); rstd: one value per row, saved for rmsnorm_backward. eps is the model's rms_norm_eps. A
// backend that declares the fused kernel (ops/fused.hpp), with a member rmsnorm_forward of the same arguments (backend::cuda: a fused block-per-row
// kernel) runs it instead of the row functor.
template <class Backend>
void rmsnorm_forward(Backend& be, const tensor& out, const tensor& rstd, const tensor& inp, const tensor& weight, double eps) {
  constexpr std::string_view op = "rmsnorm_forward";
  expect_nonempty(op, "inp", inp);
  const index_t C = inp.shape.last(), N = rows_of(inp);
  expect_shape(op, "out", out, inp.shape);
  expect_shape(op, "weight", weight, shape{C});
  expect_numel(op, "rstd", rstd, N);
  expect_same_dtype(op, {{"inp", &inp}, {"out", &out}, {"weight", &weight}, {"rstd", &rstd}});
  check(eps >= 0, op, ": eps is ", eps, ", expected a value >= 0");
  if constexpr (offers_fused_rmsnorm<Backend>) {
    be.rmsnorm_forward(out, rstd, inp, weight, eps);
  } else {
    dispatch_storage(op, inp.type, [&](auto t) {
      using T = decltype(t);
      be.for_each(N, kernel::rmsnorm_forward_row<T>{out.ptr<T>(), rstd.ptr<T>(), inp.ptr<T>(), weight.ptr<T>(), C, static_cast<compute_t<T>>(eps)},
                  5 * C);
    });
  }
}

// Accumulates the gradients of rmsnorm_forward: dinp += ..., dweight += ...; rstd is the forward's. A
// backend member rmsnorm_backward of the same arguments replaces the row functors.
template <class Backend>
void rmsnorm_backward(Backend& be, const tensor& dinp, const tensor& dweight, const tensor& dout, const tensor& inp,
                      const tensor& weight, const tensor& rstd) {
  constexpr std::string_view op = "rmsnorm_backward";
  expect_nonempty(op, "inp", inp);
  const index_t C = inp.shape.last(), N = rows_of(inp);
  expect_shape(op, "dout", dout, inp.shape);
  expect_shape(op, "dinp", dinp, inp.shape);
  expect_shape(op, "weight", weight, shape{C});
  expect_shape(op, "dweight", dweight, shape{C});
  expect_numel(op, "rstd", rstd, N);
  expect_same_dtype(op, {{"inp", &inp}, {"dout", &dout}, {"dinp", &dinp}, {"weight", &weight}, {"dweight", &dweight}, {"rstd", &rstd}});
  if constexpr (offers_fused_rmsnorm<Backend>) {
    be.rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd);
  } else {
    dispatch_storage(op, inp.type, [&](auto t) {
      using T = decltype(t);
      be.for_each(N, kernel::rmsnorm_backward_row<T>{dinp.ptr<T>(), dout.ptr<T>(), inp.ptr<T>(), weight.ptr<T>(), rstd.ptr<T>(), C},
                  7 * C);
      be.for_each(column_chunks(C), kernel::rmsnorm_backward_weight<T>{dweight.ptr<T>(), dout.ptr<T>(), inp.ptr<T>(), rstd.ptr<T>(), N, C},
                  3 * column_chunk * N);
    });
  }
}

}  // namespace lwcl::ops
