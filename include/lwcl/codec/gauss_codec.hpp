#pragma once
// gauss_codec: lossless exponent coding of bf16, f16 and f32 tensors without histograms. Each block of
// 4096 values is described by one statistic, its root mean square, which picks one of four code tables
// derived in closed form from a normal law (gauss_tables.hpp); the exponents are Huffman-coded with it
// and decoded several per table lookup, the sign and mantissa bits are stored as raw planes, and every
// block decodes on its own, in parallel. Layout and figures: docs/feature-cache.md.

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "lwcl/codec/concept.hpp"
#include "lwcl/codec/gauss_tables.hpp"
#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"

namespace lwcl::codec {

namespace gauss {

// The payload: a header, one 10-byte directory entry per block, the raw planes of every element, then
// the blocks' exponent streams one after another.
struct layout {
  static constexpr std::uint8_t format = 1;
  static constexpr std::size_t header = 24;
  static constexpr std::size_t block = 4096, lanes = 4, lane = block / lanes;  // elements
  // directory entry: u16 info = t (bits 0-9) | law << 10 | mode << 12, then u16 stream bytes of each lane
  static constexpr std::size_t entry = 2 + 2 * lanes;
  static constexpr std::uint16_t mode_coded = 0, mode_raw = 1;
};

// The three float layouts. hi(): the plane byte beside the exponent (sign and the top mantissa bits);
// f32 keeps its low 16 mantissa bits in a second plane, f16 its top 2 mantissa bits and sign in a
// 3-bit plane (8 values in 3 bytes) and its low 8 in a byte plane.
struct bf16_format {
  using bits_t = std::uint16_t;
  static constexpr std::uint8_t kind = 1;
  static constexpr int exponent_bits = 8, bias = 127;
  static constexpr std::string_view name = "bf16";
  LWCL_HD static std::uint32_t exponent(bits_t b) { return (b >> 7) & 0xffu; }
  LWCL_HD static std::uint32_t mantissa7(bits_t b) { return b & 0x7fu; }
  LWCL_HD static std::size_t plane_bytes(std::size_t n) { return n; }
};
struct f32_format {
  using bits_t = std::uint32_t;
  static constexpr std::uint8_t kind = 3;
  static constexpr int exponent_bits = 8, bias = 127;
  static constexpr std::string_view name = "f32";
  LWCL_HD static std::uint32_t exponent(bits_t b) { return (b >> 23) & 0xffu; }
  LWCL_HD static std::uint32_t mantissa7(bits_t b) { return (b >> 16) & 0x7fu; }
  LWCL_HD static std::size_t plane_bytes(std::size_t n) { return 3 * n; }
};
struct f16_format {
  using bits_t = std::uint16_t;
  static constexpr std::uint8_t kind = 2;
  static constexpr int exponent_bits = 5, bias = 15;
  static constexpr std::string_view name = "f16";
  LWCL_HD static std::uint32_t exponent(bits_t b) { return (b >> 10) & 0x1fu; }
  LWCL_HD static std::uint32_t mantissa7(bits_t b) { return (b >> 3) & 0x7fu; }
  LWCL_HD static std::size_t plane_bytes(std::size_t n) { return n + (n + 7) / 8 * 3; }
};

LWCL_HD constexpr std::size_t blocks_of(std::size_t n) { return (n + layout::block - 1) / layout::block; }

// How an encoder picks a block's table: from its rms alone, or by trying the tables near it on the
// block's exponent histogram (smaller output, slower encoding; decoding is the same).
enum class fit : std::uint8_t { rms, search };

namespace detail {

LWCL_HD_INLINE std::uint64_t load64(const std::byte* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
// The 8 bytes at p, zero past end: the careful load of a stream's last bytes.
LWCL_HD_INLINE std::uint64_t load64_tail(const std::byte* p, const std::byte* end) {
  std::uint64_t v = 0;
  if (p < end) std::memcpy(&v, p, end - p < 8 ? static_cast<std::size_t>(end - p) : std::size_t{8});
  return v;
}

template <class F>
typename F::bits_t bits_at(const std::byte* raw, std::size_t i) {
  typename F::bits_t b;
  std::memcpy(&b, raw + i * sizeof b, sizeof b);
  return b;
}

// round(4 (log2 rms + bias)) of the block, from each value's exponent and top 7 mantissa bits (the
// statistic needs no more). Zeros, subnormals, infinities and NaNs count as zero.
// t = round(2 log2(sum / n) + 4 bias), clamped to [0, 4 emax + 3], by comparisons rather than a log so
// that the host and the device agree on every block. The squares summed are exact (8 significant
// bits), so the sums agree too wherever the additions run in the same order, contracted or not.
template <int ExponentBits, int Bias>
LWCL_HD_INLINE int statistic_of(float sum, std::size_t n) {
  constexpr int top = 4 * ((1 << ExponentBits) - 1) + 3;
  if (!(sum > 0)) return 0;
  if (!(sum < 3.4e38f)) return top;  // an overflowed sum: the largest exponents
  const double mean = static_cast<double>(sum) / static_cast<double>(n);
  int e = 0;
  const double m2 = 2.0 * frexp(mean, &e);  // mean = m2 2^(e-1), m2 in [1, 2)
  const int q = m2 >= 1.6817928305074290 ? 2 : m2 >= 1.1892071150027210 ? 1 : 0;  // 2^0.75, 2^0.25
  const int t = 2 * (e - 1) + q + 4 * Bias;
  return t < 0 ? 0 : t > top ? top : t;
}

template <class F>
float square_of(const std::byte* raw, std::size_t i) {
  constexpr std::uint32_t emax = (1u << F::exponent_bits) - 1;
  const auto b = bits_at<F>(raw, i);
  const std::uint32_t e = F::exponent(b);
  const std::uint32_t keep = 0u - static_cast<std::uint32_t>((e != 0) & (e != emax));  // branch-free, so it vectorises
  const float m = std::bit_cast<float>((((e + 127u - F::bias) << 23) | (F::mantissa7(b) << 16)) & keep);
  return m * m;
}

template <class F>
int block_statistic(const std::byte* raw, std::size_t n) {
  float part[8] = {};  // eight running sums, one vector register
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (std::size_t j = 0; j < 8; ++j) part[j] += square_of<F>(raw, i + j);
  for (; i < n; ++i) part[0] += square_of<F>(raw, i);
  float sum = 0;
  for (float p : part) sum += p;
  return statistic_of<F::exponent_bits, F::bias>(sum, n);
}

// The t near `guess` (from 2^-2 to 2^1 times the rms, in quarter octaves) and the law whose table
// codes the block's exponents in the fewest bits, from their histogram, as t | law << 10: an
// encoder's choice the decoder does not need to know about.
template <class F>
int searched_statistic(const std::byte* raw, std::size_t n, int guess) {
  constexpr int eb = F::exponent_bits;
  constexpr int emax = (1 << eb) - 1;
  std::uint32_t hist[emax + 1] = {};
  for (std::size_t i = 0; i < n; ++i) ++hist[F::exponent(bits_at<F>(raw, i))];
  int used[emax + 1], distinct = 0;
  for (int e = 0; e <= emax; ++e)
    if (hist[e]) used[distinct++] = e;
  int best = guess;
  std::uint64_t best_bits = ~std::uint64_t{0};
  for (int t = std::max(0, guess - 8); t <= std::min(4 * emax + 3, guess + 4); ++t) {
    for (const law l : {law::normal, law::laplace}) {
    const class_table& tab = code_tables().by_class[static_cast<std::size_t>(table_of(t, l))];
    std::uint64_t bits = 0;
    for (int k = 0; k < distinct; ++k) {
      const int e = used[k], r = e - (t >> 2) + below;
      const unsigned l = r >= 0 && r < window ? tab.codes[static_cast<std::size_t>(r)].length
                                              : tab.codes[escape].length + static_cast<unsigned>(eb);
      bits += static_cast<std::uint64_t>(hist[e]) * l;
    }
    if (bits < best_bits) {
      best_bits = bits;
      best = t | (static_cast<int>(l) << 10);
    }
    }
  }
  return best;
}

// Writes the plane bytes of elements [first, first + n) (first a multiple of 8).
template <class F>
void write_planes(const std::byte* raw, std::size_t count, std::size_t first, std::size_t n, std::byte* planes) {
  if constexpr (std::is_same_v<F, bf16_format>) {
    for (std::size_t i = first; i < first + n; ++i) {
      const auto b = bits_at<F>(raw, i);
      planes[i] = static_cast<std::byte>(((b >> 8) & 0x80u) | (b & 0x7fu));
    }
  } else if constexpr (std::is_same_v<F, f32_format>) {
    std::byte* lo = planes + count;
    for (std::size_t i = first; i < first + n; ++i) {
      const auto b = bits_at<F>(raw, i);
      planes[i] = static_cast<std::byte>(((b >> 24) & 0x80u) | ((b >> 16) & 0x7fu));
      const auto low = static_cast<std::uint16_t>(b & 0xffffu);
      std::memcpy(lo + 2 * i, &low, 2);
    }
  } else {
    std::byte* three = planes + count;
    for (std::size_t g = first; g < first + n; g += 8) {
      std::uint32_t packed = 0;
      for (std::size_t k = 0; k < 8 && g + k < first + n; ++k) {
        const auto b = bits_at<F>(raw, g + k);
        planes[g + k] = static_cast<std::byte>(b & 0xffu);
        packed |= (((b >> 13) & 4u) | ((b >> 8) & 3u)) << (3 * k);
      }
      for (std::size_t k = 0; k < 3; ++k) three[g / 8 * 3 + k] = static_cast<std::byte>((packed >> (8 * k)) & 0xffu);
    }
  }
}

// Joins exponent e[i] (already absolute) with the planes into elements [first, first + n).
template <class F>
void join(const std::uint8_t* e, const std::byte* planes, std::size_t count, std::size_t first, std::size_t n,
          std::byte* raw) {
  if constexpr (std::is_same_v<F, bf16_format>) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(planes) + first;
    std::byte* out = raw + 2 * first;
    for (std::size_t i = 0; i < n; ++i) {
      const auto v = static_cast<std::uint16_t>(((p[i] & 0x80u) << 8) | (static_cast<std::uint32_t>(e[i]) << 7) | (p[i] & 0x7fu));
      std::memcpy(out + 2 * i, &v, 2);
    }
  } else if constexpr (std::is_same_v<F, f32_format>) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(planes) + first;
    const std::byte* lo = planes + count + 2 * first;
    std::byte* out = raw + 4 * first;
    for (std::size_t i = 0; i < n; ++i) {
      std::uint16_t low;
      std::memcpy(&low, lo + 2 * i, 2);
      const std::uint32_t v = ((p[i] & 0x80u) << 24) | (static_cast<std::uint32_t>(e[i]) << 23) | ((p[i] & 0x7fu) << 16) | low;
      std::memcpy(out + 4 * i, &v, 4);
    }
  } else {
    const auto* p = reinterpret_cast<const std::uint8_t*>(planes);
    const auto* three = p + count;
    for (std::size_t g = first; g < first + n; g += 8) {
      const std::uint32_t packed = three[g / 8 * 3] | (three[g / 8 * 3 + 1] << 8) | (three[g / 8 * 3 + 2] << 16);
      for (std::size_t k = 0; k < 8 && g + k < first + n; ++k) {
        const std::uint32_t s = (packed >> (3 * k)) & 7u;
        const auto v = static_cast<std::uint16_t>(((s & 4u) << 13) | ((e[g + k - first] & 0x1fu) << 10) |
                                                  ((s & 3u) << 8) | p[g + k]);
        std::memcpy(raw + 2 * (g + k), &v, 2);
      }
    }
  }
}

// Appends `length` (at most 40) bits of `value` (LSB first) at byte `pos` of out, which has 8 bytes of slack.
struct bit_writer {
  std::byte* out;
  std::size_t pos = 0;
  std::uint64_t acc = 0;
  unsigned bits = 0;
  void put(std::uint64_t value, unsigned length) {
    acc |= value << bits;
    bits += length;
    std::memcpy(out + pos, &acc, 8);
    const unsigned whole = bits >> 3;  // at most 5: length is at most 40 and bits was below 8
    pos += whole;
    acc >>= 8 * whole;
    bits &= 7u;
  }
  std::size_t finish() {
    if (bits) {
      std::memcpy(out + pos, &acc, 8);
      ++pos;
    }
    return pos;
  }
};

// The lanes of a block: lane k holds elements [k * lane, (k + 1) * lane) of it, fewer in a short last
// block, and has its own stream, so four decoding chains run side by side.
LWCL_HD constexpr std::size_t lane_size(std::size_t n, int k) {
  const std::size_t lane = layout::lane, first = static_cast<std::size_t>(k) * lane;
  return n > first ? (n - first < lane ? n - first : lane) : 0;
}

// Codes block values [first, first + n) into `slot`, lane k at slot + k * lane_slot<F>(); sets each
// lane's stream bytes and the block's info.
template <class F>
inline constexpr std::size_t lane_slot() {
  return layout::lane * F::exponent_bits / 8 + 176;
}

template <class F>
void encode_block(const std::byte* raw, std::size_t first, std::size_t n, fit fit, std::byte* slot, std::uint16_t* bytes,
                  std::uint16_t& info) {
  constexpr int eb = F::exponent_bits;
  constexpr std::uint32_t emax = (1u << eb) - 1;
  constexpr int lanes = layout::lanes;
  const std::byte* in = raw + first * sizeof(typename F::bits_t);
  const int t = fit == fit::search ? searched_statistic<F>(in, n, block_statistic<F>(in, n)) : block_statistic<F>(in, n);
  const class_table& tab = code_tables().by_class[static_cast<std::size_t>(table_of(t, static_cast<law>(t >> 10)))];
  const int base = (t & 0x3ff) >> 2;
  // Each exponent's code, the escape's followed by the exponent itself.
  std::uint32_t value[emax + 1], length[emax + 1];
  const code esc = tab.codes[escape];
  for (std::uint32_t e = 0; e <= emax; ++e) {
    const int r = static_cast<int>(e) - base + below;
    if (r >= 0 && r < window) {
      value[e] = tab.codes[static_cast<std::size_t>(r)].bits;
      length[e] = tab.codes[static_cast<std::size_t>(r)].length;
    } else {
      value[e] = esc.bits | (e << esc.length);
      length[e] = esc.length + eb;
    }
  }
  std::size_t m[lanes], cap[lanes], shortest = layout::lane;
  bit_writer w[lanes];
  for (int k = 0; k < lanes; ++k) {
    m[k] = lane_size(n, k);
    cap[k] = (m[k] * eb + 7) / 8;  // a lane coded longer than its raw exponents sends the block raw
    shortest = std::min(shortest, m[k]);
    w[k] = bit_writer{slot + static_cast<std::size_t>(k) * lane_slot<F>()};
  }
  auto exponent_at = [&](int k, std::size_t i) {
    return F::exponent(bits_at<F>(in, static_cast<std::size_t>(k) * layout::lane + i));
  };
  bool coded = true;
  for (std::size_t i0 = 0; i0 < shortest && coded; i0 += 64) {
    const std::size_t i1 = std::min(shortest, i0 + 64);
    std::size_t i = i0;
    for (; i + 2 <= i1; i += 2)  // two codes a put: at most 40 bits
      for (int k = 0; k < lanes; ++k) {
        const std::uint32_t e0 = exponent_at(k, i), e1 = exponent_at(k, i + 1);
        w[k].put(value[e0] | (static_cast<std::uint64_t>(value[e1]) << length[e0]), length[e0] + length[e1]);
      }
    for (; i < i1; ++i)
      for (int k = 0; k < lanes; ++k) {
        const std::uint32_t e = exponent_at(k, i);
        w[k].put(value[e], length[e]);
      }
    for (int k = 0; k < lanes; ++k) coded = coded && w[k].pos <= cap[k];
  }
  for (int k = 0; k < lanes && coded; ++k)
    for (std::size_t i0 = shortest; i0 < m[k] && coded; i0 += 64) {
      for (std::size_t i = i0; i < std::min(m[k], i0 + 64); ++i) {
        const std::uint32_t e = exponent_at(k, i);
        w[k].put(value[e], length[e]);
      }
      coded = w[k].pos <= cap[k];
    }
  std::size_t coded_total = 0, raw_total = 0;
  for (int k = 0; k < lanes && coded; ++k) {
    bytes[k] = static_cast<std::uint16_t>(w[k].finish());
    coded = bytes[k] <= cap[k];
    coded_total += bytes[k];
    raw_total += cap[k];
  }
  if (coded && coded_total < raw_total) {
    info = static_cast<std::uint16_t>(t | (layout::mode_coded << 12));
    return;
  }
  for (int k = 0; k < lanes; ++k) {
    bit_writer r{slot + static_cast<std::size_t>(k) * lane_slot<F>()};
    for (std::size_t i = 0; i < m[k]; ++i) r.put(exponent_at(k, i), eb);
    bytes[k] = static_cast<std::uint16_t>(r.finish());
  }
  info = static_cast<std::uint16_t>(layout::mode_raw << 12);
}

// The multi-symbol decoding loop's step and its bounds, for one stream: four lookups from one 8-byte
// load (each lookup takes at most 12 bits, and an escape, rare, reloads after its raw bits).
inline constexpr int lookups_per_step = 4;
inline constexpr std::size_t step_symbols = lookups_per_step * (symbols_per_entry + 1);
inline constexpr std::size_t step_bytes = 8 + (lookups_per_step * (table_bits + 8) + 7) / 8;  // read at most
// Room a step needs past out[i]: its symbols, and the 8-byte store of its last lookup.
inline constexpr std::size_t step_room =
    std::max(step_symbols, (lookups_per_step - 1) * (symbols_per_entry + 1) + std::size_t{8});

template <int ExponentBits>
struct lane_decoder {
  const entry* multi;
  const std::uint16_t* single;
  std::uint8_t shift;  // relative symbol + shift = exponent (mod 256)
  std::uint64_t shift_lo, shift_hi;

