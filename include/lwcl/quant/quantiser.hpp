#pragma once
// The quantiser concept (the policy kind policies/quantiser/ names): turns one linear layer's f32 weight
// into a packed weight of a given format, optionally guided by the Hessian of the layer's calibration
// inputs. Here, below the policies, so that quant::quantize_model can be constrained by it.

#include <concepts>
#include <string_view>
#include <type_traits>

#include "lwcl/core/config.hpp"
#include "lwcl/quant/format.hpp"
#include "lwcl/quant/packed.hpp"

namespace lwcl::quant {

class hessian;

// Requires: Q::name, a static constexpr std::string_view; Q::needs_calibration, a static constexpr bool
// saying whether quantize() reads the Hessian; and a const q.quantize(w, rows, cols, h, format, what)
// taking the (rows x cols) weight row by row, a pointer to its layer's Hessian (null when calibration is
// not needed), the format and the layer's name for errors, and returning quant::quantized.
template <class Q>
concept quantiser = requires(const Q& q, const float* w, index_t n, const hessian* h, const weight_format& f,
                             std::string_view what) {
  requires std::same_as<std::remove_cv_t<decltype(Q::name)>, std::string_view>;
  typename std::bool_constant<Q::needs_calibration>;
  { q.quantize(w, n, n, h, f, what) } -> std::same_as<quantized>;
};

}  // namespace lwcl::quant
