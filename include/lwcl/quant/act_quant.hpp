#pragma once
// Activations quantised to int8 per token (W8A8, and W4A8): each input row x of a linear becomes 8-bit
// codes under its own asymmetric range, s = (max(x, 0) - min(x, 0)) / 255 and zero point
// z = round(-min(x, 0) / s), q = clamp(round(x / s) + z, 0, 255), so x ~ s (q - z). A linear whose weights
// are packed symmetric or asymmetric int8/int4 then multiplies in integers: per weight group g,
//   sum_k (q_k - z)(c_k - z_g) = dot(q, c') + d_g S_q - z (S_c' + d_g n_g)
// with c' the stored code made a signed byte (int8: c xor 0x80, so d_g = 128 - z_g; int4: the nibble,
// d_g = -z_g), S_q the group's sum of activation codes, S_c' the group's sum of weight codes and n_g its
// width; the result is scaled by s times the group's weight scale. The integer dot products run on
// AVX-512 VNNI (vpdpbusd: unsigned activation bytes times signed weight bytes) where the CPU has it, and
// as plain loops elsewhere. a8_matmul equals the f32 product of the dequantised weights and the
// dequantised activations up to rounding of the scaling (the integer part is exact; the scaling runs in
// double and rounds once to f32).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/quant/packed.hpp"