  // multi and single: one table's entries (host or device memory, as the caller runs).
  LWCL_HD lane_decoder(const entry* m, const std::uint16_t* s1, std::uint8_t s) : multi(m), single(s1), shift(s) {
    // Adds shift to each symbol byte without carries between them: a symbol is below 128, so its sum
    // with shift's low 7 bits stays in its byte, and shift's top bit is added by xor.
    constexpr std::uint64_t ones = 0x0101010101010101ull;
    shift_lo = ones * (shift & 0x7fu);
    shift_hi = ones * (shift & 0x80u);
  }

  // One step at stream bit pos, writing from out[i] (8 bytes of room past the last symbol).
  LWCL_HD void step(const std::byte* stream, std::size_t& pos, std::uint8_t* out, std::size_t& i) const {
    constexpr std::uint64_t mask = (std::uint64_t{1} << table_bits) - 1, emask = (1u << ExponentBits) - 1;
    std::uint64_t buf = load64(stream + pos / 8) >> (pos & 7);
    for (int k = 0; k < lookups_per_step; ++k) {
      const entry x = multi[buf & mask];
      // Bytes past the symbols may carry into each other here: they are overwritten anyway.
      const std::uint64_t syms = (x + shift_lo) ^ shift_hi;
      std::memcpy(out + i, &syms, 8);
      i += entry_count(x);
      const std::uint32_t used = entry_bits(x);
      pos += used;
      buf >>= used;
      if (entry_escapes(x)) [[unlikely]] {
        out[i++] = static_cast<std::uint8_t>((load64(stream + pos / 8) >> (pos & 7)) & emask);
        pos += ExponentBits;
        buf = load64(stream + pos / 8) >> (pos & 7);
      }
    }
  }

