#pragma once
// GPTQ as a quantiser policy (quant/gptq.hpp), its dampening, lazy-batch width and act-order held as
// runtime settings.

#include <string_view>

#include "lwcl/core/error.hpp"
#include "lwcl/policies/quantiser/concept.hpp"
#include "lwcl/quant/gptq.hpp"

namespace lwcl::policies::quantisers {

struct gptq {
  static constexpr std::string_view name = "gptq";
  static constexpr bool needs_calibration = true;
  quant::gptq_options options;

  quant::quantized quantize(const float* w, index_t rows, index_t cols, const quant::hessian* h, const quant::weight_format& f,
                            std::string_view what) const {
    check(h != nullptr, "quant::gptq: ", what, ": no Hessian (GPTQ needs the layer's calibration inputs)");
    return quant::quantize_gptq(w, rows, cols, *h, f, options, what);
  }
};
static_assert(quantiser<gptq>);

}  // namespace lwcl::policies::quantisers
