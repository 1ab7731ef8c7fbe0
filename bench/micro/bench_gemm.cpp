// Host GEMM providers (gemm::openblas, gemm::blis, gemm::onednn, gemm::onednn_bf16 where the CPU has
// AVX512-BF16 or AMX, and gemm::naive on the small shape) on the GEMMs of one GPT-2-small layer over 1024
// tokens, in linear_forward's layout: out[M,N] = inp[M,K] @ weight[N,K]^T. The fastest f32 provider here is
// the one to pick for backend::host<Provider>; onednn_bf16's rate includes rounding its f32 operands to
// bf16 at every call. docs/backends.md records the figures.
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <omp.h>

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "lwcl/backend/host/gemm_naive.hpp"
#include "lwcl/backend/host/gemm_openblas.hpp"
#include "lwcl/core/rng.hpp"
#if LWCL_HAVE_BLIS
#include "lwcl/backend/host/gemm_blis.hpp"
#endif
#include "lwcl/backend/host/gemm_choice.hpp"
#include "lwcl/tensor/dtype.hpp"
#if LWCL_HAVE_ONEDNN
#include "lwcl/backend/host/gemm_onednn.hpp"
#include "lwcl/backend/host/gemm_onednn_bf16.hpp"
#endif

using lwcl::index_t;

namespace {

std::vector<float> random_matrix(index_t n, std::uint64_t seed) {
  const lwcl::philox_stream s{seed, 1};
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = s.uniform(i) - 0.5f;
  return v;
}

// Compares a spread of output elements with dot products in double (of the operands rounded to bf16 for
// a bf16 provider); a provider that gets the layout wrong must not report a speed.
bool spot_check(index_t M, index_t N, index_t K, const std::vector<float>& A, const std::vector<float>& B,
                const std::vector<float>& C, bool bf16_operands) {
  const auto value = [bf16_operands](float x) {
    return bf16_operands ? static_cast<double>(lwcl::bf16(x)) : static_cast<double>(x);
  };
  for (index_t s = 0; s < 61; ++s) {
    const index_t i = (s * 7919) % M, j = (s * 104729) % N;
    double want = 0;
    for (index_t k = 0; k < K; ++k)
      want += value(A[static_cast<std::size_t>(i * K + k)]) * value(B[static_cast<std::size_t>(j * K + k)]);
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
  if (!spot_check(M, N, K, A, B, C, Provider::name == std::string_view("onednn_bf16"))) {
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

#if LWCL_HAVE_ONEDNN
// The bf16 provider where the CPU has bf16 arithmetic (elsewhere oneDNN emulates it): skipped otherwise.
void bench_gemm_bf16(benchmark::State& state) {
  if (!lwcl::gemm::choice::this_machine().has_bf16()) {
    state.SkipWithError("this CPU has neither AVX512-BF16 nor AMX");
    return;
  }
  bench_gemm<lwcl::gemm::onednn_bf16>(state);
  state.SetLabel("onednn_bf16 (" + lwcl::gemm::onednn_bf16::last_implementation() + ")");
}
#endif

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
BENCHMARK(bench_gemm_bf16)->Apply(transformer_shapes);
#endif
BENCHMARK_TEMPLATE(bench_gemm, lwcl::gemm::naive)->Apply(small_shapes);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("cblas_sgemm from", cblas_sgemm_origin());
  benchmark::AddCustomContext("omp_get_max_threads", std::to_string(omp_get_max_threads()));
  const auto m = lwcl::gemm::choice::this_machine();
  std::string features;
  for (const auto& f : m.features) features += (features.empty() ? "" : " ") + f;
  benchmark::AddCustomContext("cpu", m.cpu_model + " (family " + std::to_string(m.cpu_family) + " model " +
                                         std::to_string(m.cpu_model_number) + "; " + features + ")");
  if (!m.onednn_isa.empty()) benchmark::AddCustomContext("onednn isa", m.onednn_isa);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
