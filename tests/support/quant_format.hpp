#pragma once
// A weight format from its four settings (bits, group, symmetric or not, scale type), as the
// quantisation tests spell one.

#include "lwcl/core/config.hpp"
#include "lwcl/quant/format.hpp"
#include "lwcl/tensor/dtype.hpp"

namespace lwcl::test {

inline quant::weight_format quant_format(int bits, index_t group, bool sym, dtype scale_type) {
  quant::weight_format f;
  f.bits = bits;
  f.group = group;
  f.sym = sym ? quant::symmetry::symmetric : quant::symmetry::asymmetric;
  f.scale_type = scale_type;
  return f;
}

}  // namespace lwcl::test