namespace lwcl::quant {

// M rows (tokens) of K activations as per-token int8 codes.
struct token_codes {
  index_t M = 0, K = 0;
  std::vector<std::uint8_t> codes;  // M x K
  std::vector<float> scale;         // M
  std::vector<std::int32_t> zero;   // M
};

// The scale and zero point of one token's K values (see the header comment). An all-zero row gets s = 1.
inline void token_params(const float* x, index_t K, float& s, std::int32_t& z, std::string_view what) {
  float lo = 0.0f, hi = 0.0f;
  for (index_t k = 0; k < K; ++k) {
    check(std::isfinite(x[k]), "quant: ", what, ": activation ", x[k], " at column ", k, " is not finite");
    lo = std::min(lo, x[k]);
    hi = std::max(hi, x[k]);
  }
  s = (hi - lo) / 255.0f;
  if (!(s > 0.0f)) s = 1.0f;
  z = static_cast<std::int32_t>(std::clamp(std::nearbyint(-lo / s), 0.0f, 255.0f));
}

inline std::uint8_t token_code(float x, float s, std::int32_t z) {
  return static_cast<std::uint8_t>(std::clamp(std::nearbyint(x / s) + static_cast<float>(z), 0.0f, 255.0f));
}

inline void quantize_tokens(const float* x, index_t M, index_t K, token_codes& out, std::string_view what = "activations") {
  check(M > 0 && K > 0, "quant: ", what, ": ", M, " x ", K, " activations (expected at least one row and column)");
  out.M = M;
  out.K = K;
  out.codes.resize(static_cast<std::size_t>(M * K));
  out.scale.resize(static_cast<std::size_t>(M));
  out.zero.resize(static_cast<std::size_t>(M));
  for (index_t m = 0; m < M; ++m) {
    const float* r = x + m * K;
    float s;
    std::int32_t z;
    token_params(r, K, s, z, what);
    out.scale[static_cast<std::size_t>(m)] = s;
    out.zero[static_cast<std::size_t>(m)] = z;
    std::uint8_t* q = out.codes.data() + m * K;
    for (index_t k = 0; k < K; ++k) q[k] = token_code(r[k], s, z);
  }
}

// In place: each row of x (M x K) := s (q - z), what a W8A8 linear sees of it (quantisation-aware training).
inline void fake_quantize_tokens(float* x, index_t M, index_t K, std::string_view what = "activations") {
  for (index_t m = 0; m < M; ++m) {
    float* r = x + m * K;
    float s;
    std::int32_t z;
    token_params(r, K, s, z, what);
    for (index_t k = 0; k < K; ++k) r[k] = s * static_cast<float>(static_cast<std::int32_t>(token_code(r[k], s, z)) - z);
  }
}

// A packed weight prepared for 8-bit activations: signed code bytes, f32 group scales, and per (row,
// group) the offset d_g and the sum of the signed codes.
struct a8_weight {
  index_t rows = 0, cols = 0, group_width = 0, groups = 0;
  int bits = 8;
  std::vector<std::int8_t> codes;      // int8: rows x cols; int4: the packed nibbles as stored
  std::vector<float> scale;            // rows x groups
  std::vector<std::int32_t> offset;    // rows x groups: d_g
  std::vector<std::int32_t> code_sum;  // rows x groups: S_c'
  std::size_t bytes() const { return codes.size() + 4 * (scale.size() + offset.size() + code_sum.size()); }
};

inline a8_weight prepare_a8(const packed_weight& p, std::string_view what = "a8_weight") {
  p.validate(what);
  a8_weight w;
  w.rows = p.rows;
  w.cols = p.cols;
  w.bits = p.format.bits;
  w.group_width = p.format.group_width(p.cols);
  w.groups = p.groups();
  const auto n = static_cast<std::size_t>(w.rows * w.groups);
  w.scale.resize(n);
  w.offset.resize(n);
  w.code_sum.resize(n);
  w.codes.resize(p.codes.size());
  for (std::size_t i = 0; i < p.codes.size(); ++i)
    w.codes[i] = static_cast<std::int8_t>(w.bits == 8 ? static_cast<std::uint8_t>(p.codes[i] ^ 0x80u) : p.codes[i]);
  for (index_t r = 0; r < w.rows; ++r)
    for (index_t g = 0; g < w.groups; ++g) {
      const group_params gp = p.params(r, g);
      const auto k = static_cast<std::size_t>(r * w.groups + g);
      w.scale[k] = gp.scale;
      w.offset[k] = w.bits == 8 ? 128 - gp.zero : -gp.zero;
      std::int32_t s = 0;
      for (index_t c = g * w.group_width; c < (g + 1) * w.group_width; ++c)
        s += w.bits == 8 ? code_at(p, r, c) - 128 : code_at(p, r, c);
      w.code_sum[k] = s;
    }
  return w;
}

namespace detail {

// One token's codes in the order the kernels read them: int8 as they are; int4 split per 32-column tile
// into the 16 columns a byte's low nibbles hold, then the 16 its high nibbles hold (packed.hpp's layout),
// so byte b of the weight row meets activation lo[b] and hi[b].
inline void a8_arrange(const std::uint8_t* q, index_t K, int bits, std::uint8_t* out) {
  if (bits == 8) {
    std::copy_n(q, K, out);
    return;
  }
  std::uint8_t* lo = out;
  std::uint8_t* hi = out + K / 2;
  for (index_t t = 0; t < K / 32; ++t)
    for (index_t j = 0; j < 16; ++j) {
      lo[t * 16 + j] = q[t * 32 + j];
      hi[t * 16 + j] = q[t * 32 + 16 + j];
    }
}

// Integer dot products of one weight row's groups with a token (arranged), into dots[g].
inline void a8_row_dots_baseline(const a8_weight& w, const std::int8_t* row, const std::uint8_t* xa, std::int32_t* dots) {
  const index_t gw = w.group_width;
  if (w.bits == 8) {
    for (index_t g = 0; g < w.groups; ++g) {
      std::int32_t s = 0;
      for (index_t c = g * gw; c < (g + 1) * gw; ++c) s += static_cast<std::int32_t>(xa[c]) * row[c];
      dots[g] = s;
    }
    return;
  }
  const std::uint8_t* lo = xa;
  const std::uint8_t* hi = xa + w.cols / 2;
  for (index_t g = 0; g < w.groups; ++g) {
    std::int32_t s = 0;
    for (index_t b = g * gw / 2; b < (g + 1) * gw / 2; ++b) {
      const auto v = static_cast<std::uint8_t>(row[b]);
      s += static_cast<std::int32_t>(lo[b]) * (v & 0xF) + static_cast<std::int32_t>(hi[b]) * (v >> 4);
    }
    dots[g] = s;
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// gcc 12 reports its own intrinsics' deliberately undefined registers (_mm512_undefined_*) as maybe
// uninitialised once they are inlined here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define LWCL_QUANT_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
// Sum of the int32 lanes of the byte products over n bytes (a multiple of 16).
LWCL_QUANT_VNNI inline std::int32_t a8_dot_vnni(const std::uint8_t* x, const std::int8_t* w, index_t n) {
  __m512i acc = _mm512_setzero_si512();
  index_t i = 0;
  for (; i + 64 <= n; i += 64) acc = _mm512_dpbusd_epi32(acc, _mm512_loadu_si512(x + i), _mm512_loadu_si512(w + i));
  __m128i a4 = _mm_setzero_si128();
  for (; i < n; i += 16)
    a4 = _mm_dpbusd_epi32(a4, _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)), _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i)));
  return _mm512_reduce_add_epi32(acc) + _mm_extract_epi32(a4, 0) + _mm_extract_epi32(a4, 1) + _mm_extract_epi32(a4, 2) +
         _mm_extract_epi32(a4, 3);
}
LWCL_QUANT_VNNI inline std::int32_t a8_dot4_vnni(const std::uint8_t* lo, const std::uint8_t* hi, const std::int8_t* w, index_t n) {
  const __m512i m = _mm512_set1_epi8(0x0F);
  __m512i acc = _mm512_setzero_si512();
  index_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m512i v = _mm512_loadu_si512(w + i);
    acc = _mm512_dpbusd_epi32(acc, _mm512_loadu_si512(lo + i), _mm512_and_si512(v, m));
    acc = _mm512_dpbusd_epi32(acc, _mm512_loadu_si512(hi + i), _mm512_and_si512(_mm512_srli_epi16(v, 4), m));
  }
  std::int32_t s = _mm512_reduce_add_epi32(acc);
  const __m128i m4 = _mm_set1_epi8(0x0F);
  __m128i a4 = _mm_setzero_si128();
  for (; i < n; i += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i));
    a4 = _mm_dpbusd_epi32(a4, _mm_loadu_si128(reinterpret_cast<const __m128i*>(lo + i)), _mm_and_si128(v, m4));
    a4 = _mm_dpbusd_epi32(a4, _mm_loadu_si128(reinterpret_cast<const __m128i*>(hi + i)), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
  }
  return s + _mm_extract_epi32(a4, 0) + _mm_extract_epi32(a4, 1) + _mm_extract_epi32(a4, 2) + _mm_extract_epi32(a4, 3);
}
LWCL_QUANT_VNNI inline void a8_row_dots_vnni(const a8_weight& w, const std::int8_t* row, const std::uint8_t* xa, std::int32_t* dots) {
  const index_t gw = w.group_width;
  for (index_t g = 0; g < w.groups; ++g)
    dots[g] = w.bits == 8 ? a8_dot_vnni(xa + g * gw, row + g * gw, gw)
                          : a8_dot4_vnni(xa + g * gw / 2, xa + w.cols / 2 + g * gw / 2, row + g * gw / 2, gw / 2);
}
#undef LWCL_QUANT_VNNI
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

}  // namespace detail

