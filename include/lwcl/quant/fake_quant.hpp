#pragma once
// Fake quantisation for quantisation-aware training: a weight replaced by what its round-to-nearest
// codes stand for, kept in f32, so that a forward pass sees the quantised model and a backward pass
// gives the straight-through estimate of the gradient (the gradient at the quantised weight, applied to
// the full-precision one). Which of a model's parameters are the linear weights quantize_model packs.

#include <string_view>

#include "lwcl/core/config.hpp"
#include "lwcl/quant/format.hpp"

namespace lwcl::quant {

// Whether `name` is a block linear's weight ("layers.3.attn.q.weight", "layers.0.mlp.down.weight", ...):
// the parameters quantize_model quantises.
inline bool is_block_linear(std::string_view name) {
  if (name.substr(0, 7) != "layers.") return false;
  for (std::string_view s : {".attn.q.weight", ".attn.k.weight", ".attn.v.weight", ".attn.o.weight", ".mlp.fc.weight",
                             ".mlp.proj.weight", ".mlp.gate.weight", ".mlp.up.weight", ".mlp.down.weight"})
    if (name.size() > s.size() && name.substr(name.size() - s.size()) == s) return true;
  return false;
}

// In place: w (rows x cols, row by row) := dequantize(quantize_rtn(w)) under format f, without packing.
inline void fake_quantize(float* w, index_t rows, index_t cols, const weight_format& f, std::string_view what) {
  f.check_for(rows, cols, what);
  const index_t gw = f.group_width(cols);
  for (index_t r = 0; r < rows; ++r)
    for (index_t g = 0; g < cols / gw; ++g) {
      float* v = w + r * cols + g * gw;
      const group_params p = find_params(v, gw, 1, f, what);
      for (index_t c = 0; c < gw; ++c) v[c] = dequantize_value<float>(quantize_value(v[c], p, f), p);
    }
}

}  // namespace lwcl::quant
