#pragma once
// The quantiser policy kind: turns one linear layer's f32 weight into a packed weight of a given format,
// optionally guided by the Hessian of the layer's calibration inputs. quant::quantize_model runs a
// quantiser over every linear layer of a model, gathering the Hessians block by block only for a
// quantiser that reads them.

#include <concepts>
#include <string_view>
#include <type_traits>

#include "lwcl/core/config.hpp"
#include "lwcl/policies/named.hpp"
#include "lwcl/quant/format.hpp"
#include "lwcl/quant/packed.hpp"

namespace lwcl::quant {
class hessian;
}

namespace lwcl::policies {

// Requires: named_policy; Q::needs_calibration, a static constexpr bool saying whether quantize() reads
// the Hessian; and a const q.quantize(w, rows, cols, h, format, what) taking the (rows x cols) weight
// row by row, a pointer to its layer's Hessian (null when calibration is not needed), the format and
// the layer's name for errors, and returning quant::quantized.
template <class Q>
concept quantiser = named_policy<Q> && requires(const Q& q, const float* w, index_t n, const quant::hessian* h,
                                                const quant::weight_format& f, std::string_view what) {
  typename std::bool_constant<Q::needs_calibration>;
  { q.quantize(w, n, n, h, f, what) } -> std::same_as<quant::quantized>;
};

}  // namespace lwcl::policies
