#pragma once
// Element-wise activations, forward and backward: GELU (tanh approximation for gpt2, exact erf form for
// bert), SiLU, and SwiGLU's gated product silu(gate) * up (llama, qwen2). Outputs may alias inputs in the
// forward pass; backward ops accumulate (+=) into their gradients.

#include "lwcl/core/config.hpp"
#include "lwcl/core/math.hpp"
#include "lwcl/ops/common.hpp"

namespace lwcl::ops {

// tanh: GPT-2's 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); erf: the exact 0.5 x (1 + erf(x / sqrt 2)).
enum class gelu_kind { tanh, erf };

namespace kernel {

// 1 / (1 + exp(-x)): for very negative x, exp overflows to inf and the result is exactly 0, not NaN.
template <class T>
LWCL_HD_INLINE T sigmoid(T x) {
  return T(1) / (T(1) + math::exp(-x));
}

// Both GELU forms as value/derivative pairs, so that forward and backward share one formula. They are
// written as x * cdf(x) with a cdf that keeps its relative precision in the left tail: 0.5 (1 + tanh(u))
// = sigmoid(2u) and 0.5 (1 + erf(x / sqrt 2)) = 0.5 erfc(-x / sqrt 2), where the textbook forms cancel
// to 0 (and their finite differences to noise) long before the true values underflow.
template <class T, gelu_kind Kind>
struct gelu_math {
  static constexpr double sqrt_2_over_pi = 0.79788456080286535588;  // sqrt(2 / pi)
  static constexpr double inv_sqrt_2 = 0.70710678118654752440;      // 1 / sqrt(2)
  static constexpr double inv_sqrt_2pi = 0.39894228040143267794;    // 1 / sqrt(2 pi)
  static constexpr double cubic = 0.044715;

