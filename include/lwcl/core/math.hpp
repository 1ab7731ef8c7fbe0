#pragma once
// Scalar math for LWCL_HD functors, overloaded on float and double so that f32 kernels stay in single
// precision on both the host and a CUDA device.

#include <cmath>

#include "lwcl/core/config.hpp"

namespace lwcl::math {

LWCL_HD_INLINE float sqrt(float x) { return ::sqrtf(x); }
LWCL_HD_INLINE double sqrt(double x) { return ::sqrt(x); }
LWCL_HD_INLINE float exp(float x) { return ::expf(x); }
LWCL_HD_INLINE double exp(double x) { return ::exp(x); }
LWCL_HD_INLINE float log(float x) { return ::logf(x); }
LWCL_HD_INLINE double log(double x) { return ::log(x); }
LWCL_HD_INLINE float tanh(float x) { return ::tanhf(x); }
LWCL_HD_INLINE double tanh(double x) { return ::tanh(x); }
LWCL_HD_INLINE float erf(float x) { return ::erff(x); }
LWCL_HD_INLINE double erf(double x) { return ::erf(x); }
// 1 - erf(x) without the cancellation of forming it from erf: GELU's left tail needs it.
LWCL_HD_INLINE float erfc(float x) { return ::erfcf(x); }
LWCL_HD_INLINE double erfc(double x) { return ::erfc(x); }
LWCL_HD_INLINE float cos(float x) { return ::cosf(x); }
LWCL_HD_INLINE double cos(double x) { return ::cos(x); }
LWCL_HD_INLINE float sin(float x) { return ::sinf(x); }
LWCL_HD_INLINE double sin(double x) { return ::sin(x); }
LWCL_HD_INLINE float pow(float x, float y) { return ::powf(x, y); }
LWCL_HD_INLINE double pow(double x, double y) { return ::pow(x, y); }
LWCL_HD_INLINE float abs(float x) { return ::fabsf(x); }
LWCL_HD_INLINE double abs(double x) { return ::fabs(x); }
// One declaration for both passes; only the body differs (std::isfinite is host-only).
LWCL_HD_INLINE bool isfinite(float x) {
#if defined(__CUDA_ARCH__)
  return ::isfinite(x);
#else
  return std::isfinite(x);
#endif
}
LWCL_HD_INLINE bool isfinite(double x) {
#if defined(__CUDA_ARCH__)
  return ::isfinite(x);
#else
  return std::isfinite(x);
#endif
}
template <class T>
LWCL_HD_INLINE T max(T a, T b) { return a > b ? a : b; }
template <class T>
LWCL_HD_INLINE T min(T a, T b) { return a < b ? a : b; }

}  // namespace lwcl::math
