#pragma once
// LayerNorm over the last axis, forward and backward (gpt2, bert). Forward saves each row's mean and
// reciprocal standard deviation for the backward pass. Backward accumulates (+=) into dinp, dweight
// and dbias, like every backward op in lwcl.

#include <cmath>

#include "lwcl/core/config.hpp"
#include "lwcl/core/math.hpp"
#include "lwcl/ops/common.hpp"
#include "lwcl/ops/fused.hpp"

namespace lwcl::ops {

namespace kernel {

// Per-row math shared by the row functors below and the fused CUDA kernels (backend/cuda/norms.cuh).
// The functors form the row sums left to right; the kernels form the same sums by block reduction, so
// only the summation order differs between the backends.

template <class T>
LWCL_HD_INLINE T layernorm_mean(T sum, index_t C) {
  return sum / static_cast<T>(C);
}
// One term of the second (variance) pass: the squared deviation from the row mean.
template <class T>
LWCL_HD_INLINE T layernorm_sq_dev(T x, T mean) {
  return (x - mean) * (x - mean);
}
// rstd from the sum of squared deviations (two-pass statistics).
template <class T>
LWCL_HD_INLINE T layernorm_rstd(T sq_dev_sum, index_t C, T eps) {
  const T var = sq_dev_sum / static_cast<T>(C);
  return T(1) / math::sqrt(var + eps);
}
// rstd from the plain sum and sum of squares (one-pass statistics). E[x^2] - E[x]^2 cancels when
// |mean| >> std, hence the clamp; the two-pass form is the default for that reason.
template <class T>
LWCL_HD_INLINE T layernorm_rstd_one_pass(T sum, T sum_sq, index_t C, T eps) {
  const T m = sum / static_cast<T>(C);
  const T var = math::max(sum_sq / static_cast<T>(C) - m * m, T(0));
  return T(1) / math::sqrt(var + eps);
}
template <class T>
LWCL_HD_INLINE T layernorm_out(T x, T mean, T rstd, T weight, T bias) {
  return (x - mean) * rstd * weight + bias;
}

// The two row sums of the backward pass, sum(g) and sum(g * xhat) with g = dout * weight. operator+
// merges partial sums (the block reduction's combine).
template <class T>
struct layernorm_grad_sums {
  T g;
  T gx;
  LWCL_HD void add(T dy, T w, T x, T mean, T rstd) {
    const T gi = dy * w;
    g += gi;
    gx += gi * (x - mean) * rstd;
  }
  LWCL_HD friend layernorm_grad_sums operator+(const layernorm_grad_sums& a, const layernorm_grad_sums& b) {
    return {a.g + b.g, a.gx + b.gx};
  }
};

// The dinp increment of one element: rstd * (g - mean(g) - xhat * mean(g * xhat)).
template <class T>
LWCL_HD_INLINE T layernorm_dx(T dy, T w, T x, T mean, T rstd, T g_mean, T gx_mean) {
  const T xhat = (x - mean) * rstd;
  return rstd * (dy * w - g_mean - xhat * gx_mean);
}

template <class T>
struct layernorm_forward_row {
  T* out;
  T* mean;
  T* rstd;
  const T* inp;
  const T* weight;
  const T* bias;  // may be null
  index_t C;
  compute_t<T> eps;

  LWCL_HD void operator()(index_t row) const {
    using A = compute_t<T>;
    const T* x = inp + row * C;
    T* y = out + row * C;
    A sum = 0;
    for (index_t i = 0; i < C; ++i) sum += A(x[i]);
    const A m = layernorm_mean(sum, C);
    A sq = 0;
    for (index_t i = 0; i < C; ++i) sq += layernorm_sq_dev(A(x[i]), m);
    const A s = layernorm_rstd(sq, C, eps);
    for (index_t i = 0; i < C; ++i) y[i] = T(layernorm_out(A(x[i]), m, s, A(weight[i]), bias ? A(bias[i]) : A(0)));
    mean[row] = T(m);
    rstd[row] = T(s);
  }
};

// dinp for one row: rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * weight.
template <class T>
struct layernorm_backward_row {
  T* dinp;
  const T* dout;
  const T* inp;
  const T* weight;
  const T* mean;
  const T* rstd;
  index_t C;

  LWCL_HD void operator()(index_t row) const {
    const T* x = inp + row * C;
    const T* dy = dout + row * C;
    T* dx = dinp + row * C;
    using A = compute_t<T>;
    const A m = mean[row], s = rstd[row];
    layernorm_grad_sums<A> sums{0, 0};
    for (index_t i = 0; i < C; ++i) sums.add(A(dy[i]), A(weight[i]), A(x[i]), m, s);
    const A g_mean = sums.g / static_cast<A>(C), gx_mean = sums.gx / static_cast<A>(C);
    for (index_t i = 0; i < C; ++i) dx[i] += layernorm_dx(A(dy[i]), A(weight[i]), A(x[i]), m, s, g_mean, gx_mean);
  }
};

// dweight and dbias summed over all rows (deterministic: one writer per channel).
template <class T>
struct layernorm_backward_param {
  T* dweight;
  T* dbias;  // may be null
  const T* dout;
  const T* inp;
  const T* mean;
  const T* rstd;
  index_t N;
  index_t C;