  LWCL_HD static T value(T x) {
    if constexpr (Kind == gelu_kind::tanh) {
      const T u = static_cast<T>(sqrt_2_over_pi) * (x + static_cast<T>(cubic) * x * x * x);
      return x * sigmoid(T(2) * u);
    } else {
      return T(0.5) * x * math::erfc(-x * static_cast<T>(inv_sqrt_2));
    }
  }
  LWCL_HD static T derivative(T x) {
    if constexpr (Kind == gelu_kind::tanh) {
      // d/dx [x s] with s = sigmoid(2u): s + 2 x s (1 - s) du/dx.
      const T u = static_cast<T>(sqrt_2_over_pi) * (x + static_cast<T>(cubic) * x * x * x);
      const T s = sigmoid(T(2) * u);
      const T du = static_cast<T>(sqrt_2_over_pi) * (T(1) + static_cast<T>(3 * cubic) * x * x);
      return s + T(2) * x * s * (T(1) - s) * du;
    } else {
      // Phi(x) + x phi(x), with Phi and phi the standard normal cdf and density.
      return T(0.5) * math::erfc(-x * static_cast<T>(inv_sqrt_2)) + x * static_cast<T>(inv_sqrt_2pi) * math::exp(T(-0.5) * x * x);
    }
  }
};

template <class T, gelu_kind Kind>
struct gelu_forward_elem {
  T* out;
  const T* inp;
  LWCL_HD void operator()(index_t i) const { out[i] = T(gelu_math<compute_t<T>, Kind>::value(inp[i])); }
};

template <class T, gelu_kind Kind>
struct gelu_backward_elem {
  T* dinp;
  const T* dout;
  const T* inp;
  LWCL_HD void operator()(index_t i) const {
    dinp[i] += compute_t<T>(dout[i]) * gelu_math<compute_t<T>, Kind>::derivative(inp[i]);
  }
};

template <class T>
struct silu_forward_elem {
  T* out;
  const T* inp;
  LWCL_HD void operator()(index_t i) const {
    const compute_t<T> x = inp[i];
    out[i] = T(x * sigmoid(x));
  }
};

// d silu / dx = sigmoid(x) (1 + x (1 - sigmoid(x))).
template <class T>
struct silu_backward_elem {
  T* dinp;
  const T* dout;
  const T* inp;
  LWCL_HD void operator()(index_t i) const {
    using C = compute_t<T>;
    const C x = inp[i], sg = sigmoid(x);
    dinp[i] += C(dout[i]) * sg * (C(1) + x * (C(1) - sg));
  }
};

template <class T>
struct swiglu_forward_elem {
  T* out;
  const T* gate;
  const T* up;
  LWCL_HD void operator()(index_t i) const {
    const compute_t<T> g = gate[i];
    out[i] = T(g * sigmoid(g) * compute_t<T>(up[i]));
  }
};

template <class T>
struct swiglu_backward_elem {
  T* dgate;
  T* dup;
  const T* dout;
  const T* gate;
  const T* up;
  LWCL_HD void operator()(index_t i) const {
    using C = compute_t<T>;
    const C g = gate[i], sg = sigmoid(g), dy = dout[i];
    dgate[i] += dy * C(up[i]) * sg * (C(1) + g * (C(1) - sg));
    dup[i] += dy * g * sg;
  }
};

}  // namespace kernel

// out = gelu(inp), element-wise; out has inp's shape and may be inp itself.
template <class Backend>
void gelu_forward(Backend& be, const tensor& out, const tensor& inp, gelu_kind kind) {
  constexpr std::string_view op = "gelu_forward";
  expect_nonempty(op, "inp", inp);
  expect_shape(op, "out", out, inp.shape);
  expect_same_dtype(op, {{"inp", &inp}, {"out", &out}});
  dispatch_storage(op, inp.type, [&](auto t) {
    using T = decltype(t);
    if (kind == gelu_kind::tanh)
      be.for_each(inp.numel(), kernel::gelu_forward_elem<T, gelu_kind::tanh>{out.ptr<T>(), inp.ptr<T>()}, 20);
    else
      be.for_each(inp.numel(), kernel::gelu_forward_elem<T, gelu_kind::erf>{out.ptr<T>(), inp.ptr<T>()}, 20);
  });
}

// dinp += dout * gelu'(inp).
template <class Backend>
void gelu_backward(Backend& be, const tensor& dinp, const tensor& dout, const tensor& inp, gelu_kind kind) {
  constexpr std::string_view op = "gelu_backward";
  expect_nonempty(op, "inp", inp);
  expect_shape(op, "dout", dout, inp.shape);
  expect_shape(op, "dinp", dinp, inp.shape);
  expect_same_dtype(op, {{"inp", &inp}, {"dout", &dout}, {"dinp", &dinp}});
  dispatch_storage(op, inp.type, [&](auto t) {
    using T = decltype(t);
    if (kind == gelu_kind::tanh)
      be.for_each(inp.numel(), kernel::gelu_backward_elem<T, gelu_kind::tanh>{dinp.ptr<T>(), dout.ptr<T>(), inp.ptr<T>()}, 30);
    else
      be.for_each(inp.numel(), kernel::gelu_backward_elem<T, gelu_kind::erf>{dinp.ptr<T>(), dout.ptr<T>(), inp.ptr<T>()}, 30);
  });
}

// out = inp * sigmoid(inp), element-wise; out may be inp itself.
template <class Backend>
void silu_forward(Backend& be, const tensor& out, const tensor& inp) {
  constexpr std::string_view op = "silu_forward";
  expect_nonempty(op, "inp", inp);
  expect_shape(op, "out", out, inp.shape);
  expect_same_dtype(op, {{"inp", &inp}, {"out", &out}});
  dispatch_storage(op, inp.type, [&](auto t) {
    using T = decltype(t);
    be.for_each(inp.numel(), kernel::silu_forward_elem<T>{out.ptr<T>(), inp.ptr<T>()}, 15);
  });
}

// dinp += dout * silu'(inp).
template <class Backend>
void silu_backward(Backend& be, const tensor& dinp, const tensor& dout, const tensor& inp) {
  constexpr std::string_view op = "silu_backward";
  expect_nonempty(op, "inp", inp);
  expect_shape(op, "dout", dout, inp.shape);
  expect_shape(op, "dinp", dinp, inp.shape);
  expect_same_dtype(op, {{"inp", &inp}, {"dout", &dout}, {"dinp", &dinp}});
  dispatch_storage(op, inp.type, [&](auto t) {
    using T = decltype(t);
    be.for_each(inp.numel(), kernel::silu_backward_elem<T>{dinp.ptr<T>(), dout.ptr<T>(), inp.ptr<T>()}, 20);
  });
}

// out = silu(gate) * up, element-wise over tensors of one shape (the gate and up projections of a
// SwiGLU FFN); out may be gate or up itself.
template <class Backend>
void swiglu_forward(Backend& be, const tensor& out, const tensor& gate, const tensor& up) {
  constexpr std::string_view op = "swiglu_forward";
  expect_nonempty(op, "gate", gate);
  expect_shape(op, "up", up, gate.shape);
  expect_shape(op, "out", out, gate.shape);
  expect_same_dtype(op, {{"gate", &gate}, {"up", &up}, {"out", &out}});
  dispatch_storage(op, gate.type, [&](auto t) {
    using T = decltype(t);
    be.for_each(gate.numel(), kernel::swiglu_forward_elem<T>{out.ptr<T>(), gate.ptr<T>(), up.ptr<T>()}, 16);
  });
}

// dgate += dout * up * silu'(gate), dup += dout * silu(gate).
template <class Backend>
void swiglu_backward(Backend& be, const tensor& dgate, const tensor& dup, const tensor& dout, const tensor& gate,
                     const tensor& up) {
  constexpr std::string_view op = "swiglu_backward";
  expect_nonempty(op, "gate", gate);
  expect_shape(op, "up", up, gate.shape);
  expect_shape(op, "dout", dout, gate.shape);
  expect_shape(op, "dgate", dgate, gate.shape);
  expect_shape(op, "dup", dup, gate.shape);
  expect_same_dtype(op, {{"gate", &gate}, {"up", &up}, {"dout", &dout}, {"dgate", &dgate}, {"dup", &dup}});
  dispatch_storage(op, gate.type, [&](auto t) {
    using T = decltype(t);
    be.for_each(gate.numel(), kernel::swiglu_backward_elem<T>{dgate.ptr<T>(), dup.ptr<T>(), dout.ptr<T>(), gate.ptr<T>(), up.ptr<T>()},
                25);
  });
}

}  // namespace lwcl::ops
