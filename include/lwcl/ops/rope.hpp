#pragma once
// Rotary position embedding in the rotate-half convention of Hugging Face's LLaMA and Qwen2 (channel i
// pairs with channel i + D/2, not with its neighbour), so those checkpoints load without permuting q/k
// weights. Angles are computed in the kernel, so no cos/sin table is kept; backward applies the
// transposed rotation and accumulates (+=) into dinp.

#include <cmath>
#include <cstdint>

#include "lwcl/core/config.hpp"
#include "lwcl/core/math.hpp"
#include "lwcl/ops/common.hpp"

namespace lwcl::ops {

namespace kernel {

// Angle of channel pair i at sequence position t. The operations mirror Hugging Face's
// inv_freq = 1 / theta^(2i/D), angle = pos * inv_freq, so that f64 reproduces its reference exactly
// and f32 matches its single-precision path.
template <class T>
LWCL_HD_INLINE T rope_angle(T theta, index_t i, index_t D, index_t pos) {
  const T inv_freq = T(1) / math::pow(theta, static_cast<T>(2 * i) / static_cast<T>(D));
  return static_cast<T>(pos) * inv_freq;
}

// One index per channel pair of one (b, t, h) row. Both channels are read before either is written,
// so out may be the same memory as inp.
template <class T>
struct rope_forward_pair {
  T* out;
  const T* inp;
  index_t T_len;
  index_t H;
  index_t half;
  compute_t<T> theta;
  index_t pos_offset;

  LWCL_HD void operator()(index_t p) const {
    using C = compute_t<T>;
    const index_t row = p / half, i = p % half;
    const index_t t = (row / H) % T_len;
    const C a = rope_angle(theta, i, 2 * half, pos_offset + t);
    const C c = math::cos(a), s = math::sin(a);
    const index_t lo = row * 2 * half + i, hi = lo + half;
    const C x1 = inp[lo], x2 = inp[hi];
    out[lo] = T(x1 * c - x2 * s);
    out[hi] = T(x2 * c + x1 * s);
  }
};

// The transposed rotation (rotation by -angle), accumulated.
template <class T>
struct rope_backward_pair {
  T* dinp;
  const T* dout;
  index_t T_len;
  index_t H;
  index_t half;
  compute_t<T> theta;
  index_t pos_offset;

  LWCL_HD void operator()(index_t p) const {
    using C = compute_t<T>;
    const index_t row = p / half, i = p % half;
    const index_t t = (row / H) % T_len;
    const C a = rope_angle(theta, i, 2 * half, pos_offset + t);
    const C c = math::cos(a), s = math::sin(a);
    const index_t lo = row * 2 * half + i, hi = lo + half;
    const C g1 = dout[lo], g2 = dout[hi];
    dinp[lo] += g1 * c + g2 * s;
    dinp[hi] += g2 * c - g1 * s;
  }
};

}  // namespace kernel

namespace rope_detail {

inline void expect_bthd(std::string_view op, std::string_view arg, const tensor& t) {
  check(t.shape.rank() == 4, op, ": ", arg, " has shape ", t.shape.str(), ", expected rank 4 [B, T, H, D]");
}

inline void expect_params(std::string_view op, index_t D, double theta, index_t pos_offset) {
  check(D % 2 == 0, op, ": head dim D = ", D, " is odd, rotate-half RoPE needs an even head dim");
  check(std::isfinite(theta) && theta > 0, op, ": theta = ", theta, ", expected a finite positive base");
  check(pos_offset >= 0, op, ": pos_offset = ", pos_offset, ", expected >= 0");
}

}  // namespace rope_detail

// out = RoPE(inp) on (B, T, H, D) tensors; token t sits at position pos_offset + t (pos_offset lets a
// sequence continue after cached tokens). out may be inp itself (in place) but must not partly overlap it.
template <class Backend>
void rope_forward(Backend& be, const tensor& out, const tensor& inp, double theta, index_t pos_offset = 0) {
  constexpr std::string_view op = "rope_forward";
  expect_nonempty(op, "inp", inp);
  rope_detail::expect_bthd(op, "inp", inp);
  expect_shape(op, "out", out, inp.shape);
  expect_nonempty(op, "out", out);
  expect_same_dtype(op, {{"inp", &inp}, {"out", &out}});
  const index_t T_len = inp.shape[1], H = inp.shape[2], D = inp.shape[3];
  rope_detail::expect_params(op, D, theta, pos_offset);
  if (out.data != inp.data) {
    const auto o = reinterpret_cast<std::uintptr_t>(out.data), i = reinterpret_cast<std::uintptr_t>(inp.data);
    check(o + out.bytes() <= i || i + inp.bytes() <= o, op, ": out partly overlaps inp; pass the same tensor for in place");
  }
  dispatch_storage(op, inp.type, [&](auto t) {
    using T = decltype(t);
    be.for_each(inp.numel() / 2,
                kernel::rope_forward_pair<T>{out.ptr<T>(), inp.ptr<T>(), T_len, H, D / 2, static_cast<compute_t<T>>(theta), pos_offset},
                40);
  });
}

// Accumulates the gradient of rope_forward: dinp += RoPE^T(dout). Same shapes and arguments as the
// forward; dinp must not overlap dout.
template <class Backend>
void rope_backward(Backend& be, const tensor& dinp, const tensor& dout, double theta, index_t pos_offset = 0) {
  constexpr std::string_view op = "rope_backward";
  expect_nonempty(op, "dout", dout);
  rope_detail::expect_bthd(op, "dout", dout);
  expect_shape(op, "dinp", dinp, dout.shape);
  expect_nonempty(op, "dinp", dinp);
  expect_same_dtype(op, {{"dout", &dout}, {"dinp", &dinp}});
  const index_t T_len = dout.shape[1], H = dout.shape[2], D = dout.shape[3];
  rope_detail::expect_params(op, D, theta, pos_offset);
  {
    const auto a = reinterpret_cast<std::uintptr_t>(dinp.data), b = reinterpret_cast<std::uintptr_t>(dout.data);
    check(a + dinp.bytes() <= b || b + dout.bytes() <= a, op, ": dinp overlaps dout; backward accumulates into dinp, so it needs its own storage");
  }
  dispatch_storage(op, dout.type, [&](auto t) {
    using T = decltype(t);
    be.for_each(dout.numel() / 2,
                kernel::rope_backward_pair<T>{dinp.ptr<T>(), dout.ptr<T>(), T_len, H, D / 2, static_cast<compute_t<T>>(theta), pos_offset},
                40);
  });
}

}  // namespace lwcl::ops
