#pragma once
// The host's dequantising GEMM: y = x W^T (+ bias) with W a packed int8/int4 weight, read as it is stored.
// Each thread takes a run of output rows; a row's codes are dequantised into a row of f32 (in L1) and
// dotted with every input row, so a batch of M rows decodes each weight once and a single row (decoding)
// reads a quarter (int8) or an eighth (int4) of the f32 weight's bytes from memory. The kernels are built
// for AVX-512 and AVX2 beside the baseline and chosen by the CPU at hand (cpu_level()).

#include <algorithm>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <cstdint>
#include <string_view>
#include <vector>

#include "lwcl/backend/host/gemm_openblas.hpp"
#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/quant/packed.hpp"

namespace lwcl::quant {

enum class simd_level : int { baseline = 0, avx2 = 1, avx512 = 2 };

inline std::string_view simd_level_name(simd_level l) {
  return l == simd_level::avx512 ? "avx512" : l == simd_level::avx2 ? "avx2+fma" : "baseline";
}

// The widest kernel this CPU runs.
inline simd_level cpu_level() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const simd_level l = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") ? simd_level::avx512
                              : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? simd_level::avx2
                                                                                                  : simd_level::baseline;
  return l;
#else
  return simd_level::baseline;
#endif
}

namespace detail {

struct qmm_args {
  const packed_weight* w;
  const float* x;     // M x cols
  const float* bias;  // rows, or null
  float* y;           // M x rows
  index_t M;
  float* buf;         // this thread's: a tile of dequantised rows, then one row's scales and zero points
  index_t tile_rows;
};

// f16 bits to f32 without branches, so a row's scales convert in vector registers: the exponent and
// mantissa moved to f32's places and rescaled by 2^112 (exact for normal and subnormal values), the
// all-ones exponent (infinity, NaN) mapped to f32's.
[[gnu::always_inline]] inline float f16_bits_to_float(std::uint16_t h) {
  const std::uint32_t em = static_cast<std::uint32_t>(h & 0x7fffu) << 13;
  const std::uint32_t special = (h & 0x7c00u) == 0x7c00u ? 0x7f800000u : 0u;
  const float v = bits_float(em) * 0x1p112f;
  return bits_float(float_bits(v) | special | (static_cast<std::uint32_t>(h & 0x8000u) << 16));
}

// The portable kernel: what the vector kernels below compute, in plain loops.
struct kernel_baseline {
  // out[c] = s * (code[c] - z) for one group of gw columns starting at byte b of a row.
  static void decode(const std::uint8_t* b, float s, float z, index_t gw, bool int4, float* out) {
    if (int4) {
      for (index_t tile = 0; tile < gw / 32; ++tile, b += 16, out += 32)
        for (int j = 0; j < 16; ++j) {
          out[j] = s * (static_cast<float>(b[j] & 15) - z);
          out[16 + j] = s * (static_cast<float>(b[j] >> 4) - z);
        }
    } else {
      for (index_t c = 0; c < gw; ++c) out[c] = s * (static_cast<float>(b[c]) - z);
    }
  }
  static float dot(const float* a, const float* b, index_t n) {
    float acc[16] = {};
    const index_t body = n - n % 16;
    for (index_t i = 0; i < body; i += 16)
      for (int j = 0; j < 16; ++j) acc[j] += a[i + j] * b[i + j];
    for (index_t i = body; i < n; ++i) acc[i - body] += a[i] * b[i];
    float s = 0.0f;
    for (const float v : acc) s += v;
    return s;
  }
  // x . (one row's dequantised weights), through buf (cols floats).
  static float row_dot(const std::uint8_t* row, const float* sc, const float* zf, index_t groups, index_t gw, bool int4,
                       const float* x, float* buf) {
    for (index_t g = 0; g < groups; ++g) decode(row + (int4 ? g * gw / 2 : g * gw), sc[g], zf[g], gw, int4, buf + g * gw);
    return dot(buf, x, groups * gw);
  }
};

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// gcc 12 reports its own intrinsics' deliberately undefined registers (_mm512_undefined_*) as maybe
// uninitialised once they are inlined here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define LWCL_QUANT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))
#define LWCL_QUANT_AVX2 __attribute__((target("avx2,fma")))

struct kernel_avx512 {
  LWCL_QUANT_AVX512 static void decode(const std::uint8_t* b, float s, float z, index_t gw, bool int4, float* out) {
    const __m512 vs = _mm512_set1_ps(s), vz = _mm512_set1_ps(z);
    const __m512i low = _mm512_set1_epi32(15);
    if (int4) {
      for (index_t tile = 0; tile < gw / 32; ++tile, b += 16, out += 32) {
        const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
        const __m512 lo = _mm512_cvtepi32_ps(_mm512_and_si512(v, low));
        const __m512 hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4));
        _mm512_storeu_ps(out, _mm512_mul_ps(vs, _mm512_sub_ps(lo, vz)));
        _mm512_storeu_ps(out + 16, _mm512_mul_ps(vs, _mm512_sub_ps(hi, vz)));
      }
    } else {
      index_t c = 0;
      for (; c + 16 <= gw; c += 16) {
        const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + c)));
        _mm512_storeu_ps(out + c, _mm512_mul_ps(vs, _mm512_sub_ps(_mm512_cvtepi32_ps(v), vz)));
      }
      for (; c < gw; ++c) out[c] = s * (static_cast<float>(b[c]) - z);
    }
  }
  // Decoding fused with the dot product: each weight is dequantised in a register and multiplied there.
  LWCL_QUANT_AVX512 static float row_dot(const std::uint8_t* row, const float* sc, const float* zf, index_t groups,
                                         index_t gw, bool int4, const float* x, float* buf) {
    if (!int4 && gw % 16 != 0) return kernel_baseline::row_dot(row, sc, zf, groups, gw, int4, x, buf);
    __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
    const __m512i low = _mm512_set1_epi32(15);
    for (index_t g = 0; g < groups; ++g, x += gw) {
      const __m512 vs = _mm512_set1_ps(sc[g]), vz = _mm512_set1_ps(zf[g]);
      if (int4) {
        const std::uint8_t* b = row + g * gw / 2;
        for (index_t c = 0; c < gw; c += 32, b += 16) {
          const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
          const __m512 lo = _mm512_mul_ps(vs, _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_and_si512(v, low)), vz));
          const __m512 hi = _mm512_mul_ps(vs, _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4)), vz));
          if ((c / 32) % 2 == 0) {
            c0 = _mm512_fmadd_ps(lo, _mm512_loadu_ps(x + c), c0);
            c1 = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + c + 16), c1);
          } else {
            c2 = _mm512_fmadd_ps(lo, _mm512_loadu_ps(x + c), c2);
            c3 = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + c + 16), c3);
          }
        }
      } else {
        const std::uint8_t* b = row + g * gw;
        for (index_t c = 0; c < gw; c += 16) {
          const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + c)));
          const __m512 w = _mm512_mul_ps(vs, _mm512_sub_ps(_mm512_cvtepi32_ps(v), vz));
          if ((c / 16) % 2 == 0)
            c0 = _mm512_fmadd_ps(w, _mm512_loadu_ps(x + c), c0);
          else
            c1 = _mm512_fmadd_ps(w, _mm512_loadu_ps(x + c), c1);
        }
      }
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)));
  }
};

