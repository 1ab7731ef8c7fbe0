// Host GEMM providers (gemm::openblas, gemm::blis, gemm::onednn, and gemm::naive on the small shape)
// on the GEMMs of one GPT-2-small layer over 1024 tokens, in linear_forward's layout:
// out[M,N] = inp[M,K] @ weight[N,K]^T. The fastest provider here is the one to pick for
// backend::host<Provider>; docs/backends.md records the figures.
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <omp.h>

#include <cmath>
#include <string>
#include <vector>

#include "lwcl/backend/host/gemm_naive.hpp"
#include "lwcl/backend/host/gemm_openblas.hpp"
#include "lwcl/core/rng.hpp"
#if LWCL_HAVE_BLIS
#include "lwcl/backend/host/gemm_blis.hpp"
#endif
#if LWCL_HAVE_ONEDNN
#include "lwcl/backend/host/gemm_onednn.hpp"
#endif

using lwcl::index_t;

namespace {

std::vector<float> random_matrix(index_t n, std::uint64_t seed) {
  const lwcl::philox_stream s{seed, 1};
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = s.uniform(i) - 0.5f;
  return v;
}

// Compares a spread of output elements with dot products in double; a provider that gets the layout
// wrong must not report a speed.
bool spot_check(index_t M, index_t N, index_t K, const std::vector<float>& A, const std::vector<float>& B,
                const std::vector<float>& C) {
  for (index_t s = 0; s < 61; ++s) {
    const index_t i = (s * 7919) % M, j = (s * 104729) % N;
    double want = 0;
    for (index_t k = 0; k < K; ++k)
      want += static_cast<double>(A[static_cast<std::size_t>(i * K + k)]) * B[static_cast<std::size_t>(j * K + k)];
    if (std::abs(C[static_cast<std::size_t>(i * N + j)] - want) > 1e-4 * (1.0 + std::abs(want))) return false;
  }
  return true;
}

template <class Provider>
void bench_gemm(benchmark::State& state) {
  const index_t M = state.range(0), K = state.range(1), N = state.range(2);
  const auto A = random_matrix(M * K, 1), B = random_matrix(N * K, 2);
  std::vector<float> C(static_cast<std::size_t>(M * N));
  Provider::run(false, true, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, C.data(), N);
  if (!spot_check(M, N, K, A, B, C)) {
    state.SkipWithError("result differs from the double-precision reference");
    return;
  }
  for (auto _ : state) {
    Provider::run(false, true, M, N, K, 1.0f, A.data(), K, B.data(), K, 0.0f, C.data(), N);
    benchmark::DoNotOptimize(C.data());
    benchmark::ClobberMemory();
  }
  const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  // A rate counter: printed as "GFLOP=<value>/s".
  state.counters["GFLOP"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(Provider::name));
}

// (M tokens, K in-features, N out-features): attention qkv, MLP down-projection, MLP up-projection,
// and a square GEMM for comparison with published figures.
void transformer_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "K", "N"});
  b->Args({1024, 768, 2304});
  b->Args({1024, 3072, 768});
  b->Args({1024, 768, 3072});
  b->Args({512, 512, 512});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

void small_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "K", "N"});
  b->Args({512, 512, 512});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

// Which library the dynamic linker bound cblas_sgemm to: BLIS exports CBLAS too, and the openblas
// figures are only OpenBLAS's if this names libopenblas.
std::string cblas_sgemm_origin() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cblas_sgemm), &info) && info.dli_fname) return info.dli_fname;
  return "unknown";
}

}  // namespace

BENCHMARK_TEMPLATE(bench_gemm, lwcl::gemm::openblas)->Apply(transformer_shapes);
#if LWCL_HAVE_BLIS
BENCHMARK_TEMPLATE(bench_gemm, lwcl::gemm::blis)->Apply(transformer_shapes);
#endif
#if LWCL_HAVE_ONEDNN
BENCHMARK_TEMPLATE(bench_gemm, lwcl::gemm::onednn)->Apply(transformer_shapes);
#endif
BENCHMARK_TEMPLATE(bench_gemm, lwcl::gemm::naive)->Apply(small_shapes);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("cblas_sgemm from", cblas_sgemm_origin());
  benchmark::AddCustomContext("omp_get_max_threads", std::to_string(omp_get_max_threads()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
