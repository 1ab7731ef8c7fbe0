#pragma once
// A quantised model's packed weights as GGUF blocks. lwcl's symmetric codes with groups of 32 and f16
// scales are GGUF's own blocks value for value: int8 g32 sym f16 is Q8_0 (each block an f16 scale d and
// 32 int8 q = code - 128, value d q), int4 g32 sym f16 is Q4_0 (d, then the 16 bytes of lwcl's int4 tile
// unchanged: byte j holds column j in its low nibble and column j + 16 in its high one, value
// d (nibble - 8)). Such weights are copied bit for bit; any other format is refused, or with `requantise`
// dequantised and quantised again by round to nearest into Q8_0 or Q4_0 (said so in the result).

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/model/checkpoint/gguf_model.hpp"
#include "lwcl/quant/format.hpp"
#include "lwcl/quant/packed.hpp"

namespace lwcl::quant {

// The GGUF block type a packed format is, bit for bit, or f32 when it is none of them.
inline checkpoint::gguf::tensor_type gguf_type_of(const weight_format& f) {
  using checkpoint::gguf::tensor_type;
  if (f.group != 32 || f.sym != symmetry::symmetric || f.scale_type != dtype::f16) return tensor_type::f32;
  return f.bits == 8 ? tensor_type::q8_0 : tensor_type::q4_0;
}

// The blocks of a packed weight whose format is Q8_0 or Q4_0 (gguf_type_of), bit for bit.
inline checkpoint::gguf_blocks to_gguf_blocks(const packed_weight& p, const std::string& name) {
  using checkpoint::gguf::tensor_type;
  p.validate(name);
  const tensor_type t = gguf_type_of(p.format);
  check(t != tensor_type::f32, "gguf export: '", name, "' is quantised as ", p.format.describe(),
        ", which is no GGUF block type (Q8_0 is int8 g32 sym f16, Q4_0 int4 g32 sym f16; requantise to convert)");
  checkpoint::gguf_blocks b;
  b.type = t;
  b.rows = p.rows;
  b.cols = p.cols;
  const index_t groups = p.groups();
  const std::size_t block = t == tensor_type::q8_0 ? 34 : 18;
  b.bytes.resize(static_cast<std::size_t>(p.rows * groups) * block);
  for (index_t r = 0; r < p.rows; ++r)
    for (index_t g = 0; g < groups; ++g) {
      unsigned char* out = b.bytes.data() + static_cast<std::size_t>(r * groups + g) * block;
      const std::uint16_t d = p.scales[static_cast<std::size_t>(r * groups + g)];
      std::memcpy(out, &d, 2);
      const std::uint8_t* codes = p.codes.data() + r * p.row_bytes() + g * (p.format.bits == 8 ? 32 : 16);
      if (t == tensor_type::q8_0)
        for (int j = 0; j < 32; ++j) out[2 + j] = static_cast<unsigned char>(codes[j] ^ 0x80u);  // code - 128 as int8
      else
        std::memcpy(out + 2, codes, 16);
    }
  return b;
}

// The packed weight (int8 or int4 g32 sym f16) that GGUF blocks stand for: to_gguf_blocks undone.
inline packed_weight from_gguf_blocks(const checkpoint::gguf_blocks& b, const std::string& name) {
  using checkpoint::gguf::tensor_type;
  check(b.type == tensor_type::q8_0 || b.type == tensor_type::q4_0, "gguf import: '", name, "' is ",
        checkpoint::gguf::tensor_type_name(b.type), ", not Q8_0 or Q4_0");
  weight_format f;
  f.bits = b.type == tensor_type::q8_0 ? 8 : 4;
  f.group = 32;
  packed_weight p = make_packed(b.rows, b.cols, f, name);
  const index_t groups = p.groups();
  const std::size_t block = b.type == tensor_type::q8_0 ? 34 : 18;
  check(b.bytes.size() == static_cast<std::size_t>(b.rows * groups) * block, "gguf import: '", name, "' holds ", b.bytes.size(),
        " bytes for ", b.rows, " x ", b.cols);
  for (index_t r = 0; r < b.rows; ++r)
    for (index_t g = 0; g < groups; ++g) {
      const unsigned char* in = b.bytes.data() + static_cast<std::size_t>(r * groups + g) * block;
      std::memcpy(&p.scales[static_cast<std::size_t>(r * groups + g)], in, 2);
      std::uint8_t* codes = p.codes.data() + r * p.row_bytes() + g * (f.bits == 8 ? 32 : 16);
      if (f.bits == 8)
        for (int j = 0; j < 32; ++j) codes[j] = static_cast<std::uint8_t>(in[2 + j] ^ 0x80u);
      else
        std::memcpy(codes, in + 2, 16);
    }
  return p;
}

// Round to nearest into `bits` (8 or 4) with groups of 32, symmetric, f16 scales: the Q8_0 / Q4_0 form
// of a weight quantised another way, from its dequantised values.
inline packed_weight requantise_g32(const packed_weight& p, int bits, const std::string& name) {
  weight_format f;
  f.bits = bits;
  f.group = 32;
  const std::vector<float> w = dequantize(p);
  packed_weight q = make_packed(p.rows, p.cols, f, name);
  for (index_t r = 0; r < p.rows; ++r)
    for (index_t g = 0; g < p.cols / 32; ++g) {
      const float* v = w.data() + r * p.cols + g * 32;
      const group_params gp = find_params(v, 32, 1, f, name);
      set_params(q, r, g, gp);
      for (index_t c = 0; c < 32; ++c) set_code(q, r, g * 32 + c, quantize_value(v[c], gp, f));
    }
  return q;
}

struct gguf_quantised {
  std::map<std::string, checkpoint::gguf_blocks> blocks;
  std::vector<std::string> requantised;  // the weights that were not Q8_0 / Q4_0 as stored
};

// The GGUF blocks of every packed weight: copied where the format is Q8_0 or Q4_0; otherwise refused, or
// with requantise_bits (8 or 4) quantised again by round to nearest from the dequantised values.
inline gguf_quantised gguf_blocks_of(const std::vector<std::string>& names, const std::vector<packed_weight>& weights,
                                     int requantise_bits = 0) {
  check(names.size() == weights.size(), "gguf export: ", names.size(), " names for ", weights.size(), " packed weights");
  check(requantise_bits == 0 || requantise_bits == 4 || requantise_bits == 8, "gguf export: requantise to ", requantise_bits,
        " bits (expected 8 for Q8_0 or 4 for Q4_0)");
  gguf_quantised out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const packed_weight& p = weights[i];
    if (gguf_type_of(p.format) != checkpoint::gguf::tensor_type::f32) {
      out.blocks[names[i]] = to_gguf_blocks(p, names[i]);
      continue;
    }
    check(requantise_bits != 0, "gguf export: '", names[i], "' is quantised as ", p.format.describe(),
          ", which is no GGUF block type (Q8_0 is int8 g32 sym f16, Q4_0 int4 g32 sym f16); quantise with int8:g32 or "
          "int4:g32, or ask for requantisation (--requantise q8_0 or q4_0)");
    check(p.cols % 32 == 0, "gguf export: '", names[i], "' has ", p.cols, " input columns, not a multiple of the 32-value blocks");
    out.blocks[names[i]] = to_gguf_blocks(requantise_g32(p, requantise_bits, names[i]), names[i]);
    out.requantised.push_back(names[i]);
  }
  return out;
}

}  // namespace lwcl::quant