  // Finishes a lane from symbol i at bit pos: steps on a zero-padded copy of the stream's last bytes,
  // then one lookup at a time, writing nothing at or past out[m] (the next lane's exponents). False
  // unless the stream holds exactly m codes.
  LWCL_HD bool finish(const std::byte* stream, std::size_t bytes, std::size_t pos, std::size_t m, std::uint8_t* out,
                      std::size_t i) const {
    constexpr std::uint64_t mask = (std::uint64_t{1} << table_bits) - 1, emask = (1u << ExponentBits) - 1;
    if (pos > 8 * bytes) return false;
    std::byte pad[64] = {};
    const std::size_t from = pos / 8, left = bytes - from;
    if (left + step_bytes <= sizeof pad) {
      std::memcpy(pad, stream + from, left);
      stream = pad;
      bytes = left;
      pos -= 8 * from;
      while (i + step_room <= m && pos / 8 + step_bytes <= sizeof pad) step(stream, pos, out, i);
    }
    const std::size_t total_bits = 8 * bytes;
    while (i < m) {
      if (pos >= total_bits) return false;
      const std::uint64_t buf = load64_tail(stream + pos / 8, stream + bytes) >> (pos & 7);
      const entry x = multi[buf & mask];
      const std::size_t count = entry_count(x);
      if (i + count + entry_escapes(x) <= m) {
        const std::uint64_t syms = (x + shift_lo) ^ shift_hi;
        for (std::size_t k = 0; k < count; ++k) out[i + k] = static_cast<std::uint8_t>(syms >> (8 * k));
        i += count;
        std::uint32_t used = entry_bits(x);
        if (entry_escapes(x)) {
          out[i++] = static_cast<std::uint8_t>((buf >> used) & emask);
          used += ExponentBits;
        }
        pos += used;
        continue;
      }
      const std::uint16_t s = single[buf & mask];
      std::uint32_t used = s & 15u;
      if ((s >> 4) == escape) {
        out[i] = static_cast<std::uint8_t>((buf >> used) & emask);
        used += ExponentBits;
      } else {
        out[i] = static_cast<std::uint8_t>((s >> 4) + shift);
      }
      ++i;
      pos += used;
    }
    return pos <= total_bits && total_bits - pos < 8;
  }
};

// Decodes the exponents of one block into e (lane k's at e + k * layout::lane; e has 16 bytes of
// slack), absolute. Returns false when a lane's stream does not hold exactly its codes.
template <class F>
bool decode_block(const std::byte* stream, const std::uint16_t* bytes, std::uint16_t info, std::size_t n,
                  std::uint8_t* e) {
  constexpr int eb = F::exponent_bits;
  constexpr std::uint64_t emask = (1u << eb) - 1;
  const std::byte* s[layout::lanes];
  std::size_t m[layout::lanes];
  s[0] = stream;
  for (std::size_t k = 0; k < layout::lanes; ++k) {
    m[k] = lane_size(n, static_cast<int>(k));
    if (k) s[k] = s[k - 1] + bytes[k - 1];
  }
  if ((info >> 12) == layout::mode_raw) {
    for (std::size_t k = 0; k < layout::lanes; ++k) {
      std::uint8_t* out = e + k * layout::lane;
      if (bytes[k] != (m[k] * eb + 7) / 8) return false;
      if constexpr (eb == 8) {
        std::memcpy(out, s[k], m[k]);
      } else {
        for (std::size_t i = 0; i < m[k]; ++i) {
          const std::size_t bit = i * eb;
          out[i] = static_cast<std::uint8_t>((load64_tail(s[k] + bit / 8, s[k] + bytes[k]) >> (bit & 7)) & emask);
        }
      }
    }
    return true;
  }
  const int t = info & 0x3ff;
  const class_table& tab = code_tables().by_class[static_cast<std::size_t>(table_of(t, static_cast<law>((info >> 10) & 1)))];
  const lane_decoder<eb> dec(tab.multi.data(), tab.single.data(), static_cast<std::uint8_t>((t >> 2) - below));
  static_assert(layout::lanes == 4, "the interleaved loop below runs four lanes");
  std::uint8_t *o0 = e, *o1 = e + layout::lane, *o2 = e + 2 * layout::lane, *o3 = e + 3 * layout::lane;
  std::size_t p0 = 0, p1 = 0, p2 = 0, p3 = 0, i0 = 0, i1 = 0, i2 = 0, i3 = 0;
  // The four lanes' chains side by side, while every lane has a step's room (so a lane never writes
  // into the next one's exponents).
  auto roomy = [&](std::size_t i, std::size_t pos, std::size_t k) {
    return i + step_room <= m[k] && pos / 8 + step_bytes <= bytes[k];
  };
  while (roomy(i0, p0, 0) && roomy(i1, p1, 1) && roomy(i2, p2, 2) && roomy(i3, p3, 3)) {
    dec.step(s[0], p0, o0, i0);
    dec.step(s[1], p1, o1, i1);
    dec.step(s[2], p2, o2, i2);
    dec.step(s[3], p3, o3, i3);
  }
  std::size_t pos[4] = {p0, p1, p2, p3}, at[4] = {i0, i1, i2, i3};
  for (std::size_t k = 0; k < layout::lanes; ++k) {
    std::uint8_t* out = e + k * layout::lane;
    while (roomy(at[k], pos[k], k)) dec.step(s[k], pos[k], out, at[k]);
    if (!dec.finish(s[k], bytes[k], pos[k], m[k], out, at[k])) return false;
  }
  return true;
}

}  // namespace detail
}  // namespace gauss

