#pragma once
// Fully connected layer y = x W^T + b with W in PyTorch's (out, in) layout, so checkpoint weights are
// used as stored. Both passes are GEMMs on the backend; only the bias add and its column sums are
// functors. Backward accumulates (+=) into dinp, dweight and dbias, like every backward op in lwcl.

#include <cstdint>

#include "lwcl/core/config.hpp"
#include "lwcl/ops/activation.hpp"
#include "lwcl/ops/common.hpp"
#include "lwcl/ops/fused.hpp"

namespace lwcl::ops {

namespace kernel {

template <class T>
struct linear_bias_fill_row {
  T* out;
  const T* bias;
  index_t OC;

  // Row r of out starts as the bias; the GEMM then adds inp @ weight^T with beta = 1, which saves a
  // second pass over out.
  LWCL_HD void operator()(index_t r) const {
    T* o = out + r * OC;
    for (index_t j = 0; j < OC; ++j) o[j] = bias[j];
  }
};

// Column sums of dout, one writer per output channel so that the result does not depend on threading.
template <class T>
struct linear_bias_grad {
  T* dbias;
  const T* dout;
  index_t N;
  index_t OC;

  // One chunk of column_chunk adjacent columns.
  LWCL_HD void operator()(index_t chunk) const {
    const index_t c0 = chunk * column_chunk;
    const index_t n = OC - c0 < column_chunk ? OC - c0 : column_chunk;
    compute_t<T> s[column_chunk] = {};
    for (index_t r = 0; r < N; ++r) {
      const T* row = dout + r * OC + c0;
      for (index_t j = 0; j < n; ++j) s[j] += compute_t<T>(row[j]);
    }
    for (index_t j = 0; j < n; ++j) dbias[c0 + j] += s[j];
  }
};

}  // namespace kernel

namespace linear_detail {

// BLAS gives silently wrong results when C overlaps A or B, so overlapping arguments are rejected.
inline void expect_disjoint(std::string_view op, std::string_view a_name, const tensor& a, std::string_view b_name,
                            const tensor& b) {
  if (a.data == nullptr || b.data == nullptr) return;
  const auto a0 = reinterpret_cast<std::uintptr_t>(a.data), b0 = reinterpret_cast<std::uintptr_t>(b.data);
  check(a0 + a.bytes() <= b0 || b0 + b.bytes() <= a0, op, ": ", a_name, " overlaps ", b_name,
        " in memory; the output needs its own storage");
}

// (..., IC) -> (..., OC)
inline shape with_last(const shape& s, index_t last) {
  shape r;
  for (int a = 0; a + 1 < s.rank(); ++a) r.push(s[a]);
  r.push(last);
  return r;
}

}  // namespace linear_detail

namespace linear_detail {

// The argument checks of linear_forward under the name `op`, the output named `out_name`; returns
// {N, IC, OC}.
struct linear_dims {
  index_t N, IC, OC;
};
inline linear_dims check_forward(std::string_view op, std::string_view out_name, const tensor& out, const tensor& inp,
                                 const tensor& weight, const tensor& bias) {
  expect_nonempty(op, "inp", inp);
  expect_nonempty(op, "weight", weight);
  const index_t IC = inp.shape.last(), N = rows_of(inp);
  check(weight.shape.rank() == 2 && weight.shape[1] == IC, op, ": weight has shape ", weight.shape.str(),
        ", expected [OC, ", IC, "] (IC = ", IC, " from inp ", inp.shape.str(), ")");
  const index_t OC = weight.shape[0];
  expect_shape(op, out_name, out, with_last(inp.shape, OC));
  expect_nonempty(op, out_name, out);
  if (bias.data) expect_shape(op, "bias", bias, shape{OC});
  expect_same_dtype(op, {{"inp", &inp}, {out_name, &out}, {"weight", &weight}, {"bias", &bias}});
  expect_disjoint(op, out_name, out, "inp", inp);
  expect_disjoint(op, out_name, out, "weight", weight);
  return {N, IC, OC};
}

}  // namespace linear_detail

// out = inp @ weight^T + bias. inp: (..., IC) read as N = numel / IC rows; weight: (OC, IC); bias: (OC)
// or an empty tensor; out: (..., OC), which must not overlap inp or weight.
template <class Backend>
void linear_forward(Backend& be, const tensor& out, const tensor& inp, const tensor& weight, const tensor& bias) {
  constexpr std::string_view op = "linear_forward";
  const linear_detail::linear_dims d = linear_detail::check_forward(op, "out", out, inp, weight, bias);
  const index_t N = d.N, IC = d.IC, OC = d.OC;
  dispatch_storage(op, inp.type, [&](auto t) {
    using T = decltype(t);
    if (bias.data) be.for_each(N, kernel::linear_bias_fill_row<T>{out.ptr<T>(), bias.ptr<T>(), OC}, OC);
    be.gemm(false, true, N, OC, IC, T(1), inp.ptr<T>(), IC, weight.ptr<T>(), IC, bias.data ? T(1) : T(0), out.ptr<T>(), OC);
  });
}

// Accumulates the gradients of linear_forward: dinp += dout @ weight, dweight += dout^T @ inp,
// dbias += column sums of dout. dinp may be empty (nothing upstream needs it, e.g. the first layer);
// dbias may be empty (the forward had no bias). Shapes are those of the forward.
template <class Backend>
void linear_backward(Backend& be, const tensor& dinp, const tensor& dweight, const tensor& dbias, const tensor& dout,
                     const tensor& inp, const tensor& weight) {
  constexpr std::string_view op = "linear_backward";
  expect_nonempty(op, "inp", inp);
  expect_nonempty(op, "weight", weight);
  const index_t IC = inp.shape.last(), N = rows_of(inp);
  check(weight.shape.rank() == 2 && weight.shape[1] == IC, op, ": weight has shape ", weight.shape.str(),
        ", expected [OC, ", IC, "] (IC = ", IC, " from inp ", inp.shape.str(), ")");
  const index_t OC = weight.shape[0];
  expect_shape(op, "dout", dout, linear_detail::with_last(inp.shape, OC));
  expect_nonempty(op, "dout", dout);
  if (dinp.data) expect_shape(op, "dinp", dinp, inp.shape);
  expect_shape(op, "dweight", dweight, weight.shape);
  expect_nonempty(op, "dweight", dweight);
  if (dbias.data) expect_shape(op, "dbias", dbias, shape{OC});
  expect_same_dtype(op, {{"inp", &inp}, {"dout", &dout}, {"dinp", &dinp}, {"weight", &weight}, {"dweight", &dweight},
                         {"dbias", &dbias}});
  linear_detail::expect_disjoint(op, "dinp", dinp, "dout", dout);
  linear_detail::expect_disjoint(op, "dinp", dinp, "weight", weight);
  linear_detail::expect_disjoint(op, "dweight", dweight, "dout", dout);
  linear_detail::expect_disjoint(op, "dweight", dweight, "inp", inp);
  dispatch_storage(op, inp.type, [&](auto t) {
    using T = decltype(t);
    if (dinp.data)
      be.gemm(false, false, N, IC, OC, T(1), dout.ptr<T>(), OC, weight.ptr<T>(), IC, T(1), dinp.ptr<T>(), IC);
    be.gemm(true, false, OC, IC, N, T(1), dout.ptr<T>(), OC, inp.ptr<T>(), IC, T(1), dweight.ptr<T>(), IC);
    if (dbias.data) be.for_each(column_chunks(OC), kernel::linear_bias_grad<T>{dbias.ptr<T>(), dout.ptr<T>(), N, OC}, column_chunk * N);
  });
}

// pre = inp @ weight^T + bias and out = gelu(pre): the first layer of a GELU MLP, keeping the
// pre-activation for gelu_backward. A backend that declares the fused kernel (ops/fused.hpp) with a member linear_epilogue_forward (backend::cuda: a
// cuBLASLt GEMM whose epilogue adds the bias and applies GELU-tanh, writing both tensors) runs it for
// the tanh GELU when it takes the case (it returns false otherwise); everything else is
// linear_forward followed by gelu_forward, so the host results are those two ops'.
template <class Backend>
void linear_gelu_forward(Backend& be, const tensor& out, const tensor& pre, const tensor& inp, const tensor& weight,
                         const tensor& bias, gelu_kind kind) {
  constexpr std::string_view op = "linear_gelu_forward";
  linear_detail::check_forward(op, "pre", pre, inp, weight, bias);
  expect_shape(op, "out", out, pre.shape);
  expect_same_dtype(op, {{"pre", &pre}, {"out", &out}});
  linear_detail::expect_disjoint(op, "out", out, "pre", pre);
  if constexpr (offers_fused_linear_epilogue<Backend>) {
    if (kind == gelu_kind::tanh && be.linear_epilogue_forward(out, pre, inp, weight, bias, true)) return;
  }
  linear_forward(be, pre, inp, weight, bias);
  gelu_forward(be, out, pre, kind);
}

}  // namespace lwcl::ops
