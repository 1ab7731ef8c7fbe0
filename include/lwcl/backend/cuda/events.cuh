#pragma once
// A pair of CUDA events for timing work queued on a stream: the seconds per call of `calls` calls of
// f() between the two events. The latency table (backend/cuda/quant/latency.cuh) and the GPU
// benchmarks (bench/micro/cuda_bench.cuh) time with it. The events belong to the device current when it
// is made.

#include <cuda_runtime_api.h>

#include "lwcl/backend/cuda/error.cuh"

namespace lwcl::backend {

class cuda_events {
 public:
  cuda_events() {
    LWCL_CUDA_CHECK(cudaEventCreate(&start_));
    LWCL_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~cuda_events() {
    LWCL_CUDA_REPORT(cudaEventDestroy(start_));
    LWCL_CUDA_REPORT(cudaEventDestroy(stop_));
  }
  cuda_events(const cuda_events&) = delete;
  cuda_events& operator=(const cuda_events&) = delete;

  // Seconds per call of `calls` calls of f() queued back to back on the stream.
  template <class F>
  double per_call(cudaStream_t stream, long calls, F&& f) {
    LWCL_CUDA_CHECK(cudaEventRecord(start_, stream));
    for (long i = 0; i < calls; ++i) f();
    LWCL_CUDA_CHECK(cudaEventRecord(stop_, stream));
    LWCL_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    LWCL_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return 1e-3 * static_cast<double>(ms) / static_cast<double>(calls);
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

}  // namespace lwcl::backend
