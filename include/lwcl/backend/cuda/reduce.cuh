#pragma once
// Whole-array reductions for backend::cuda::sum and sum_squares: CUB's DeviceReduce over a transform
// that widens every element to double, so f32 data is summed with the host backend's precision.
// CUB's reduction is run-to-run deterministic on one GPU (no atomics), as lwcl requires.

#include <cub/device/device_reduce.cuh>

#include "lwcl/core/config.hpp"

namespace lwcl::backend::cuda_detail {

template <class T>
struct widen {
  LWCL_HD double operator()(const T& x) const { return static_cast<double>(x); }
};

template <class T>
struct widen_square {
  LWCL_HD double operator()(const T& x) const {
    const double d = static_cast<double>(x);
    return d * d;
  }
};

struct add_double {
  LWCL_HD double operator()(double a, double b) const { return a + b; }
};

}  // namespace lwcl::backend::cuda_detail
