#pragma once
// Element types: f32 and f64 (compute on the host), bf16 (storage and CUDA compute), f16 (read from
// checkpoints). bf16 conversion rounds to nearest even, like PyTorch's; a NaN stays a NaN with its
// sign kept and made quiet (PyTorch's CPU tensor conversion writes every NaN as 0xffff instead).

#include <cstdint>
#include <cstring>
#include <string_view>

#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"

namespace lwcl {

// i32 holds token ids and targets.
enum class dtype : std::uint8_t { f32, f64, bf16, f16, i32 };

inline constexpr std::size_t dtype_size(dtype t) {
  switch (t) {
    case dtype::f32: return 4;
    case dtype::f64: return 8;
    case dtype::bf16: return 2;
    case dtype::f16: return 2;
    case dtype::i32: return 4;
  }
  return 0;
}

inline constexpr std::string_view dtype_name(dtype t) {
  switch (t) {
    case dtype::f32: return "f32";
    case dtype::f64: return "f64";
    case dtype::bf16: return "bf16";
    case dtype::f16: return "f16";
    case dtype::i32: return "i32";
  }
  return "?";
}

LWCL_HD_INLINE std::uint32_t float_bits(float f) {
  std::uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
LWCL_HD_INLINE float bits_float(std::uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

// Brain float: the top 16 bits of an IEEE binary32. Widening to float is implicit (exact); narrowing
// is explicit (bf16(x)), so every place that rounds is visible in the source. Op functors read bf16
// storage into their compute type (compute_t<bf16> = float), do all their arithmetic there, and round
// once when they store.
struct bf16 {
  std::uint16_t bits = 0;

  bf16() = default;
  LWCL_HD_INLINE explicit bf16(float f) : bits(from_float(f).bits) {}
  LWCL_HD_INLINE operator float() const { return to_float(); }
  // Read-modify-write in float with one rounding (gradient accumulation into bf16 storage).
  LWCL_HD_INLINE bf16& operator+=(float v) { return *this = bf16(to_float() + v); }
  LWCL_HD_INLINE bf16& operator-=(float v) { return *this = bf16(to_float() - v); }
  LWCL_HD_INLINE bf16& operator*=(float v) { return *this = bf16(to_float() * v); }

  LWCL_HD_INLINE static bf16 from_bits(std::uint16_t b) {
    bf16 r;
    r.bits = b;
    return r;
  }
  // Round to nearest, ties to even. NaN stays NaN (quiet, sign kept); overflow rounds to infinity.
  LWCL_HD_INLINE static bf16 from_float(float f) {
    const std::uint32_t u = float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return from_bits(static_cast<std::uint16_t>((u >> 16) | 0x0040u));
    const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return from_bits(static_cast<std::uint16_t>((u + rounding) >> 16));
  }
  LWCL_HD_INLINE float to_float() const { return bits_float(static_cast<std::uint32_t>(bits) << 16); }
};

// IEEE binary16 to binary32 (exact), for reading f16 checkpoints.
LWCL_HD_INLINE float f16_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));  // inf / nan
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);
    // subnormal: normalise
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    mant &= 0x3ffu;
    return bits_float(sign | (static_cast<std::uint32_t>(127 - 15 - e) << 23) | (mant << 13));
  }
  return bits_float(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

// IEEE binary32 to binary16, rounding to nearest even (as PyTorch's .half() does): too large a
// magnitude becomes an infinity, too small a subnormal or a signed zero; a NaN stays a quiet NaN that
// keeps the top bits of its payload.
LWCL_HD_INLINE std::uint16_t f16_from_float(float f) {
  const std::uint32_t x = float_bits(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x1ffu));
  if (ax >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to infinity
  std::uint32_t r, rem, half;
  if (ax < 0x38800000u) {  // below 2^-14: a subnormal in units of 2^-24
    if (ax < 0x33000000u) return sign;  // at most 2^-25: rounds to zero (the tie goes to the even zero)
    const std::uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, shift = 126u - e;
    r = m >> shift;
    rem = m & ((1u << shift) - 1u);
    half = 1u << (shift - 1u);
  } else {
    r = (((ax >> 23) - 112u) << 10) | ((ax >> 13) & 0x3ffu);
    rem = ax & 0x1fffu;
    half = 0x1000u;
  }
  if (rem > half || (rem == half && (r & 1u))) ++r;  // a carry into the exponent is the right result
  return static_cast<std::uint16_t>(sign | r);
}

template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr dtype value = dtype::f32;
};
template <>
struct dtype_of<double> {
  static constexpr dtype value = dtype::f64;
};
template <>
struct dtype_of<std::int32_t> {
  static constexpr dtype value = dtype::i32;
};
template <>
struct dtype_of<bf16> {
  static constexpr dtype value = dtype::bf16;
};
template <class T>
inline constexpr dtype dtype_of_v = dtype_of<T>::value;

// The type functors compute in for a storage type: float for bf16, the type itself otherwise.
template <class T>
struct compute_type {
  using type = T;
};
template <>
struct compute_type<bf16> {
  using type = float;
};
template <class T>
using compute_t = typename compute_type<T>::type;

}  // namespace lwcl
