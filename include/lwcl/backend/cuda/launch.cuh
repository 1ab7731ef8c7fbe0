#pragma once
// The grid-stride launch behind backend::cuda::for_each. Op functors take a flat index and never see
// threadIdx; this is the one place that maps CUDA threads onto those indices. The kernel is a template
// launched from the header, so each translation unit instantiates and launches its own copy.

#include <cuda_runtime_api.h>

#include "lwcl/backend/cuda/error.cuh"
#include "lwcl/core/config.hpp"

namespace lwcl::backend::cuda_detail {

template <class F>
__global__ void for_each_kernel(index_t n, F f) {
  const index_t stride = static_cast<index_t>(blockDim.x) * gridDim.x;
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) f(i);
}

struct launch_shape {
  unsigned blocks;
  unsigned threads;
};

// Cheap per-index work (element functors) gets 256-thread blocks and at most `waves` blocks per SM,
// the grid-stride loop covering the rest. Expensive indices (row functors looping over a whole row, cost
// >= 64) are few and long, so blocks shrink until the indices spread over every SM instead of
// crowding onto a handful of them.
inline launch_shape for_each_shape(index_t n, index_t cost, int sm_count) {
  constexpr index_t waves = 8;
  index_t threads = 256;
  if (cost >= 64) {
    const index_t per_sm = (n + sm_count - 1) / sm_count;
    threads = (per_sm + 31) / 32 * 32;
    threads = threads < 32 ? 32 : (threads > 256 ? 256 : threads);
  }
  index_t blocks = (n + threads - 1) / threads;
  const index_t cap = waves * sm_count;
  if (blocks > cap) blocks = cap;
  return {static_cast<unsigned>(blocks), static_cast<unsigned>(threads)};
}

// Runs f(i) for i in [0, n) on `stream`; returns once the launch is queued.
template <class F>
void launch_for_each(index_t n, const F& f, index_t cost, int sm_count, cudaStream_t stream) {
  if (n <= 0) return;
  const launch_shape s = for_each_shape(n, cost, sm_count);
  for_each_kernel<F><<<s.blocks, s.threads, 0, stream>>>(n, f);
  LWCL_CUDA_CHECK_LAUNCH("for_each_kernel launch");
}

}  // namespace lwcl::backend::cuda_detail
