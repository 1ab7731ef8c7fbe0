// The MLP up-projection out = gelu(inp @ weight^T + bias), keeping the GELU input for the backward,
// two ways on the GPU: (a) one cuBLASLt GEMM with the GELU_AUX_BIAS epilogue
// (cuda::linear_epilogue_forward), and (b) a plain cuBLAS GEMM (cublasSgemm for f32, cublasGemmEx for
// bf16) followed by a separate bias + GELU pass through for_each, the way the ops run it. Shapes: a
// batch of 8192 tokens through GPT-2 small's MLP (768 -> 3072) and a LLaMA-7B-sized one (4096 ->
// 11008), in f32 (no TF32) and bf16 (fp32 accumulation). Timed with CUDA events on the compute
// stream; TFLOP/s count the GEMM's 2 N IC OC flops only; the (b) rows also report fused_speedup,
// (b)'s time over (a)'s for the same dtype and shape, when (a) ran first in the same process.
#include <benchmark/benchmark.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <tuple>
#include <type_traits>

#include "cuda_bench.cuh"
#include "lwcl/backend/cuda/cuda.cuh"
#include "lwcl/core/rng.hpp"
#include "lwcl/ops/activation.hpp"
#include "lwcl/tensor/dtype.hpp"
#include "lwcl/tensor/tensor.hpp"

using namespace lwcl;
using namespace lwcl::bench;