  // One chunk of column_chunk adjacent channels.
  LWCL_HD void operator()(index_t chunk) const {
    const index_t c0 = chunk * column_chunk;
    const index_t n = C - c0 < column_chunk ? C - c0 : column_chunk;
    using A = compute_t<T>;
    A dw[column_chunk] = {}, db[column_chunk] = {};
    for (index_t r = 0; r < N; ++r) {
      const T* dy = dout + r * C + c0;
      const T* x = inp + r * C + c0;
      const A m = mean[r], s = rstd[r];
      for (index_t j = 0; j < n; ++j) {
        dw[j] += A(dy[j]) * (A(x[j]) - m) * s;
        db[j] += A(dy[j]);
      }
    }
    for (index_t j = 0; j < n; ++j) {
      dweight[c0 + j] += dw[j];
      if (dbias) dbias[c0 + j] += db[j];
    }
  }
};

}  // namespace kernel

// out = (inp - mean) * rstd * weight + bias over the last axis. inp, out: (..., C); weight, bias: (C);
// mean, rstd: one value per row. bias may be an empty tensor. A backend that declares the fused kernel (ops/fused.hpp) with a member layernorm_forward
// of the same arguments (backend::cuda: a fused block-per-row kernel) runs it instead of the row functor.
template <class Backend>
void layernorm_forward(Backend& be, const tensor& out, const tensor& mean, const tensor& rstd, const tensor& inp,
                       const tensor& weight, const tensor& bias, double eps = 1e-5) {
  constexpr std::string_view op = "layernorm_forward";
  expect_nonempty(op, "inp", inp);
  const index_t C = inp.shape.last(), N = rows_of(inp);
  expect_shape(op, "out", out, inp.shape);
  expect_shape(op, "weight", weight, shape{C});
  if (bias.data) expect_shape(op, "bias", bias, shape{C});
  expect_numel(op, "mean", mean, N);
  expect_numel(op, "rstd", rstd, N);
  expect_same_dtype(op, {{"inp", &inp}, {"out", &out}, {"weight", &weight}, {"bias", &bias}, {"mean", &mean}, {"rstd", &rstd}});
  if constexpr (offers_fused_layernorm<Backend>) {
    be.layernorm_forward(out, mean, rstd, inp, weight, bias, eps);
  } else {
    dispatch_storage(op, inp.type, [&](auto t) {
      using T = decltype(t);
      be.for_each(N, kernel::layernorm_forward_row<T>{out.ptr<T>(), mean.ptr<T>(), rstd.ptr<T>(), inp.ptr<T>(), weight.ptr<T>(),
                                                      static_cast<const T*>(bias.data), C, static_cast<compute_t<T>>(eps)},
                  8 * C);
    });
  }
}

// Accumulates the gradients of layernorm_forward: dinp += ..., dweight += ..., dbias += ... (dbias may
// be empty when the forward had no bias). A backend that declares fused_layernorm, with its member layernorm_backward of the same arguments
// replaces the row functors, as in layernorm_forward.
template <class Backend>
void layernorm_backward(Backend& be, const tensor& dinp, const tensor& dweight, const tensor& dbias, const tensor& dout,
                        const tensor& inp, const tensor& weight, const tensor& mean, const tensor& rstd) {
  constexpr std::string_view op = "layernorm_backward";
  expect_nonempty(op, "inp", inp);
  const index_t C = inp.shape.last(), N = rows_of(inp);
  expect_shape(op, "dout", dout, inp.shape);
  expect_shape(op, "dinp", dinp, inp.shape);
  expect_shape(op, "weight", weight, shape{C});
  expect_shape(op, "dweight", dweight, shape{C});
  if (dbias.data) expect_shape(op, "dbias", dbias, shape{C});
  expect_numel(op, "mean", mean, N);
  expect_numel(op, "rstd", rstd, N);
  expect_same_dtype(op, {{"inp", &inp}, {"dout", &dout}, {"dinp", &dinp}, {"weight", &weight}, {"dweight", &dweight},
                         {"dbias", &dbias}, {"mean", &mean}, {"rstd", &rstd}});
  if constexpr (offers_fused_layernorm<Backend>) {
    be.layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd);
  } else {
    dispatch_storage(op, inp.type, [&](auto t) {
      using T = decltype(t);
      be.for_each(N, kernel::layernorm_backward_row<T>{dinp.ptr<T>(), dout.ptr<T>(), inp.ptr<T>(), weight.ptr<T>(), mean.ptr<T>(),
                                                       rstd.ptr<T>(), C},
                  8 * C);
      be.for_each(column_chunks(C),
                  kernel::layernorm_backward_param<T>{dweight.ptr<T>(), static_cast<T*>(dbias.data), dout.ptr<T>(), inp.ptr<T>(),
                                                      mean.ptr<T>(), rstd.ptr<T>(), N, C},
                  4 * column_chunk * N);
    });
  }
}

}  // namespace lwcl::ops
