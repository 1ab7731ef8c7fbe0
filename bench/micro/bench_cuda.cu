// backend::cuda timed on the GPU: cuBLAS GEMMs on the transformer shapes of bench_gemm (f32 and f64)
// and the layernorm op kernels. Each iteration is timed with CUDA events on the backend's compute
// stream and reported as manual time, so host launch overhead and queueing do not count.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <memory>
#include <string>

#include "lwcl/backend/cuda/cuda.cuh"
#include "lwcl/core/rng.hpp"
#include "lwcl/ops/layernorm.hpp"
#include "lwcl/tensor/tensor.hpp"

using namespace lwcl;

namespace {

// The process's one GPU backend; null on a machine without a CUDA device.
backend::cuda* gpu() {
  static const std::unique_ptr<backend::cuda> be =
      backend::cuda_device_count() > 0 ? std::make_unique<backend::cuda>() : nullptr;
  return be.get();
}

// Fills a device array with N(0, scale^2) draws, generated on the device.
template <class T>
struct fill_normal {
  T* p;
  philox_stream s;
  T scale;
  LWCL_HD void operator()(index_t i) const { p[i] = scale * static_cast<T>(s.normal(static_cast<std::uint64_t>(i))); }
};

template <class T>
owned_tensor<backend::cuda> random_tensor(backend::cuda& be, shape s, std::uint64_t seed, double scale = 1.0) {
  owned_tensor<backend::cuda> t(be, dtype_of_v<T>, s);
  be.for_each(t.numel(), fill_normal<T>{t.template ptr<T>(), philox_stream{seed, 0}, static_cast<T>(scale)});
  return t;
}

class event_pair {
 public:
  event_pair() {
    LWCL_CUDA_CHECK(cudaEventCreate(&start_));
    LWCL_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~event_pair() {
    LWCL_CUDA_REPORT(cudaEventDestroy(start_));
    LWCL_CUDA_REPORT(cudaEventDestroy(stop_));
  }
  event_pair(const event_pair&) = delete;
  event_pair& operator=(const event_pair&) = delete;

  // Runs work() once untimed, then once per benchmark iteration between two events on `stream`.
  template <class Work>
  void time(benchmark::State& state, backend::cuda& be, Work&& work) {
    work();
    be.synchronize();
    for (auto _ : state) {
      LWCL_CUDA_CHECK(cudaEventRecord(start_, be.stream()));
      work();
      LWCL_CUDA_CHECK(cudaEventRecord(stop_, be.stream()));
      LWCL_CUDA_CHECK(cudaEventSynchronize(stop_));
      float ms = 0;
      LWCL_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
      state.SetIterationTime(static_cast<double>(ms) * 1e-3);
    }
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// Rate counters, printed as "GFLOP=<value>/s" and "GB=<value>/s".
void report_flops(benchmark::State& state, double flops) {
  state.counters["GFLOP"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
void report_bytes(benchmark::State& state, double bytes) {
  state.counters["GB"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// out[M,N] = inp[M,K] @ weight[N,K]^T, linear_forward's GEMM.
template <class T>
void cuda_gemm(benchmark::State& state) {
  backend::cuda* be = gpu();
  if (!be) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const index_t M = state.range(0), K = state.range(1), N = state.range(2);
  auto A = random_tensor<T>(*be, {M, K}, 1), B = random_tensor<T>(*be, {N, K}, 2);
  owned_tensor<backend::cuda> C(*be, dtype_of_v<T>, {M, N});
  event_pair ev;
  ev.time(state, *be, [&] {
    be->gemm(false, true, M, N, K, T(1), A.template ptr<T>(), K, B.template ptr<T>(), K, T(0), C.template ptr<T>(), N);
  });
  report_flops(state, 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K));
}

void transformer_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "K", "N"});
  b->Args({1024, 768, 2304});
  b->Args({1024, 3072, 768});
  b->Args({1024, 768, 3072});
  b->Args({512, 512, 512});
  b->Args({16384, 768, 3072});  // a full training batch of tokens, where the GPU is saturated
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
}

template <class T>
void cuda_layernorm_forward(benchmark::State& state) {
  backend::cuda* be = gpu();
  if (!be) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const index_t N = state.range(0), C = state.range(1);
  auto x = random_tensor<T>(*be, {N, C}, 3), w = random_tensor<T>(*be, {C}, 4), b = random_tensor<T>(*be, {C}, 5);
  owned_tensor<backend::cuda> out(*be, dtype_of_v<T>, {N, C}), mean(*be, dtype_of_v<T>, {N}), rstd(*be, dtype_of_v<T>, {N});
  event_pair ev;
  ev.time(state, *be, [&] { ops::layernorm_forward(*be, out, mean, rstd, x, w, b); });
  report_bytes(state, (2.0 * N * C + 2.0 * C + 2.0 * N) * sizeof(T));
}

template <class T>
void cuda_layernorm_backward(benchmark::State& state) {
  backend::cuda* be = gpu();
  if (!be) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const index_t N = state.range(0), C = state.range(1);
  auto x = random_tensor<T>(*be, {N, C}, 3), w = random_tensor<T>(*be, {C}, 4), b = random_tensor<T>(*be, {C}, 5);
  auto dout = random_tensor<T>(*be, {N, C}, 6);
  owned_tensor<backend::cuda> out(*be, dtype_of_v<T>, {N, C}), mean(*be, dtype_of_v<T>, {N}), rstd(*be, dtype_of_v<T>, {N});
  owned_tensor<backend::cuda> dx(*be, dtype_of_v<T>, {N, C}), dw(*be, dtype_of_v<T>, {C}), db(*be, dtype_of_v<T>, {C});
  ops::layernorm_forward(*be, out, mean, rstd, x, w, b);
  event_pair ev;
  ev.time(state, *be, [&] { ops::layernorm_backward(*be, dx, dw, db, dout, x, w, mean, rstd); });
  // Compulsory traffic: dout and x read, dx read and written, the per-channel and per-row vectors.
  report_bytes(state, (4.0 * N * C + 5.0 * C + 2.0 * N) * sizeof(T));
}

void layernorm_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"N", "C"});
  b->Args({1024, 768});
  b->Args({16384, 768});
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
}

}  // namespace

BENCHMARK_TEMPLATE(cuda_gemm, float)->Apply(transformer_shapes);
BENCHMARK_TEMPLATE(cuda_gemm, double)->Apply(transformer_shapes);
BENCHMARK_TEMPLATE(cuda_layernorm_forward, float)->Apply(layernorm_shapes);
BENCHMARK_TEMPLATE(cuda_layernorm_backward, float)->Apply(layernorm_shapes);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  try {
    if (backend::cuda_device_count() == 0) {
      std::printf("bench_cuda: no CUDA device found; nothing to time\n");
      return 0;
    }
    cudaDeviceProp prop{};
    LWCL_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    benchmark::AddCustomContext("cuda device", prop.name);
    benchmark::RunSpecifiedBenchmarks();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda: %s\n", e.what());
    return 1;
  }
  benchmark::Shutdown();
  return 0;
}
