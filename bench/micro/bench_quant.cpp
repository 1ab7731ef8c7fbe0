// The packed int8/int4 weights' dequantising GEMM (quant::dequant_matmul) against the f32 GEMM of the
// host backend's default provider (OpenBLAS sgemm, and sgemv at batch 1, whichever is faster), side by
// side in one process, at batch 1 (decoding) and 16, on 1 and 2 threads, over a LLaMA-7B-shaped layer
// (4096 x 4096, 11008 x 4096, 4096 x 11008) and the deep teachers' own (768 x 192, 192 x 768). A result
// that differs from the f32 GEMM of the dequantised weight by more than f32 rounding reports no speed.
// Then 8-bit activations (W8A8, W4A8: quant::a8_matmul) on the same shapes. Prints the CPU's model and
// features and the kernel level the dequantiser chose.
//   build/host/bench/bench_quant --benchmark_min_time=0.2
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "lwcl/backend/host/gemm_openblas.hpp"
#include "lwcl/core/rng.hpp"
#include "lwcl/quant/act_quant.hpp"
#include "lwcl/quant/matmul.hpp"
#include "lwcl/quant/rtn.hpp"

using lwcl::index_t;
using namespace lwcl::quant;

extern "C" void openblas_set_num_threads(int);

namespace {

std::vector<float> random_matrix(index_t n, std::uint64_t seed, float scale) {
  const lwcl::philox_stream s{seed, 1};
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = scale * (s.uniform(i) - 0.5f);
  return v;
}

void set_threads(int t) {
  omp_set_num_threads(t);
  openblas_set_num_threads(t);
}

// args: rows (out), cols (in), batch, threads
void f32_gemm(benchmark::State& state, bool gemv) {
  const index_t N = state.range(0), K = state.range(1), M = state.range(2);
  set_threads(static_cast<int>(state.range(3)));
  const auto W = random_matrix(N * K, 1, 0.1f), x = random_matrix(M * K, 2, 2.0f);
  std::vector<float> y(static_cast<std::size_t>(M * N));
  for (auto _ : state) {
    if (gemv)
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(N), static_cast<int>(K), 1.0f, W.data(), static_cast<int>(K),
                  x.data(), 1, 0.0f, y.data(), 1);
    else
      lwcl::gemm::openblas::run(false, true, M, N, K, 1.0f, x.data(), K, W.data(), K, 0.0f, y.data(), N);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["weight_MiB"] = static_cast<double>(N * K * 4) / (1 << 20);
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(N * K * 4) * static_cast<double>(state.iterations()),
                                              benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(M * N * K) * static_cast<double>(state.iterations()) / 1e9,
                                                 benchmark::Counter::kIsRate);
}
void bench_f32_sgemm(benchmark::State& state) { f32_gemm(state, false); }
void bench_f32_sgemv(benchmark::State& state) { f32_gemm(state, true); }

