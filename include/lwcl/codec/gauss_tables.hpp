#pragma once
// The code tables of gauss_codec, derived in closed form from a model of the values: for
// x ~ N(0, sigma^2) the probability that |x| has binary exponent k is erf(2^(k+1) / (sigma sqrt 2)) -
// erf(2^k / (sigma sqrt 2)), which depends on k - log2 sigma alone. So four tables (log2 sigma at a
// quarter-octave's resolution) serve every block; a block names one by a single number, its t. Four
// more follow the Laplace law of the same rms, exp(-2^k sqrt 2 / sigma) - exp(-2^(k+1) sqrt 2 / sigma),
// for tensors with heavier tails than a normal one (an encoder that searches may pick them).

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "lwcl/codec/huffman.hpp"
#include "lwcl/core/config.hpp"

namespace lwcl::codec::gauss {

// A block's t is round(4 (log2 sigma + bias)): the window's base exponent is t >> 2, the table
// (t & 3) + 4 law.
enum class law : int { normal = 0, laplace = 1 };
inline constexpr int laws = 2, fractions = 4, classes = laws * fractions;
LWCL_HD constexpr int table_of(int t, law l) { return (t & 3) + fractions * static_cast<int>(l); }
// Relative symbol r stands for the exponent base - below + r. The window reaches 2^-30 sigma below
// and 2^10 sigma above (a normal value passes 8 sigma once in 10^15); anything else escapes.
inline constexpr int window = 41, below = 30;
inline constexpr int escape = window;  // followed by the exponent's own bits
inline constexpr int alphabet = window + 1;
inline constexpr int table_bits = huffman::max_length;  // one lookup resolves at least one code
inline constexpr int symbols_per_entry = 5;
// Weights are probabilities in units of 2^-24, every symbol at least 1 so each has a code. The escape
// also carries zeros, infinities, NaNs and outliers, which real tensors hold more of than a normal
// law, so it keeps at least 2^-11 of the mass (a code of about 11 bits).
inline constexpr double weight_scale = 16777216.0, escape_floor = 1.0 / 2048.0;

// Probability, under law l, of relative symbol r in table fraction f: x / sigma in [2^u, 2^(u+1))
// with u = r - below - f/4, sigma the rms.
inline double symbol_probability(law l, int f, int r) {
  const double u = r - below - f / 4.0;
  if (l == law::normal) {
    const double lo = std::exp2(u) / std::sqrt(2.0);
    return std::erf(2.0 * lo) - std::erf(lo);
  }
  const double lo = std::exp2(u) * std::sqrt(2.0);  // |x| ~ Exp(rate sqrt 2 / sigma)
  return std::exp(-lo) - std::exp(-2.0 * lo);
}

struct code {
  std::uint32_t bits = 0;  // LSB-first
  std::uint8_t length = 0;
};

// One multi-symbol decoding entry: the codes that fit wholly in the next table_bits bits, up to
// symbols_per_entry of them, stopping after an escape. Packed for the decoding loop: bytes 0-4 the
// symbols (from the lowest), byte 5 their count, byte 6 1 when an escape ends the entry, byte 7 the
// bits they take (the escape's code included, its raw exponent bits not). The loop stores all 8
// bytes as symbols: those past the count are overwritten by the next lookup's.
using entry = std::uint64_t;
LWCL_HD constexpr std::uint32_t entry_count(entry e) { return static_cast<std::uint32_t>(e >> 40) & 255u; }
LWCL_HD constexpr bool entry_escapes(entry e) { return (e >> 48) & 1u; }
LWCL_HD constexpr std::uint32_t entry_bits(entry e) { return static_cast<std::uint32_t>(e >> 56); }

struct class_table {
  std::array<code, alphabet> codes{};
  std::array<entry, std::size_t{1} << table_bits> multi{};  // several codes per lookup
  std::array<std::uint16_t, std::size_t{1} << table_bits> single{};  // (symbol << 4) | length
};

struct tables {
  std::array<class_table, classes> by_class{};
  std::uint32_t fingerprint = 0;  // of every code length: both ends of a transfer must agree
};

namespace tables_detail {

inline class_table build(int table) {
  const law l = static_cast<law>(table / fractions);
  const int f = table % fractions;
  huffman::counts weight{};
  double in_window = 0;
  for (int r = 0; r < window; ++r) {
    const double p = symbol_probability(l, f, r);
    in_window += p;
    weight[static_cast<std::size_t>(r)] = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::llround(p * weight_scale)));
  }
  const double p_escape = std::max(1.0 - in_window, escape_floor);
  weight[escape] = static_cast<std::uint64_t>(std::llround(p_escape * weight_scale));
  const huffman::code_table ct = huffman::canonical_codes(huffman::code_lengths(weight));

  class_table t;
  for (int s = 0; s < alphabet; ++s)
    t.codes[static_cast<std::size_t>(s)] = {ct.code[static_cast<std::size_t>(s)], ct.len[static_cast<std::size_t>(s)]};
  constexpr std::size_t size = std::size_t{1} << table_bits;
  for (int s = 0; s < alphabet; ++s) {
    const int l = ct.len[static_cast<std::size_t>(s)];
    for (std::size_t j = ct.code[static_cast<std::size_t>(s)]; j < size; j += std::size_t{1} << l)
      t.single[j] = static_cast<std::uint16_t>((s << 4) | l);
  }
  for (std::size_t v = 0; v < size; ++v) {
    std::uint64_t syms = 0, count = 0, used = 0, escapes = 0;
    while (count < symbols_per_entry) {
      const std::uint16_t s = t.single[(v >> used) & (size - 1)];
      const std::uint64_t l = s & 15u;
      if (used + l > table_bits) break;  // this code runs past the bits the entry sees
      used += l;
      if ((s >> 4) == escape) {
        escapes = 1;
        break;
      }
      syms |= static_cast<std::uint64_t>(s >> 4) << (8 * count);
      ++count;
    }
    t.multi[v] = syms | (count << 40) | (escapes << 48) | (used << 56);
  }
  return t;
}

}  // namespace tables_detail

// The tables, built once per process (about a millisecond) and shared by every codec object.
inline const tables& code_tables() {
  static const tables t = [] {
    tables r;
    std::uint32_t h = 2166136261u;  // FNV-1a over the code lengths
    for (int f = 0; f < classes; ++f) {
      r.by_class[static_cast<std::size_t>(f)] = tables_detail::build(f);
      for (const code& c : r.by_class[static_cast<std::size_t>(f)].codes) h = (h ^ c.length) * 16777619u;
    }
    r.fingerprint = h;
    return r;
  }();
  return t;
}

}  // namespace lwcl::codec::gauss