struct kernel_avx2 {
  [[gnu::always_inline]] LWCL_QUANT_AVX2 static __m256 scaled(__m256i v, __m256 vs, __m256 vz) {
    return _mm256_mul_ps(vs, _mm256_sub_ps(_mm256_cvtepi32_ps(v), vz));
  }
  LWCL_QUANT_AVX2 static void decode(const std::uint8_t* b, float s, float z, index_t gw, bool int4, float* out) {
    const __m256 vs = _mm256_set1_ps(s), vz = _mm256_set1_ps(z);
    const __m256i low = _mm256_set1_epi32(15);
    if (int4) {
      for (index_t tile = 0; tile < gw / 32; ++tile, b += 16, out += 32)
        for (int half = 0; half < 2; ++half) {
          const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 8 * half)));
          _mm256_storeu_ps(out + 8 * half, scaled(_mm256_and_si256(v, low), vs, vz));
          _mm256_storeu_ps(out + 16 + 8 * half, scaled(_mm256_srli_epi32(v, 4), vs, vz));
        }
    } else {
      index_t c = 0;
      for (; c + 8 <= gw; c += 8)
        _mm256_storeu_ps(out + c, scaled(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + c))), vs, vz));
      for (; c < gw; ++c) out[c] = s * (static_cast<float>(b[c]) - z);
    }
  }
  LWCL_QUANT_AVX2 static float row_dot(const std::uint8_t* row, const float* sc, const float* zf, index_t groups,
                                       index_t gw, bool int4, const float* x, float* buf) {
    if (!int4 && gw % 8 != 0) return kernel_baseline::row_dot(row, sc, zf, groups, gw, int4, x, buf);
    __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
    const __m256i low = _mm256_set1_epi32(15);
    for (index_t g = 0; g < groups; ++g, x += gw) {
      const __m256 vs = _mm256_set1_ps(sc[g]), vz = _mm256_set1_ps(zf[g]);
      if (int4) {
        const std::uint8_t* b = row + g * gw / 2;
        for (index_t c = 0; c < gw; c += 32, b += 16) {
          const __m256i v0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b)));
          const __m256i v1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 8)));
          c0 = _mm256_fmadd_ps(scaled(_mm256_and_si256(v0, low), vs, vz), _mm256_loadu_ps(x + c), c0);
          c1 = _mm256_fmadd_ps(scaled(_mm256_and_si256(v1, low), vs, vz), _mm256_loadu_ps(x + c + 8), c1);
          c2 = _mm256_fmadd_ps(scaled(_mm256_srli_epi32(v0, 4), vs, vz), _mm256_loadu_ps(x + c + 16), c2);
          c3 = _mm256_fmadd_ps(scaled(_mm256_srli_epi32(v1, 4), vs, vz), _mm256_loadu_ps(x + c + 24), c3);
        }
      } else {
        const std::uint8_t* b = row + g * gw;
        for (index_t c = 0; c < gw; c += 8) {
          const __m256 w = scaled(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + c))), vs, vz);
          if ((c / 8) % 2 == 0)
            c0 = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + c), c0);
          else
            c1 = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + c), c1);
        }
      }
    }
    const __m256 c = _mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3));
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(c), _mm256_extractf128_ps(c, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    return _mm_cvtss_f32(h);
  }
};
#endif