template <int Bits, int Group>
void bench_packed(benchmark::State& state) {
  const index_t N = state.range(0), K = state.range(1), M = state.range(2);
  set_threads(static_cast<int>(state.range(3)));
  const auto W = random_matrix(N * K, 1, 0.1f), x = random_matrix(M * K, 2, 2.0f);
  weight_format f;
  f.bits = Bits;
  f.group = Group;
  const packed_weight p = quantize_rtn(W, N, K, f, "bench");
  std::vector<float> y(static_cast<std::size_t>(M * N)), ref(y.size());
  dequant_matmul(p, x.data(), M, nullptr, y.data());
  const auto deq = dequantize(p);
  lwcl::gemm::openblas::run(false, true, M, N, K, 1.0f, x.data(), K, deq.data(), K, 0.0f, ref.data(), N);
  for (std::size_t i = 0; i < y.size(); i += 97)
    if (std::abs(y[i] - ref[i]) > 1e-3f * (1.0f + std::abs(ref[i]))) {
      state.SkipWithError("differs from the f32 GEMM of the dequantised weight");
      return;
    }
  for (auto _ : state) {
    dequant_matmul(p, x.data(), M, nullptr, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["weight_MiB"] = static_cast<double>(p.bytes()) / (1 << 20);
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(p.bytes()) * static_cast<double>(state.iterations()),
                                              benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(M * N * K) * static_cast<double>(state.iterations()) / 1e9,
                                                 benchmark::Counter::kIsRate);
}

// 8-bit activations per token with packed weights (quant::a8_matmul: VNNI byte dot products where the
// CPU has them), checked against the f32 product of the dequantised operands first.
template <int Bits, int Group>
void bench_a8(benchmark::State& state) {
  const index_t N = state.range(0), K = state.range(1), M = state.range(2);
  set_threads(static_cast<int>(state.range(3)));
  const auto W = random_matrix(N * K, 1, 0.1f), x = random_matrix(M * K, 2, 2.0f);
  weight_format f;
  f.bits = Bits;
  f.group = Group;
  const packed_weight p = quantize_rtn(W, N, K, f, "bench");
  const a8_weight w = prepare_a8(p, "bench");
  std::vector<float> y(static_cast<std::size_t>(M * N)), ref(y.size()), xq = x;
  a8_matmul(w, x.data(), M, nullptr, y.data());
  fake_quantize_tokens(xq.data(), M, K);
  const auto deq = dequantize(p);
  lwcl::gemm::openblas::run(false, true, M, N, K, 1.0f, xq.data(), K, deq.data(), K, 0.0f, ref.data(), N);
  for (std::size_t i = 0; i < y.size(); i += 97)
    if (std::abs(y[i] - ref[i]) > 1e-3f * (1.0f + std::abs(ref[i]))) {
      state.SkipWithError("differs from the f32 GEMM of the dequantised operands");
      return;
    }
  for (auto _ : state) {
    a8_matmul(w, x.data(), M, nullptr, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(cpu_has_vnni() ? "vnni" : "plain loops");
  state.counters["weight_MiB"] = static_cast<double>(w.bytes()) / (1 << 20);
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(M * N * K) * static_cast<double>(state.iterations()) / 1e9,
                                                 benchmark::Counter::kIsRate);
}

void shapes(benchmark::internal::Benchmark* b, bool batch1_only) {
  const std::vector<std::pair<index_t, index_t>> nk = {{4096, 4096}, {11008, 4096}, {4096, 11008}, {768, 192}, {192, 768}};
  for (const auto& [n, k] : nk)
    for (const index_t m : {index_t(1), index_t(16)})
      for (const int t : {1, 2}) {
        if (batch1_only && m != 1) continue;
        b->Args({n, k, m, t});
      }
  b->ArgNames({"N", "K", "M", "threads"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}

}  // namespace

BENCHMARK(bench_f32_sgemm)->Apply([](auto* b) { shapes(b, false); });
BENCHMARK(bench_f32_sgemv)->Apply([](auto* b) { shapes(b, true); });
BENCHMARK_TEMPLATE(bench_packed, 8, 0)->Apply([](auto* b) { shapes(b, false); });
BENCHMARK_TEMPLATE(bench_packed, 4, 0)->Apply([](auto* b) { shapes(b, false); });
BENCHMARK_TEMPLATE(bench_packed, 4, 64)->Apply([](auto* b) { shapes(b, false); });
BENCHMARK_TEMPLATE(bench_a8, 8, 0)->Apply([](auto* b) { shapes(b, false); });
BENCHMARK_TEMPLATE(bench_a8, 4, 0)->Apply([](auto* b) { shapes(b, false); });

int main(int argc, char** argv) {
  std::ifstream cpu("/proc/cpuinfo");
  std::string line, model, flags;
  while (std::getline(cpu, line)) {
    if (model.empty() && line.rfind("model name", 0) == 0) model = line.substr(line.find(':') + 2);
    if (flags.empty() && line.rfind("flags", 0) == 0) flags = line;
  }
  std::string have;
  for (const char* f : {"avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "amx_tile"})
    if (flags.find(std::string(" ") + f) != std::string::npos) have += std::string(" ") + f;
  std::printf("cpu: %s;%s; dequantiser kernel: %s\n", model.c_str(), have.c_str(),
              std::string(simd_level_name(cpu_level())).c_str());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
