// Whole-model decoding with packed weights against f32, side by side in one process: a model::kv_decoder
// feeds a 16-token prompt (untimed), then times 32 single-token steps, with its block linears either the
// f32 GEMM (OpenBLAS) or quant::dequant_matmul over RTN-packed int8 (per channel), int4 (per channel) and
// int4 (groups of 64) weights, on 1 and 2 threads. Two shapes, randomly initialised (speed does not
// depend on the values): the deep llama teacher's (width 192, 8 layers, FFN 512) and a LLaMA-1B-like
// slice (width 2048, 4 layers, 16 heads, 4 KV heads, FFN 5632). Reports tokens/s; the packed runs check
// first that their logits match the dequantised model's. Prints the CPU's model and features.
//   build/host/bench/bench_quant_decode --benchmark_min_time=0.5
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/model/decode.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/policies/quantiser/rtn.hpp"
#include "lwcl/quant/decode.hpp"
#include "lwcl/quant/latency.hpp"
#include "lwcl/quant/model.hpp"

using lwcl::index_t;
using namespace lwcl;

extern "C" void openblas_set_num_threads(int);

namespace {

using net_t = model::transformer<backend::cpu>;

model::model_config shape_of(int which) {
  if (which == 0) return model::model_config::uniform(model::family::llama, 1024, 128, 192, 8, 6, 6, 512);
  return model::model_config::uniform(model::family::llama, 1024, 128, 2048, 4, 16, 4, 5632);
}

// args: shape (0 deep, 1 1B-like), bits (32: f32), group, threads
void bench_decode(benchmark::State& state) {
  const int which = static_cast<int>(state.range(0)), bits = static_cast<int>(state.range(1)), threads = static_cast<int>(state.range(3));
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  backend::cpu be;
  net_t net(be, shape_of(which), dtype::f32);
  net.init(1);
  std::unique_ptr<quant::packed_linears> packed;
  quant::quantized_model q;
  std::vector<std::string> names;
  if (bits != 32) {
    quant::weight_format f;
    f.bits = bits;
    f.group = state.range(2);
    q = quant::quantize_model(net, policies::quantisers::rtn{}, f, {}, 0, 0, false);
    for (const auto& l : q.layers) names.push_back(l.name);
    packed = std::make_unique<quant::packed_linears>(names, q.weights);
  }
  const index_t steps = 32;
  model::kv_decoder<backend::cpu> dec(net, 16 + steps);
  const std::vector<std::int32_t> prompt = {5, 17, 29, 41, 53, 65, 77, 89, 101, 113, 125, 137, 149, 161, 173, 185};
  if (packed) {  // the packed decoder's logits against the dequantised model's
    model::kv_decoder<backend::cpu> ref(net, 16 + steps);
    packed->attach(dec, net);
    std::vector<float> a, b;
    model::logits_to_host(be, ref.step(prompt, 1), 0, 1, a);
    model::logits_to_host(be, dec.step(prompt, 1), 0, 1, b);
    double num = 0, den = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      num = std::max(num, static_cast<double>(std::abs(a[i] - b[i])));
      den = std::max(den, static_cast<double>(std::abs(a[i])));
    }
    if (!(num <= 1e-4 * den)) {
      state.SkipWithError("packed logits differ from the dequantised model's");
      return;
    }
  }
  for (auto _ : state) {
    state.PauseTiming();
    dec.reset();
    dec.step(prompt, 1);
    state.ResumeTiming();
    for (index_t s = 0; s < steps; ++s) benchmark::DoNotOptimize(dec.step({static_cast<std::int32_t>(s * 7 % 1024)}).data);
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(steps) * static_cast<double>(state.iterations()),
                                                  benchmark::Counter::kIsRate);
  state.counters["linear_MiB"] = static_cast<double>(packed ? q.packed_bytes() : 0) / (1 << 20);
}

void args(benchmark::internal::Benchmark* b) {
  for (const int which : {0, 1})
    for (const auto& [bits, group] : std::vector<std::pair<int, int>>{{32, 0}, {8, 0}, {4, 0}, {4, 64}})
      for (const int t : {1, 2}) b->Args({which, bits, group, t});
  b->ArgNames({"shape", "bits", "group", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

}  // namespace

BENCHMARK(bench_decode)->Apply(args);

int main(int argc, char** argv) {
  std::printf("cpu: %s; shape 0: llama width 192, 8 layers, FFN 512; shape 1: llama width "
              "2048, 4 layers, 16 heads (4 KV), FFN 5632; bits 32: f32\n",
              quant::host_cpu_line().c_str());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