// Rows [r0, r1) of y. One input row: each weight row is dequantised into the buffer and dotted with x.
// More: a tile of rows is dequantised, then one f32 GEMM (OpenBLAS, on this thread) multiplies the batch
// by it, so every weight is decoded once for the whole batch.
template <class K>
[[gnu::always_inline]] inline void qmm_rows(const qmm_args& a, index_t r0, index_t r1) {
  const packed_weight& p = *a.w;
  const index_t cols = p.cols, gw = p.format.group_width(cols), groups = p.groups(), rb = p.row_bytes();
  const bool int4 = p.format.bits == 4, f16 = p.format.scale_type == dtype::f16, sym = p.format.sym == symmetry::symmetric;
  float* tile = a.buf;
  float* sc = tile + a.tile_rows * cols;
  float* zf = sc + groups;
  for (index_t t0 = r0; t0 < r1; t0 += a.tile_rows) {
    const index_t t1 = std::min(r1, t0 + a.tile_rows);
    for (index_t r = t0; r < t1; ++r) {
      const std::uint16_t* sb = p.scales.data() + r * groups;
      if (f16)
        for (index_t g = 0; g < groups; ++g) sc[g] = f16_bits_to_float(sb[g]);
      else
        for (index_t g = 0; g < groups; ++g) sc[g] = bits_float(static_cast<std::uint32_t>(sb[g]) << 16);
      if (sym)
        for (index_t g = 0; g < groups; ++g) zf[g] = static_cast<float>(p.format.mid());
      else
        for (index_t g = 0; g < groups; ++g) zf[g] = static_cast<float>(p.zeros[static_cast<std::size_t>(r * groups + g)]);
      const std::uint8_t* row = p.codes.data() + r * rb;
      if (a.M == 1) {
        a.y[r] = (a.bias ? a.bias[r] : 0.0f) + K::row_dot(row, sc, zf, groups, gw, int4, a.x, tile);
        continue;
      }
      float* w = tile + (r - t0) * cols;
      for (index_t g = 0; g < groups; ++g) K::decode(row + g * gw * p.format.bits / 8, sc[g], zf[g], gw, int4, w + g * gw);
    }
    if (a.M > 1) {
      for (index_t t = 0; t < a.M; ++t)
        for (index_t r = t0; r < t1; ++r) a.y[t * p.rows + r] = a.bias ? a.bias[r] : 0.0f;
      gemm::openblas::run(false, true, a.M, t1 - t0, cols, 1.0f, a.x, cols, tile, cols, 1.0f, a.y + t0, p.rows);
    }
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
LWCL_QUANT_AVX512 inline void qmm_rows_avx512(const qmm_args& a, index_t r0, index_t r1) { qmm_rows<kernel_avx512>(a, r0, r1); }
LWCL_QUANT_AVX2 inline void qmm_rows_avx2(const qmm_args& a, index_t r0, index_t r1) { qmm_rows<kernel_avx2>(a, r0, r1); }
#undef LWCL_QUANT_AVX512
#undef LWCL_QUANT_AVX2
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif
inline void qmm_rows_baseline(const qmm_args& a, index_t r0, index_t r1) { qmm_rows<kernel_baseline>(a, r0, r1); }

inline void qmm_rows_at(simd_level l, const qmm_args& a, index_t r0, index_t r1) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (l == simd_level::avx512) return qmm_rows_avx512(a, r0, r1);
  if (l == simd_level::avx2) return qmm_rows_avx2(a, r0, r1);
#endif
  qmm_rows_baseline(a, r0, r1);
}

}  // namespace detail