namespace {

LWCL_HD_INLINE float widen(float x) { return x; }
LWCL_HD_INLINE float widen(bf16 x) { return x.to_float(); }
template <class T>
LWCL_HD_INLINE T narrow(float x) {
  if constexpr (std::is_same_v<T, bf16>) return bf16::from_float(x);
  else return x;
}

// p[i] = scale * N(0, 1) draw i, rounded to T (cuda_bench.cuh's fill_normal needs arithmetic T).
template <class T>
struct fill_normal_as {
  T* p;
  philox_stream s;
  float scale;
  LWCL_HD void operator()(index_t i) const { p[i] = narrow<T>(scale * s.normal(static_cast<std::uint64_t>(i))); }
};

template <class T>
owned_tensor<backend::cuda> random_as(backend::cuda& be, shape s, std::uint64_t seed, float scale) {
  owned_tensor<backend::cuda> t(be, dtype_of_v<T>, s);
  be.for_each(t.numel(), fill_normal_as<T>{t.template ptr<T>(), philox_stream{seed, 0}, scale});
  return t;
}

// The pass that follows a plain GEMM: pre[r, c] += bias[c], out = gelu_tanh(pre), in fp32 registers.
// One index per element; the column comes from a 32-bit remainder (N * OC < 2^32 is checked).
template <class T>
struct bias_gelu {
  T* out;
  T* pre;
  const T* bias;
  std::uint32_t OC;
  LWCL_HD void operator()(index_t i) const {
    const std::uint32_t c = static_cast<std::uint32_t>(i) % OC;
    const float x = widen(pre[i]) + widen(bias[c]);
    pre[i] = narrow<T>(x);
    out[i] = narrow<T>(ops::kernel::gelu_math<float, ops::gelu_kind::tanh>::value(x));
  }
};

enum class path { fused, unfused };

// Mean seconds per iteration of path (a), by dtype and shape, for (b)'s fused_speedup.
std::map<std::tuple<int, index_t, index_t, index_t>, double>& fused_seconds() {
  static std::map<std::tuple<int, index_t, index_t, index_t>, double> m;
  return m;
}

template <class T, path P>
void cuda_linear_gelu(benchmark::State& state) {
  backend::cuda* be = gpu();
  if (!be) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const index_t N = state.range(0), IC = state.range(1), OC = state.range(2);
  if (N * OC >= (index_t{1} << 32)) {
    state.SkipWithError("N * OC must be below 2^32 for the bias + GELU pass");
    return;
  }
  const float w_scale = 1.0f / std::sqrt(static_cast<float>(IC));
  const auto inp = random_as<T>(*be, {N, IC}, 1, 1.0f), weight = random_as<T>(*be, {OC, IC}, 2, w_scale);
  const auto bias = random_as<T>(*be, {OC}, 3, 0.5f);
  owned_tensor<backend::cuda> out(*be, dtype_of_v<T>, {N, OC}), pre(*be, dtype_of_v<T>, {N, OC});
  auto work = [&] {
    if constexpr (P == path::fused) {
      be->linear_epilogue_forward(out.view(), pre.view(), inp.view(), weight.view(), bias.view(), true);
    } else {
      if constexpr (std::is_same_v<T, float>) {
        be->gemm(false, true, N, OC, IC, 1.0f, inp.template ptr<float>(), IC, weight.template ptr<float>(), IC, 0.0f,
                 pre.template ptr<float>(), OC);
      } else {
        // cuda::gemm's row-major trick: pre^T = weight inp^T in column-major.
        const float alpha = 1.0f, beta = 0.0f;
        backend::cuda_detail::scoped_device on(be->device());
        LWCL_CUBLAS_CHECK(cublasGemmEx(be->blas_handle(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(OC), static_cast<int>(N),
                                       static_cast<int>(IC), &alpha, weight.view().data, CUDA_R_16BF, static_cast<int>(IC),
                                       inp.view().data, CUDA_R_16BF, static_cast<int>(IC), &beta, pre.view().data,
                                       CUDA_R_16BF, static_cast<int>(OC), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      }
      be->for_each(N * OC,
                   bias_gelu<T>{out.template ptr<T>(), pre.template ptr<T>(), bias.template ptr<T>(),
                                static_cast<std::uint32_t>(OC)},
                   20);
    }
  };
  event_pair ev;
  work();
  be->synchronize();
  double total = 0;
  for (auto _ : state) {
    const double s = ev.seconds(be->stream(), work);
    state.SetIterationTime(s);
    total += s;
  }
  const double flops = 2.0 * static_cast<double>(N) * static_cast<double>(IC) * static_cast<double>(OC);
  state.counters["TFLOP"] = benchmark::Counter(flops * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  const double mean = state.iterations() ? total / static_cast<double>(state.iterations()) : 0.0;
  const auto key = std::make_tuple(static_cast<int>(dtype_of_v<T>), N, IC, OC);
  if constexpr (P == path::fused) {
    fused_seconds()[key] = mean;
  } else {
    const auto it = fused_seconds().find(key);
    if (it != fused_seconds().end() && it->second > 0) state.counters["fused_speedup"] = mean / it->second;
  }
}

void mlp_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"N", "IC", "OC"});
  b->Args({8192, 768, 3072});    // GPT-2 small MLP, a batch of tokens
  b->Args({8192, 4096, 11008});  // LLaMA-7B-sized MLP width
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
}

}  // namespace

// Fused first, so that the unfused rows find its times.
BENCHMARK_TEMPLATE(cuda_linear_gelu, float, path::fused)->Apply(mlp_shapes);
BENCHMARK_TEMPLATE(cuda_linear_gelu, bf16, path::fused)->Apply(mlp_shapes);
BENCHMARK_TEMPLATE(cuda_linear_gelu, float, path::unfused)->Apply(mlp_shapes);
BENCHMARK_TEMPLATE(cuda_linear_gelu, bf16, path::unfused)->Apply(mlp_shapes);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  try {
    if (backend::cuda_device_count() == 0) {
      std::printf("bench_cuda_blaslt: no CUDA device found; nothing to time\n");
      return 0;
    }
    cudaDeviceProp prop{};
    LWCL_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    benchmark::AddCustomContext("cuda device", prop.name);
    benchmark::RunSpecifiedBenchmarks();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_blaslt: %s\n", e.what());
    return 1;
  }
  benchmark::Shutdown();
  return 0;
}
