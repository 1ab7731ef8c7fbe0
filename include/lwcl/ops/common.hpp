#pragma once
// Shared pieces of the op layer: argument checks that name the op and the shapes, and dispatch from a
// tensor's runtime dtype to the typed kernel. Kernels compute in f32 or f64 (f64 for reference
// checks); bf16 is a storage type whose functors compute in f32 (dispatch_storage).

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/tensor/tensor.hpp"

namespace lwcl::ops {

// Calls f(T{}) with T the C++ type of dtype t (f32 or f64); anything else is an error naming the op.
template <class F>
decltype(auto) dispatch_float(std::string_view op, dtype t, F&& f) {
  switch (t) {
    case dtype::f32: return f(float{});
    case dtype::f64: return f(double{});
    default: fail(op, ": dtype ", dtype_name(t), " is not supported here (expected f32 or f64)");
  }
}

// Like dispatch_float, and also bf16 (storage; the functors compute in compute_t<bf16> = float), for
// the ops that support mixed precision.
template <class F>
decltype(auto) dispatch_storage(std::string_view op, dtype t, F&& f) {
  switch (t) {
    case dtype::f32: return f(float{});
    case dtype::f64: return f(double{});
    case dtype::bf16: return f(bf16{});
    default: fail(op, ": dtype ", dtype_name(t), " is not supported here (expected f32, f64 or bf16)");
  }
}

// The values of x (f32 or f64, in `be`'s memory) as doubles in host memory, and back (rounded to x's
// dtype); `op` names the caller in the error for another dtype.
template <class Backend>
std::vector<double> to_host_doubles(Backend& be, const tensor& x, std::string_view op) {
  std::vector<double> out(static_cast<std::size_t>(x.numel()));
  dispatch_float(op, x.type, [&](auto z) {
    using E = decltype(z);
    std::vector<E> tmp(out.size());
    be.to_host(tmp.data(), x.data, tmp.size() * sizeof(E));
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(tmp[i]);
  });
  return out;
}
template <class Backend>
void from_host_doubles(Backend& be, const std::vector<double>& in, const tensor& x, std::string_view op) {
  check(in.size() == static_cast<std::size_t>(x.numel()), op, ": ", in.size(), " values for a tensor of shape ", x.shape.str());
  dispatch_float(op, x.type, [&](auto z) {
    using E = decltype(z);
    std::vector<E> tmp(in.begin(), in.end());
    be.from_host(x.data, tmp.data(), tmp.size() * sizeof(E));
  });
}

inline void expect_nonempty(std::string_view op, std::string_view arg, const tensor& t) {
  check(t.data != nullptr && t.numel() > 0, op, ": ", arg, " is empty (shape ", t.shape.str(), "), a non-empty tensor is required");
}

inline void expect_shape(std::string_view op, std::string_view arg, const tensor& t, const shape& want) {
  check(t.shape == want, op, ": ", arg, " has shape ", t.shape.str(), ", expected ", want.str());
}

inline void expect_numel(std::string_view op, std::string_view arg, const tensor& t, index_t want) {
  check(t.numel() == want, op, ": ", arg, " has shape ", t.shape.str(), " (", t.numel(), " elements), expected ", want,
        " elements");
}

inline void expect_last_dim(std::string_view op, std::string_view arg, const tensor& t, index_t want) {
  check(t.shape.rank() >= 1 && t.shape.last() == want, op, ": ", arg, " has shape ", t.shape.str(),
        ", expected last extent ", want);
}

// Every tensor in `ts` has the dtype of the first one; `names` gives their argument names.
inline void expect_same_dtype(std::string_view op, std::initializer_list<std::pair<std::string_view, const tensor*>> ts) {
  const auto* first = ts.begin();
  for (const auto& [name, t] : ts) {
    if (t->data == nullptr) continue;  // optional argument left out
    check(t->type == first->second->type, op, ": ", name, " has dtype ", dtype_name(t->type), ", expected ",
          dtype_name(first->second->type), " (the dtype of ", first->first, ")");
  }
}

// Column reductions (sums over rows per channel) run over chunks of this many adjacent channels, so
// each row is read contiguously; the summation order per channel stays row by row.
inline constexpr index_t column_chunk = 16;
inline index_t column_chunks(index_t C) { return (C + column_chunk - 1) / column_chunk; }

// Rows of a tensor whose last extent is the feature width: numel / last.
inline index_t rows_of(const tensor& t) { return t.shape.last() ? t.numel() / t.shape.last() : 0; }

}  // namespace lwcl::ops