// Whether this CPU has the VNNI byte dot products a8_matmul uses (else it runs plain loops).
inline bool cpu_has_vnni() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool v = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  return v;
#else
  return false;
#endif
}

// y (M x rows) = dequantised tokens x (M x cols) times the dequantised W^T, plus bias; the tokens are
// quantised here (per token, 8 bits). `vnni` false forces the plain loops (for tests and benchmarks).
inline void a8_matmul(const a8_weight& w, const float* x, index_t M, const float* bias, float* y, bool vnni = cpu_has_vnni()) {
  check(M > 0, "quant::a8_matmul: ", M, " input rows (expected at least 1)");
  check(!vnni || cpu_has_vnni(), "quant::a8_matmul: the VNNI kernel was asked for on a CPU without AVX-512 VNNI");
  // The calling thread's buffers, read by every thread of the loop below through these references.
  thread_local token_codes q_buf;
  thread_local std::vector<std::uint8_t> arranged_buf;
  thread_local std::vector<std::int32_t> qsum_buf;
  token_codes& q = q_buf;
  std::vector<std::uint8_t>& arranged = arranged_buf;
  std::vector<std::int32_t>& qsum = qsum_buf;
  quantize_tokens(x, M, w.cols, q, "a8_matmul input");
  arranged.resize(static_cast<std::size_t>(M * w.cols));
  qsum.assign(static_cast<std::size_t>(M * w.groups), 0);
  for (index_t m = 0; m < M; ++m) {
    const std::uint8_t* c = q.codes.data() + m * w.cols;
    detail::a8_arrange(c, w.cols, w.bits, arranged.data() + m * w.cols);
    for (index_t g = 0; g < w.groups; ++g) {
      std::int32_t s = 0;
      for (index_t k = g * w.group_width; k < (g + 1) * w.group_width; ++k) s += c[k];
      qsum[static_cast<std::size_t>(m * w.groups + g)] = s;
    }
  }
  const index_t rb = w.bits == 8 ? w.cols : w.cols / 2;
  const bool parallel = static_cast<double>(w.rows) * static_cast<double>(w.cols) * static_cast<double>(M) >= 1.0e5;
#pragma omp parallel if (parallel)
  {
    std::vector<std::int32_t> dots(static_cast<std::size_t>(w.groups));
#pragma omp for schedule(static)
    for (index_t r = 0; r < w.rows; ++r) {
      const std::int8_t* row = w.codes.data() + r * rb;
      const auto k0 = static_cast<std::size_t>(r * w.groups);
      for (index_t m = 0; m < M; ++m) {
        const std::uint8_t* xa = arranged.data() + m * w.cols;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
        if (vnni)
          detail::a8_row_dots_vnni(w, row, xa, dots.data());
        else
#endif
          detail::a8_row_dots_baseline(w, row, xa, dots.data());
        const std::int32_t z = q.zero[static_cast<std::size_t>(m)];
        double acc = 0.0;
        for (index_t g = 0; g < w.groups; ++g) {
          const auto k = k0 + static_cast<std::size_t>(g);
          const std::int64_t v = static_cast<std::int64_t>(dots[static_cast<std::size_t>(g)]) +
                                 static_cast<std::int64_t>(w.offset[k]) * qsum[static_cast<std::size_t>(m * w.groups + g)] -
                                 static_cast<std::int64_t>(z) * (w.code_sum[k] + static_cast<std::int64_t>(w.offset[k]) * w.group_width);
          acc += static_cast<double>(w.scale[k]) * static_cast<double>(v);
        }
        y[m * w.rows + r] = static_cast<float>(static_cast<double>(q.scale[static_cast<std::size_t>(m)]) * acc) + (bias ? bias[r] : 0.0f);
      }
    }
  }
}

}  // namespace lwcl::quant