namespace gauss {

// Checks a payload's header (its first layout::header bytes, of a payload of `payload_bytes`) and
// returns its element count; throws lwcl::error naming what is wrong.
template <class F>
std::size_t check_header(std::span<const std::byte> head, std::size_t payload_bytes) {
  using L = layout;
  check(payload_bytes >= L::header && head.size() >= L::header, "gauss_codec: the ", payload_bytes,
        "-byte payload is shorter than its ", L::header, "-byte header");
  const std::byte* h = head.data();
  check(static_cast<std::uint8_t>(h[0]) == L::format, "gauss_codec: payload format ", int(h[0]), ", expected ",
        int(L::format));
  check(static_cast<std::uint8_t>(h[1]) == F::kind, "gauss_codec: payload holds element kind ", int(h[1]), ", expected ",
        int(F::kind), " (", F::name, ")");
  std::uint16_t block = 0;
  std::uint32_t fp = 0;
  std::uint64_t count = 0, stream_total = 0;
  std::memcpy(&block, h + 2, 2);
  std::memcpy(&fp, h + 4, 4);
  std::memcpy(&count, h + 8, 8);
  std::memcpy(&stream_total, h + 16, 8);
  check(block == L::block, "gauss_codec: payload blocks of ", block, " elements, expected ", L::block);
  check(fp == code_tables().fingerprint, "gauss_codec: payload coded with tables of fingerprint ", fp,
        ", this build's are ", code_tables().fingerprint, " (the two ends' erf differ)");
  check(count <= (std::uint64_t{1} << 48), "gauss_codec: payload declares ", count, " elements");
  const std::size_t blocks = blocks_of(count);
  const std::size_t streams = L::header + blocks * L::entry + F::plane_bytes(count);
  check(payload_bytes >= streams && payload_bytes - streams == stream_total, "gauss_codec: payload of ", payload_bytes,
        " bytes does not hold a ", streams, "-byte header, directory and planes and ", stream_total, " stream bytes");
  return count;
}

// Where each block's streams start in the payload (one more entry: the payload's end), from the
// directory of a payload of n elements whose header check_header passed (`head`: at least the first
// layout::header + blocks * layout::entry bytes), each entry checked.
template <class F>
std::vector<std::size_t> stream_offsets(std::span<const std::byte> head, std::size_t payload_bytes, std::size_t n) {
  using L = layout;
  const std::size_t blocks = blocks_of(n);
  check(head.size() >= L::header + blocks * L::entry, "gauss_codec: directory of ", blocks, " blocks cut short");
  const std::byte* h = head.data();
  const std::size_t streams = L::header + blocks * L::entry + F::plane_bytes(n);
  std::vector<std::size_t> offset(blocks + 1, streams);
  for (std::size_t b = 0; b < blocks; ++b) {
    std::uint16_t info = 0;
    std::memcpy(&info, h + L::header + b * L::entry, 2);
    std::size_t bytes = 0;
    for (std::size_t k = 0; k < L::lanes; ++k) {
      std::uint16_t lane_bytes = 0;
      std::memcpy(&lane_bytes, h + L::header + b * L::entry + 2 + 2 * k, 2);
      bytes += lane_bytes;
    }
    const bool known = (info >> 12) == L::mode_raw ? (info & 0xfff) == 0
                                                   : (info >> 12) == L::mode_coded && (info & 0x800) == 0;
    check(known, "gauss_codec: block ", b, " has directory info ", info, ", not a known mode and table");
    offset[b + 1] = offset[b] + bytes;
  }
  check(offset[blocks] == payload_bytes, "gauss_codec: the directory's streams take ", offset[blocks] - streams,
        " bytes, the payload holds ", payload_bytes - streams);
  return offset;
}

// The payload's header for n elements of format F with `stream_total` stream bytes.
template <class F>
void write_header(std::byte* h, std::size_t n, std::size_t stream_total) {
  std::memset(h, 0, layout::header);
  h[0] = static_cast<std::byte>(layout::format);
  h[1] = static_cast<std::byte>(F::kind);
  const auto block = static_cast<std::uint16_t>(layout::block);
  const std::uint32_t fp = code_tables().fingerprint;
  const std::uint64_t count = n, streams = stream_total;
  std::memcpy(h + 2, &block, 2);
  std::memcpy(h + 4, &fp, 4);
  std::memcpy(h + 8, &count, 8);
  std::memcpy(h + 16, &streams, 8);
}

}  // namespace gauss

