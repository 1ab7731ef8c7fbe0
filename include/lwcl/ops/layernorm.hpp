#pragma once
// LayerNorm over the last axis, forward and backward (gpt2, bert). Forward saves each row's mean and
// reciprocal standard deviation for the backward pass. Backward accumulates (+=) into dinp, dweight
// and dbias, like every backward op in lwcl.

#include <cmath>

#include "lwcl/core/config.hpp"
#include "lwcl/core/math.hpp"
#include "lwcl/ops/common.hpp"

namespace lwcl::ops {

namespace kernel {

template <class T>
struct layernorm_forward_row {
  T* out;
  T* mean;
  T* rstd;
  const T* inp;
  const T* weight;
  const T* bias;  // may be null
  index_t C;
  T eps;

  LWCL_HD void operator()(index_t row) const {
    const T* x = inp + row * C;
    T* y = out + row * C;
    T m = 0;
    for (index_t i = 0; i < C; ++i) m += x[i];
    m /= static_cast<T>(C);
    T v = 0;
    for (index_t i = 0; i < C; ++i) v += (x[i] - m) * (x[i] - m);
    v /= static_cast<T>(C);
    const T s = T(1) / math::sqrt(v + eps);
    for (index_t i = 0; i < C; ++i) y[i] = (x[i] - m) * s * weight[i] + (bias ? bias[i] : T(0));
    mean[row] = m;
    rstd[row] = s;
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
    const T m = mean[row], s = rstd[row];
    T g_mean = 0, gx_mean = 0;
    for (index_t i = 0; i < C; ++i) {
      const T g = dy[i] * weight[i];
      g_mean += g;
      gx_mean += g * (x[i] - m) * s;
    }
    g_mean /= static_cast<T>(C);
    gx_mean /= static_cast<T>(C);
    for (index_t i = 0; i < C; ++i) {
      const T xhat = (x[i] - m) * s;
      dx[i] += s * (dy[i] * weight[i] - g_mean - xhat * gx_mean);
    }
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
    T dw[column_chunk] = {}, db[column_chunk] = {};
    for (index_t r = 0; r < N; ++r) {
      const T* dy = dout + r * C + c0;
      const T* x = inp + r * C + c0;
      const T m = mean[r], s = rstd[r];
      for (index_t j = 0; j < n; ++j) {
        dw[j] += dy[j] * (x[j] - m) * s;
        db[j] += dy[j];
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
// mean, rstd: one value per row. bias may be an empty tensor.
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
  dispatch_float(op, inp.type, [&](auto t) {
    using T = decltype(t);
    be.for_each(N, kernel::layernorm_forward_row<T>{out.ptr<T>(), mean.ptr<T>(), rstd.ptr<T>(), inp.ptr<T>(), weight.ptr<T>(),
                                                    static_cast<const T*>(bias.data), C, static_cast<T>(eps)},
                8 * C);
  });
}

// Accumulates the gradients of layernorm_forward: dinp += ..., dweight += ..., dbias += ... (dbias may
// be empty when the forward had no bias).
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
  dispatch_float(op, inp.type, [&](auto t) {
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

}  // namespace lwcl::ops
