#pragma once
// Round-to-nearest quantisation of a linear weight: each group's scale (and zero point) from its own
// values, each weight rounded to the nearest code on its own. The baseline every other quantiser is
// measured against, and the one that needs no calibration data.

#include <string_view>
#include <vector>

#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/quant/format.hpp"
#include "lwcl/quant/packed.hpp"

namespace lwcl::quant {

// w: the (rows x cols) f32 weight, row by row (out x in, as lwcl and PyTorch store a linear layer).
inline packed_weight quantize_rtn(const float* w, index_t rows, index_t cols, const weight_format& f, std::string_view what) {
  packed_weight p = make_packed(rows, cols, f, what);
  const index_t gw = f.group_width(cols);
  for (index_t r = 0; r < rows; ++r)
    for (index_t g = 0; g < p.groups(); ++g) {
      const float* v = w + r * cols + g * gw;
      const group_params q = find_params(v, gw, 1, f, what);
      set_params(p, r, g, q);
      for (index_t c = 0; c < gw; ++c) set_code(p, r, g * gw + c, quantize_value(v[c], q, f));
    }
  return p;
}

inline packed_weight quantize_rtn(const std::vector<float>& w, index_t rows, index_t cols, const weight_format& f,
                                  std::string_view what) {
  check(w.size() == static_cast<std::size_t>(rows * cols), "quant: ", what, ": ", w.size(), " weights for a ", rows, " x ",
        cols, " matrix");
  return quantize_rtn(w.data(), rows, cols, f, what);
}

}  // namespace lwcl::quant
