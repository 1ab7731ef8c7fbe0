#pragma once
// Round-to-nearest as a quantiser policy (quant/rtn.hpp): no calibration data.

#include <string_view>

#include "lwcl/policies/quantiser/concept.hpp"
#include "lwcl/quant/rtn.hpp"

namespace lwcl::policies::quantisers {

struct rtn {
  static constexpr std::string_view name = "rtn";
  static constexpr bool needs_calibration = false;

  quant::quantized quantize(const float* w, index_t rows, index_t cols, const quant::hessian*, const quant::weight_format& f,
                            std::string_view what) const {
    return {quant::quantize_rtn(w, rows, cols, f, what), 0.0};
  }
};
static_assert(quantiser<rtn>);

}  // namespace lwcl::policies::quantisers
