#pragma once
// The weight formats lwcl quantises a linear layer's (out x in) matrix to: int8 or int4 codes, one scale
// (and for the asymmetric scheme one zero point) per output row and group of consecutive input columns,
// scales stored in f16 or bf16. A format checks itself against a layer's shape, so a bad setting is
// refused with the layer named before any work is done. The arithmetic of one group lives here too.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/tensor/dtype.hpp"

namespace lwcl::quant {

enum class symmetry : std::uint8_t { symmetric, asymmetric };

inline std::string_view symmetry_name(symmetry s) { return s == symmetry::symmetric ? "sym" : "asym"; }

struct weight_format {
  int bits = 4;                        // 4 or 8
  index_t group = 0;                   // input columns sharing one scale; 0: the whole row (per channel)
  symmetry sym = symmetry::symmetric;  // symmetric: zero point fixed at mid(); asymmetric: one per group
  dtype scale_type = dtype::f16;       // how scales are stored: f16 or bf16

  int max_code() const { return (1 << bits) - 1; }
  // The code of 0.0 under the symmetric scheme: codes are stored unsigned, q + mid() for q in
  // [-mid(), mid() - 1].
  int mid() const { return 1 << (bits - 1); }
  index_t group_width(index_t cols) const { return group == 0 ? cols : group; }
  index_t groups(index_t cols) const { return cols / group_width(cols); }

  // "int4 g64 sym f16" (g0 for per channel).
  std::string describe() const {
    return "int" + std::to_string(bits) + " g" + std::to_string(group) + " " + std::string(symmetry_name(sym)) + " " +
           std::string(dtype_name(scale_type));
  }

  // Refuses a format that cannot store an (rows x cols) matrix, naming `what` (the layer).
  void check_for(index_t rows, index_t cols, std::string_view what) const {
    check(bits == 4 || bits == 8, "quant: ", what, ": ", bits, " weight bits are not supported (expected 4 or 8)");
    check(scale_type == dtype::f16 || scale_type == dtype::bf16, "quant: ", what, ": scales stored as ",
          dtype_name(scale_type), " (expected f16 or bf16)");
    check(rows > 0 && cols > 0, "quant: ", what, ": a ", rows, " x ", cols, " matrix has nothing to quantise");
    check(group >= 0, "quant: ", what, ": group size ", group, " is negative (expected 0 for per channel, or e.g. 32, 64, 128)");
    check(group == 0 || group % 32 == 0, "quant: ", what, ": group size ", group,
          " is not a multiple of 32 (expected 0 for per channel, or 32, 64, 128, ...)");
    check(group == 0 || cols % group == 0, "quant: ", what, ": group size ", group, " does not divide the layer's ", cols,
          " input columns");
    check(bits != 4 || cols % 32 == 0, "quant: ", what, ": int4 packs 32 columns to a tile, and ", cols,
          " input columns are not a multiple of 32");
  }
};

// A format from its command-line spelling: "int4", "int4:g64", "int8:g0:asym", "int4:g128:sym:bf16" (bits,
// then optionally the group, the scheme and the scale type; defaults per channel, symmetric, f16).
inline weight_format parse_format(const std::string& text) {
  weight_format f;
  std::vector<std::string> parts;
  std::size_t at = 0;
  while (true) {
    const std::size_t c = text.find(':', at);
    parts.push_back(text.substr(at, c == std::string::npos ? std::string::npos : c - at));
    if (c == std::string::npos) break;
    at = c + 1;
  }
  const auto bad = [&](const std::string& why) {
    fail("quant: weight format '", text, "': ", why, " (expected int4 or int8, then optionally :g<group>, :sym or :asym, "
         ":f16 or :bf16, e.g. int4:g64:asym)");
  };
  if (parts.size() > 4) bad("too many fields");
  if (parts[0] == "int4") f.bits = 4;
  else if (parts[0] == "int8") f.bits = 8;
  else bad("'" + parts[0] + "' is not int4 or int8");
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    if (p.size() > 1 && p[0] == 'g' && p.find_first_not_of("0123456789", 1) == std::string::npos && p.size() < 12) f.group = std::stoll(p.substr(1));
    else if (p == "sym") f.sym = symmetry::symmetric;
    else if (p == "asym") f.sym = symmetry::asymmetric;
    else if (p == "f16") f.scale_type = dtype::f16;
    else if (p == "bf16") f.scale_type = dtype::bf16;
    else bad("'" + p + "' is not a group (g64), a scheme (sym, asym) or a scale type (f16, bf16)");
  }
  return f;
}

// Rounds a positive scale to what its storage type holds (round to nearest even), so that the codes are
// chosen against the scale the dequantiser will read.
inline float stored_scale(float s, dtype t) {
  return t == dtype::bf16 ? bf16(s).to_float() : f16_to_float(f16_from_float(s));
}
inline std::uint16_t scale_bits(float s, dtype t) {
  return t == dtype::bf16 ? bf16(s).bits : f16_from_float(s);
}
inline float scale_value(std::uint16_t bits, dtype t) {
  return t == dtype::bf16 ? bf16::from_bits(bits).to_float() : f16_to_float(bits);
}

// One group's scale and zero point (the code that stands for 0.0).
struct group_params {
  float scale = 1.0f;
  int zero = 0;
};

// The parameters of the n values v[0], v[stride], ... under format f: symmetric s = max|v| / (mid - 1)
// (int4: / 7, int8: / 127), zero = mid; asymmetric over [min(v, 0), max(v, 0)], s = (hi - lo) / max_code,
// zero = round(-lo / s). An all-zero group gets s = 1. A scale past the storage type's range is refused.
template <class T>
group_params find_params(const T* v, index_t n, index_t stride, const weight_format& f, std::string_view what) {
  float lo = 0.0f, hi = 0.0f;
  for (index_t i = 0; i < n; ++i) {
    const float x = static_cast<float>(v[i * stride]);
    check(std::isfinite(x), "quant: ", what, ": weight ", x, " is not finite");
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  group_params p;
  float s;
  if (f.sym == symmetry::symmetric) {
    s = std::max(-lo, hi) / static_cast<float>(f.mid() - 1);
    p.zero = f.mid();
  } else {
    s = (hi - lo) / static_cast<float>(f.max_code());
  }
  if (!(s > 0.0f)) s = 1.0f;
  s = stored_scale(s, f.scale_type);
  check(std::isfinite(s), "quant: ", what, ": a weight of magnitude ", std::max(-lo, hi), " needs a scale past ",
        dtype_name(f.scale_type), "'s range");
  if (s == 0.0f) s = 1.0f;  // underflowed: every value of the group is below the type's smallest scale
  p.scale = s;
  if (f.sym == symmetry::asymmetric)
    p.zero = static_cast<int>(std::clamp(std::nearbyint(-lo / s), 0.0f, static_cast<float>(f.max_code())));
  return p;
}

// The code of x: round(x / s) + zero (round half to even), clamped to [0, max_code]. The division is done
// in T (float for round-to-nearest, double inside GPTQ).
template <class T>
int quantize_value(T x, const group_params& p, const weight_format& f) {
  const T q = std::nearbyint(x / static_cast<T>(p.scale)) + static_cast<T>(p.zero);
  return static_cast<int>(std::clamp(q, T(0), static_cast<T>(f.max_code())));
}

template <class T>
T dequantize_value(int code, const group_params& p) {
  return static_cast<T>(p.scale) * static_cast<T>(code - p.zero);
}

}  // namespace lwcl::quant
