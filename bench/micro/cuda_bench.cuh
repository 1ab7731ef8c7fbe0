#pragma once
// What the GPU benchmarks share: the process's one backend::cuda (null without a device), random
// device tensors generated on the device, CUDA-event timing on the compute stream reported as manual
// time, and rate counters.

#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "lwcl/backend/cuda/cuda.cuh"
#include "lwcl/backend/cuda/events.cuh"
#include "lwcl/core/rng.hpp"
#include "lwcl/tensor/tensor.hpp"

namespace lwcl::bench {

inline backend::cuda* gpu() {
  static const std::unique_ptr<backend::cuda> be =
      backend::cuda_device_count() > 0 ? std::make_unique<backend::cuda>() : nullptr;
  return be.get();
}

// p[i] = scale * N(0, 1) draw i of the stream.
template <class T>
struct fill_normal {
  T* p;
  philox_stream s;
  compute_t<T> scale;
  LWCL_HD void operator()(index_t i) const {
    p[i] = T(scale * static_cast<compute_t<T>>(s.normal(static_cast<std::uint64_t>(i))));
  }
};

template <class T>
owned_tensor<backend::cuda> random_tensor(backend::cuda& be, shape s, std::uint64_t seed, double scale = 1.0) {
  owned_tensor<backend::cuda> t(be, dtype_of_v<T>, s);
  be.for_each(t.numel(), fill_normal<T>{t.template ptr<T>(), philox_stream{seed, 0}, static_cast<compute_t<T>>(scale)});
  return t;
}

// Seconds between two events recorded on a stream around some work (backend::cuda_events).
class event_pair {
 public:
  template <class Work>
  double seconds(cudaStream_t stream, Work&& work) {
    return events_.per_call(stream, 1, work);
  }
  // Runs work() once untimed, then once per benchmark iteration between the events on the compute stream.
  template <class Work>
  void time(benchmark::State& state, backend::cuda& be, Work&& work) {
    work();
    be.synchronize();
    for (auto _ : state) state.SetIterationTime(seconds(be.stream(), work));
  }

 private:
  backend::cuda_events events_;
};

// Rate counters, printed as "GFLOP=<value>/s" and "GB=<value>/s".
inline void report_flops(benchmark::State& state, double flops) {
  state.counters["GFLOP"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
inline void report_bytes(benchmark::State& state, double bytes) {
  state.counters["GB"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace lwcl::bench
