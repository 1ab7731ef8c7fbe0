#pragma once
// Element-wise building blocks over tensors of one shape: residual adds, gradient accumulation, scaling,
// mixing and copies. They are also the backward of each other (the gradient of add is an accumulate into both
// inputs; the gradient of scale is a scale), so no separate backward ops exist.

#include <cstdint>

#include "lwcl/core/config.hpp"
#include "lwcl/ops/common.hpp"

namespace lwcl::ops {

namespace kernel {

template <class T>
struct add_elem {
  T* out;
  const T* a;
  const T* b;
  LWCL_HD void operator()(index_t i) const { out[i] = T(compute_t<T>(a[i]) + compute_t<T>(b[i])); }
};

template <class T>
struct accumulate_elem {
  T* dst;
  const T* src;
  LWCL_HD void operator()(index_t i) const { dst[i] += compute_t<T>(src[i]); }
};

template <class T>
struct mix_elem {
  T* out;
  const T* a;
  const T* b;
  compute_t<T> wa, wb;
  LWCL_HD void operator()(index_t i) const { out[i] = T(wa * compute_t<T>(a[i]) + wb * compute_t<T>(b[i])); }
};

template <class T>
struct scale_elem {
  T* x;
  compute_t<T> alpha;
  LWCL_HD void operator()(index_t i) const { x[i] *= alpha; }
};

}  // namespace kernel

// out = a + b. Each element is read before it is written, so out may be a or b (an in-place residual add).
template <class Backend>
void add(Backend& be, const tensor& out, const tensor& a, const tensor& b) {
  constexpr std::string_view op = "add";
  expect_nonempty(op, "a", a);
  expect_shape(op, "b", b, a.shape);
  expect_shape(op, "out", out, a.shape);
  expect_same_dtype(op, {{"a", &a}, {"b", &b}, {"out", &out}});
  dispatch_storage(op, a.type, [&](auto t) {
    using T = decltype(t);
    be.for_each(a.numel(), kernel::add_elem<T>{out.ptr<T>(), a.ptr<T>(), b.ptr<T>()});
  });
}

// dst += src.
template <class Backend>
void accumulate(Backend& be, const tensor& dst, const tensor& src) {
  constexpr std::string_view op = "accumulate";
  expect_nonempty(op, "src", src);
  expect_shape(op, "dst", dst, src.shape);
  expect_same_dtype(op, {{"src", &src}, {"dst", &dst}});
  dispatch_storage(op, src.type, [&](auto t) {
    using T = decltype(t);
    be.for_each(src.numel(), kernel::accumulate_elem<T>{dst.ptr<T>(), src.ptr<T>()});
  });
}

// x *= alpha (alpha is rounded to x's dtype first).
template <class Backend>
void scale(Backend& be, const tensor& x, double alpha) {
  constexpr std::string_view op = "scale";
  expect_nonempty(op, "x", x);
  dispatch_storage(op, x.type, [&](auto t) {
    using T = decltype(t);
    be.for_each(x.numel(), kernel::scale_elem<T>{x.ptr<T>(), static_cast<compute_t<T>>(alpha)});
  });
}

// out = (1 - r) a + r b, the input mix of a curriculum that moves a segment from teacher features (a)
// to student features (b). Written as two products, not a + r (b - a), so that r = 0 gives a and r = 1
// gives b exactly. out may be a or b.
template <class Backend>
void mix(Backend& be, const tensor& out, const tensor& a, const tensor& b, double r) {
  constexpr std::string_view op = "mix";
  expect_nonempty(op, "a", a);
  expect_shape(op, "b", b, a.shape);
  expect_shape(op, "out", out, a.shape);
  expect_same_dtype(op, {{"a", &a}, {"b", &b}, {"out", &out}});
  check(r >= 0 && r <= 1, op, ": ratio ", r, ", expected a value in [0, 1]");
  dispatch_storage(op, a.type, [&](auto t) {
    using T = decltype(t);
    be.for_each(a.numel(), kernel::mix_elem<T>{out.ptr<T>(), a.ptr<T>(), b.ptr<T>(), static_cast<compute_t<T>>(1 - r), static_cast<compute_t<T>>(r)});
  });
}

// dst = src, bit for bit, for any dtype (token ids and bf16 included): a plain backend copy, since no
// arithmetic is involved. The two may be the same tensor but must not partly overlap.
template <class Backend>
void copy(Backend& be, const tensor& dst, const tensor& src) {
  constexpr std::string_view op = "copy";
  expect_nonempty(op, "src", src);
  expect_shape(op, "dst", dst, src.shape);
  expect_same_dtype(op, {{"src", &src}, {"dst", &dst}});
  if (dst.data == src.data) return;
  const auto d = reinterpret_cast<std::uintptr_t>(dst.data), s = reinterpret_cast<std::uintptr_t>(src.data);
  const std::size_t n = src.bytes();
  check(d + n <= s || s + n <= d, op, ": dst and src overlap partly (", n, " bytes each, ",
        d > s ? d - s : s - d, " bytes apart)");
  be.copy(dst.data, src.data, n);
}

}  // namespace lwcl::ops