class gauss_codec {
 public:
  static constexpr std::string_view name = "gauss";
  static constexpr encoding id = encoding::gauss;

  // threads: how many OpenMP threads code the blocks (each block alone, so the bytes do not depend on it).
  explicit gauss_codec(int threads = 1, gauss::fit fit = gauss::fit::rms) : threads_(std::max(1, threads)), fit_(fit) {}
  int threads() const { return threads_; }
  gauss::fit fit() const { return fit_; }

  void encode(dtype type, std::span<const std::byte> raw, std::vector<std::byte>& out) const {
    switch (type) {
      case dtype::bf16: return encode_as<gauss::bf16_format>(raw, out);
      case dtype::f16: return encode_as<gauss::f16_format>(raw, out);
      case dtype::f32: return encode_as<gauss::f32_format>(raw, out);
      default: fail("gauss_codec: cannot encode ", dtype_name(type), " elements, expected bf16, f16 or f32");
    }
  }

  void decode(dtype type, std::span<const std::byte> encoded, std::span<std::byte> raw) const {
    switch (type) {
      case dtype::bf16: return decode_as<gauss::bf16_format>(encoded, raw);
      case dtype::f16: return decode_as<gauss::f16_format>(encoded, raw);
      case dtype::f32: return decode_as<gauss::f32_format>(encoded, raw);
      default: fail("gauss_codec: cannot decode ", dtype_name(type), " elements, expected bf16, f16 or f32");
    }
  }

