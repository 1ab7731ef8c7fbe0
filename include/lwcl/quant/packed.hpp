#pragma once
// A quantised linear weight as it is stored: codes packed (int8 one a byte; int4 two a byte, in tiles of
// 32 input columns where byte j of a tile holds column j in its low nibble and column j + 16 in its high
// one, so a decoder unpacks a tile into two contiguous runs), scales as f16 or bf16 bits, zero points as
// one byte a group (asymmetric only). Every length is checked before a packed weight is read.

#include <cstdint>
#include <string_view>
#include <vector>

#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/quant/format.hpp"

namespace lwcl::quant {

struct packed_weight {
  weight_format format;
  index_t rows = 0, cols = 0;           // out x in, as the f32 matrix it stands for
  std::vector<std::uint8_t> codes;      // rows * cols * bits / 8 bytes, row by row
  std::vector<std::uint16_t> scales;    // rows * groups, in format.scale_type
  std::vector<std::uint8_t> zeros;      // rows * groups for the asymmetric scheme, else empty

  index_t groups() const { return format.groups(cols); }
  index_t row_bytes() const { return cols * format.bits / 8; }
  std::size_t bytes() const { return codes.size() + scales.size() * 2 + zeros.size(); }

  // Refuses a packed weight whose format cannot hold its shape, or whose arrays have the wrong length.
  void validate(std::string_view what) const {
    format.check_for(rows, cols, what);
    const auto expect = [&](std::size_t have, std::size_t want, const char* name) {
      check(have == want, "quant: ", what, ": packed ", name, " hold ", have, " entries, expected ", want, " for a ", rows,
            " x ", cols, " ", format.describe(), " weight");
    };
    expect(codes.size(), static_cast<std::size_t>(rows * row_bytes()), "codes");
    expect(scales.size(), static_cast<std::size_t>(rows * groups()), "scales");
    expect(zeros.size(), format.sym == symmetry::asymmetric ? static_cast<std::size_t>(rows * groups()) : 0u, "zero points");
    if (format.sym == symmetry::asymmetric)
      for (const auto z : zeros)
        check(z <= format.max_code(), "quant: ", what, ": zero point ", int(z), " is past the largest ", format.bits,
              "-bit code ", format.max_code());
  }

  group_params params(index_t r, index_t g) const {
    const auto k = static_cast<std::size_t>(r * groups() + g);
    return {scale_value(scales[k], format.scale_type), format.sym == symmetry::symmetric ? format.mid() : int(zeros[k])};
  }
};

// What a quantiser hands back: the packed weight and the objective it minimised, if it has one (GPTQ:
// the increase of its layer-wise squared error; round-to-nearest: 0, it minimises nothing jointly).
struct quantized {
  packed_weight weight;
  double loss = 0.0;
};

// An empty packed weight of the given shape and format (codes zero), for a quantiser to fill.
inline packed_weight make_packed(index_t rows, index_t cols, const weight_format& f, std::string_view what) {
  f.check_for(rows, cols, what);
  packed_weight p;
  p.format = f;
  p.rows = rows;
  p.cols = cols;
  p.codes.assign(static_cast<std::size_t>(rows * p.row_bytes()), 0);
  p.scales.assign(static_cast<std::size_t>(rows * p.groups()), 0);
  if (f.sym == symmetry::asymmetric) p.zeros.assign(p.scales.size(), 0);
  return p;
}

// Where column c's code sits in a row's bytes, and in which nibble (int4).
inline std::size_t int4_byte(index_t c) { return static_cast<std::size_t>((c / 32) * 16 + c % 16); }
inline bool int4_high(index_t c) { return (c % 32) >= 16; }

inline int code_at(const packed_weight& p, index_t r, index_t c) {
  const std::uint8_t* row = p.codes.data() + r * p.row_bytes();
  if (p.format.bits == 8) return row[c];
  const std::uint8_t b = row[int4_byte(c)];
  return int4_high(c) ? b >> 4 : b & 15;
}

inline void set_code(packed_weight& p, index_t r, index_t c, int code) {
  std::uint8_t* row = p.codes.data() + r * p.row_bytes();
  if (p.format.bits == 8) {
    row[c] = static_cast<std::uint8_t>(code);
    return;
  }
  std::uint8_t& b = row[int4_byte(c)];
  b = int4_high(c) ? static_cast<std::uint8_t>((b & 0x0f) | (code << 4)) : static_cast<std::uint8_t>((b & 0xf0) | code);
}

inline void set_params(packed_weight& p, index_t r, index_t g, const group_params& q) {
  const auto k = static_cast<std::size_t>(r * p.groups() + g);
  p.scales[k] = scale_bits(q.scale, p.format.scale_type);
  if (p.format.sym == symmetry::asymmetric) p.zeros[k] = static_cast<std::uint8_t>(q.zero);
}

// Every code, one an element, row by row (for tests and for formats written elsewhere).
inline std::vector<std::uint8_t> unpack_codes(const packed_weight& p) {
  p.validate("unpack_codes");
  std::vector<std::uint8_t> out(static_cast<std::size_t>(p.rows * p.cols));
  for (index_t r = 0; r < p.rows; ++r)
    for (index_t c = 0; c < p.cols; ++c) out[static_cast<std::size_t>(r * p.cols + c)] = static_cast<std::uint8_t>(code_at(p, r, c));
  return out;
}

// Packs one code an element (rows x cols, row by row) with the given scales and zero points.
inline packed_weight pack_codes(const std::vector<std::uint8_t>& codes, index_t rows, index_t cols, const weight_format& f,
                                std::vector<std::uint16_t> scales, std::vector<std::uint8_t> zeros, std::string_view what) {
  packed_weight p = make_packed(rows, cols, f, what);
  check(codes.size() == static_cast<std::size_t>(rows * cols), "quant: ", what, ": ", codes.size(), " codes for a ", rows,
        " x ", cols, " weight");
  for (index_t r = 0; r < rows; ++r)
    for (index_t c = 0; c < cols; ++c) {
      const int code = codes[static_cast<std::size_t>(r * cols + c)];
      check(code <= f.max_code(), "quant: ", what, ": code ", code, " at (", r, ", ", c, ") is past the largest ", f.bits,
            "-bit code ", f.max_code());
      set_code(p, r, c, code);
    }
  p.scales = std::move(scales);
  p.zeros = std::move(zeros);
  p.validate(what);
  return p;
}

// The f32 (rows x cols) matrix a packed weight stands for: scale * (code - zero).
inline std::vector<float> dequantize(const packed_weight& p) {
  p.validate("dequantize");
  std::vector<float> w(static_cast<std::size_t>(p.rows * p.cols));
  const index_t gw = p.format.group_width(p.cols);
  for (index_t r = 0; r < p.rows; ++r)
    for (index_t c = 0; c < p.cols; ++c)
      w[static_cast<std::size_t>(r * p.cols + c)] = dequantize_value<float>(code_at(p, r, c), p.params(r, c / gw));
  return w;
}

}  // namespace lwcl::quant
