#pragma once
// The quantiser policy kind: turns one linear layer's f32 weight into a packed weight of a given format,
// optionally guided by the Hessian of the layer's calibration inputs (the concept: quant/quantiser.hpp).
// quant::quantize_model runs a quantiser over every linear layer of a model, gathering the Hessians
// block by block only for a quantiser that reads them.

#include "lwcl/policies/named.hpp"
#include "lwcl/quant/quantiser.hpp"

namespace lwcl::policies {

using quant::quantiser;

}  // namespace lwcl::policies