 private:
  template <class F>
  void encode_as(std::span<const std::byte> raw, std::vector<std::byte>& out) const {
    using L = gauss::layout;
    constexpr std::size_t width = sizeof(typename F::bits_t);
    check(raw.size() % width == 0, "gauss_codec: ", raw.size(), " bytes are not a whole number of ", width, "-byte ",
          F::name, " elements");
    gauss::code_tables();  // built here, not inside the threads
    const std::size_t n = raw.size() / width, blocks = gauss::blocks_of(n);
    const std::size_t planes = L::header + blocks * L::entry, streams = planes + F::plane_bytes(n);
    const std::size_t lane_slot = gauss::detail::lane_slot<F>(), slot = L::lanes * lane_slot;
    out.resize(streams + blocks * slot + 8);
    std::byte* h = out.data();
    std::vector<std::uint16_t> bytes(blocks * L::lanes), info(blocks);
    const auto* in = raw.data();
    auto code = [&](std::size_t b) {
      const std::size_t first = b * L::block, m = std::min(L::block, n - first);
      gauss::detail::write_planes<F>(in, n, first, m, h + planes);
      gauss::detail::encode_block<F>(in, first, m, fit_, h + streams + b * slot, &bytes[b * L::lanes], info[b]);
    };
    const auto nb = static_cast<std::ptrdiff_t>(blocks);
    if (threads_ > 1 && blocks > 1) {
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (std::ptrdiff_t b = 0; b < nb; ++b) code(static_cast<std::size_t>(b));
    } else {
      for (std::size_t b = 0; b < blocks; ++b) code(b);
    }
    std::size_t at = streams;
    for (std::size_t b = 0; b < blocks; ++b) {
      std::memcpy(h + L::header + b * L::entry, &info[b], 2);
      for (std::size_t k = 0; k < L::lanes; ++k) {
        const std::uint16_t lane_bytes = bytes[b * L::lanes + k];
        std::memmove(h + at, h + streams + b * slot + k * lane_slot, lane_bytes);
        at += lane_bytes;
        std::memcpy(h + L::header + b * L::entry + 2 + 2 * k, &lane_bytes, 2);
      }
    }
    out.resize(at);
    gauss::write_header<F>(out.data(), n, at - streams);
  }