// y (M x rows) = x (M x cols) W^T + bias, W packed (rows x cols). `level` picks the kernel (default: the
// widest this CPU runs; a level the CPU lacks is refused). Threads over output rows when the work is large.
inline void dequant_matmul(const packed_weight& w, const float* x, index_t M, const float* bias, float* y,
                           simd_level level = cpu_level()) {
  w.validate("dequant_matmul");
  check(M > 0, "quant::dequant_matmul: ", M, " input rows (expected at least 1)");
  check(static_cast<int>(level) <= static_cast<int>(cpu_level()), "quant::dequant_matmul: the ", simd_level_name(level),
        " kernel was asked for, and this CPU runs at most ", simd_level_name(cpu_level()));
  // A task is a run of rows: 16 for one input row; for a batch, 32 rows dequantised into a tile of at most
  // about 512 KiB (it stays in L2) that one GEMM multiplies the batch by.
  const index_t tile_rows = M == 1 ? 1 : std::clamp<index_t>((index_t(1) << 17) / w.cols, 4, 32);
  const index_t rows_per_task = M == 1 ? 16 : tile_rows;
  const index_t tasks = (w.rows + rows_per_task - 1) / rows_per_task;
  const bool parallel = static_cast<double>(w.rows) * static_cast<double>(w.cols) * static_cast<double>(M) >= 1.0e5;
#pragma omp parallel if (parallel)
  {
    std::vector<float> buf(static_cast<std::size_t>(tile_rows * w.cols + 2 * w.groups()));
    const detail::qmm_args a{&w, x, bias, y, M, buf.data(), tile_rows};
#pragma omp for schedule(static)
    for (index_t k = 0; k < tasks; ++k)
      detail::qmm_rows_at(level, a, k * rows_per_task, std::min(w.rows, (k + 1) * rows_per_task));
  }
}

}  // namespace lwcl::quant