  template <class F>
  void decode_as(std::span<const std::byte> enc, std::span<std::byte> raw) const {
    using L = gauss::layout;
    constexpr std::size_t width = sizeof(typename F::bits_t);
    const std::size_t n = gauss::check_header<F>(enc, enc.size());
    check(raw.size() % width == 0 && n == raw.size() / width, "gauss_codec: payload holds ", n, " elements, expected ",
          raw.size() / width);
    const std::vector<std::size_t> offset = gauss::stream_offsets<F>(enc, enc.size(), n);
    const std::byte* h = enc.data();
    const std::size_t blocks = gauss::blocks_of(n), planes = L::header + blocks * L::entry;
    std::byte* out = raw.data();
    // The first bad block, if any: a lock-free minimum, since any thread may find one.
    std::atomic<std::size_t> first_bad{SIZE_MAX};
    auto decode_one = [&](std::size_t b) {
      std::uint8_t e[L::block + 16];
      const std::size_t first = b * L::block, m = std::min(L::block, n - first);
      std::uint16_t info = 0, lane_bytes[L::lanes];
      std::memcpy(&info, h + L::header + b * L::entry, 2);
      std::memcpy(lane_bytes, h + L::header + b * L::entry + 2, sizeof lane_bytes);
      if (!gauss::detail::decode_block<F>(h + offset[b], lane_bytes, info, m, e)) {
        std::size_t seen = first_bad.load(std::memory_order_relaxed);
        while (b < seen && !first_bad.compare_exchange_weak(seen, b, std::memory_order_relaxed)) {
        }
        return;
      }
      gauss::detail::join<F>(e, h + planes, n, first, m, out);
    };
    const auto nb = static_cast<std::ptrdiff_t>(blocks);
    if (threads_ > 1 && blocks > 1) {
#pragma omp parallel for num_threads(threads_) schedule(static)
      for (std::ptrdiff_t b = 0; b < nb; ++b) decode_one(static_cast<std::size_t>(b));
    } else {
      for (std::size_t b = 0; b < blocks; ++b) decode_one(b);
    }
    const std::size_t bad = first_bad.load();
    check(bad == SIZE_MAX, "gauss_codec: the exponent stream of block ", bad, " does not hold exactly its ",
          bad == SIZE_MAX ? 0 : std::min<std::size_t>(L::block, n - bad * L::block), " codes");
  }

  int threads_;
  gauss::fit fit_;
};
static_assert(lossless_codec<gauss_codec>);

}  // namespace lwcl::codec
