// The layer-wise trainer's GPU figures: a segment step (student forward, backward and AdamW on cached
// teacher features) of a LLaMA-7B-shaped 2-layer segment, in bf16 mixed precision and in f32, as model
// FLOP utilisation against the bf16 dense peak and against cuBLAS running the same GEMMs in the same
// process; the same step with the next
// step's features copied from pinned memory on the copy stream (the pipeline's upload_ahead), as the
// fraction it adds; the host-to-device copy rate of that path against a plain cudaMemcpyAsync; and the
// peak GPU memory of one segment against end-to-end KD of the same model.
//   bench_cuda_segment [--benchmark_filter=...]; LWCL_PEAK_TFLOPS overrides the bf16 dense peak
//   (default 989.4, H100/H200 SXM).
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cuda_bench.cuh"
#include "lwcl/backend/cuda/pinned.cuh"
#include "lwcl/core/memory.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/data/loader.hpp"
#include "lwcl/data/shards.hpp"
#include "lwcl/distill/e2e_kd.hpp"
#include "lwcl/distill/segment_trainer.hpp"
#include "lwcl/model/block_stack.hpp"
#include "lwcl/model/transformer.hpp"

using namespace lwcl;
using namespace lwcl::bench;

namespace {

// hidden 4096, 32 heads of 128, 8 KV heads, FFN 11008; a small vocabulary (the segment never sees it).
model::model_config llama7b_shaped(index_t layers) {
  return model::model_config::uniform(model::family::llama, 256, 2048, 4096, layers, 32, 8, 11008);
}

double bf16_peak_flops() {
  const char* e = std::getenv("LWCL_PEAK_TFLOPS");
  return (e ? std::atof(e) : 989.4) * 1e12;
}

// Weights in double for segment_trainer: norms 1, the rest N(0, 0.02^2).
std::vector<double> synthetic_params(const tensor_layout& layout) {
  std::vector<double> p(static_cast<std::size_t>(layout.numel()));
  const philox_stream s{17, 0};
  for (const auto& e : layout.entries()) {
    const bool norm = e.name.find("norm") != std::string::npos;
#pragma omp parallel for
    for (index_t i = 0; i < e.shape.numel(); ++i)
      p[static_cast<std::size_t>(e.offset + i)] = norm ? 1.0 : 0.02 * s.normal(static_cast<std::uint64_t>(e.offset + i));
  }
  return p;
}

// One linear layer's GEMMs of a training step, as (M, N, K) of row-major C[M,N] = A[M,K] B^T: forward
// y = x W^T, backward dx = dy W and dW = dy^T x. `in`, `out` are the layer's widths, n the tokens.
void add_linear(std::vector<std::array<index_t, 3>>& g, index_t n, index_t in, index_t out) {
  g.push_back({n, out, in});
  g.push_back({n, in, out});
  g.push_back({out, in, n});
}

// The matmul FLOPs of one step of `layers` LLaMA layers on B x T tokens: 3 x forward (forward, and a
// backward of twice its FLOPs), with attention's two batched products over the full T x T scores (the
// materialised attention computes every score, causal or not).
struct segment_flops {
  double linear = 0, attention = 0;
  double total() const { return linear + attention; }
};
segment_flops flops_of(const model::model_config& c, index_t layers, index_t B, index_t T) {
  const auto& l = c.layers[0];
  const double n = static_cast<double>(B * T), C = static_cast<double>(c.d_model), D = static_cast<double>(c.head_dim);
  const double params = C * static_cast<double>(l.n_heads) * D * 2 + 2 * C * static_cast<double>(l.n_kv_heads) * D +
                        3 * C * static_cast<double>(l.ffn);
  segment_flops f;
  f.linear = 3 * 2 * params * n * static_cast<double>(layers);
  f.attention = 3 * 4 * static_cast<double>(B) * static_cast<double>(l.n_heads) * static_cast<double>(T) *
                static_cast<double>(T) * D * static_cast<double>(layers);
  return f;
}

// Seconds per call of every linear GEMM of one segment step, run by cuBLAS through the backend in the
// element type E (float: cublasSgemm; bf16: cublasGemmEx with f32 accumulation).
template <class E>
double cublas_linear_seconds(backend::cuda& be, const model::model_config& c, index_t layers, index_t n) {
  const auto& l = c.layers[0];
  const index_t C = c.d_model, D = c.head_dim;
  std::vector<std::array<index_t, 3>> g;
  for (index_t i = 0; i < layers; ++i) {
    add_linear(g, n, C, l.n_heads * D);      // q
    add_linear(g, n, C, l.n_kv_heads * D);   // k
    add_linear(g, n, C, l.n_kv_heads * D);   // v
    add_linear(g, n, l.n_heads * D, C);      // o
    add_linear(g, n, C, l.ffn);              // gate
    add_linear(g, n, C, l.ffn);              // up
    add_linear(g, n, l.ffn, C);              // down
  }
  index_t most = 0;
  for (const auto& s : g) most = std::max({most, s[0] * s[2], s[1] * s[2], s[0] * s[1]});
  auto A = random_tensor<E>(be, {most}, 1), Bm = random_tensor<E>(be, {most}, 2);
  owned_tensor<backend::cuda> Cm(be, dtype_of_v<E>, {most});
  auto run = [&] {
    for (const auto& s : g)
      be.gemm(false, true, s[0], s[1], s[2], 1.0f, A.template ptr<E>(), s[2], Bm.template ptr<E>(), s[2], 0.0f,
              Cm.template ptr<E>(), s[1]);
  };
  run();
  event_pair ev;
  double best = 1e30;
  for (int r = 0; r < 3; ++r) best = std::min(best, ev.seconds(be.stream(), run));
  return best;
}

// A segment step of `layers` LLaMA-7B-shaped layers on B x T cached features. upload = 1: each step
// also copies the next step's input and target from pinned host memory into a second pair of device
// buffers on the copy stream, ordered as distill::pipeline orders them. bf16 = 1: mixed precision
// (bf16 weights, features, activations and gradients; f32 compute and AdamW master copy); the cuBLAS
// reference then runs its GEMMs in bf16 too.
template <class E>
void run_segment_step(benchmark::State& state) {
  backend::cuda* be = gpu();
  if (!be) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const index_t B = state.range(0), T = state.range(1), layers = state.range(2);
  const bool upload = state.range(3) != 0;
  const auto cfg = llama7b_shaped(layers);
  tensor_layout layout;
  model::add_stack_params(layout, cfg, 0, layers);
  const std::vector<double> params = synthetic_params(layout);
  const std::size_t base = memory().current(tier::device);
  memory().reset_peak(tier::device);
  optim::adamw_config oc;
  oc.lr = 1e-4;
  distill::segment_trainer<backend::cuda> seg(*be, cfg, 0, layers, layout, params, dtype_of_v<E>, oc);
  const shape fs{B, T, cfg.d_model};
  owned_tensor<backend::cuda> x[2] = {random_tensor<E>(*be, fs, 3), random_tensor<E>(*be, fs, 4)};
  owned_tensor<backend::cuda> y[2] = {random_tensor<E>(*be, fs, 5), random_tensor<E>(*be, fs, 6)};
  const std::size_t feature_bytes = x[0].view().bytes();
  backend::pinned_buffer staged_x(feature_bytes), staged_y(feature_bytes);
  be->to_host(staged_x.data(), x[0].view().data, feature_bytes);
  be->to_host(staged_y.data(), y[0].view().data, feature_bytes);

  event_pair ev;
  seg.step(x[0], y[0], 1e-4);  // warm-up: cuBLAS heuristics, pool growth
  double plain = 1e30;
  for (int r = 0; r < 2; ++r) plain = std::min(plain, ev.seconds(be->stream(), [&] { seg.step(x[0], y[0], 1e-4); }));
  long i = 0;
  double total = 0;
  for (auto _ : state) {
    const int cur = static_cast<int>(i % 2);
    double s = 0;
    if (upload) {
      const timer wall;
      be->compute_wait_for_copies();
      be->copies_wait_for_compute();
      be->copy_async(x[1 - cur].view().data, staged_x.data(), feature_bytes);
      be->copy_async(y[1 - cur].view().data, staged_y.data(), feature_bytes);
      seg.step(x[cur], y[cur], 1e-4);
      be->synchronize_copies();
      s = wall.seconds();
    } else {
      s = ev.seconds(be->stream(), [&] { seg.step(x[0], y[0], 1e-4); });
    }
    state.SetIterationTime(s);
    total += s;
    ++i;
  }
  const segment_flops f = flops_of(cfg, layers, B, T);
  const double cublas = cublas_linear_seconds<E>(*be, cfg, layers, B * T);
  state.counters["model_TFLOPs"] = benchmark::Counter(f.total() * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["MFU_bf16_peak"] = f.total() / plain / bf16_peak_flops();
  state.counters["cublas_linear_TFLOPs"] = f.linear / cublas * 1e-12;
  state.counters["vs_cublas"] = (f.total() / plain) / (f.linear / cublas);
  state.counters["step_ms_no_upload"] = plain * 1e3;
  state.counters["peak_GiB"] = static_cast<double>(memory().peak(tier::device) - base) / (1 << 30);
  // What copying the next step's features adds to a step (host wall time, the copies on the copy
  // stream): 0 when they overlap the step completely. The trainer's stall fraction.
  if (upload && i > 0) state.counters["upload_extra_fraction"] = total / static_cast<double>(i) / plain - 1;
  state.SetLabel(std::string(dtype_name(dtype_of_v<E>)) +
                 (upload ? ", features copied a step ahead from pinned memory" : ", features resident"));
}

void cuda_segment_step(benchmark::State& state) {
  if (state.range(4) != 0)
    run_segment_step<bf16>(state);
  else
    run_segment_step<float>(state);
}

// Host-to-device copy of one (B, T, 4096) f32 feature from pinned memory: on the backend's copy stream
// (the pipeline's path) and, as the reference, a plain cudaMemcpyAsync on a stream of its own.
void cuda_pinned_upload(benchmark::State& state) {
  backend::cuda* be = gpu();
  if (!be) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const std::size_t bytes = static_cast<std::size_t>(state.range(0)) << 20;
  const bool plain = state.range(1) != 0;
  backend::pinned_buffer src(bytes);
  std::memset(src.data(), 1, bytes);
  buffer<backend::cuda> dst(*be, bytes);
  cudaStream_t own = nullptr;
  if (plain) LWCL_CUDA_CHECK(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
  const cudaStream_t stream = plain ? own : be->copy_stream();
  event_pair ev;
  auto copy = [&] {
    if (plain)
      LWCL_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyHostToDevice, own));
    else
      be->copy_async(dst.data(), src.data(), bytes);
  };
  ev.seconds(stream, copy);
  for (auto _ : state) state.SetIterationTime(ev.seconds(stream, copy));
  report_bytes(state, static_cast<double>(bytes));
  state.SetLabel(plain ? "plain cudaMemcpyAsync" : "backend copy stream");
  if (own) LWCL_CUDA_CHECK(cudaStreamDestroy(own));
}

// Peak GPU memory of one step of the layer-wise trainer (one layer, its features three times over,
// twice with uploads ahead) against end-to-end KD of the same 4-layer model (teacher and student
// resident, student gradients and AdamW moments, both models' activations), each measured by the
// memory tracker from an empty device.
void cuda_peak_memory_layerwise_vs_e2e(benchmark::State& state) {
  backend::cuda* be = gpu();
  if (!be) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const index_t B = state.range(0), T = state.range(1), L = 4;
  const auto cfg = llama7b_shaped(L);
  double layerwise = 0, e2e = 0, e2e_declared = 0;
  for (auto _ : state) {
    {
      tensor_layout layout;
      model::add_stack_params(layout, cfg, 0, L);
      const std::vector<double> params = synthetic_params(layout);
      be->trim();
      const std::size_t base = memory().current(tier::device);
      memory().reset_peak(tier::device);
      distill::segment_trainer<backend::cuda> seg(*be, cfg, 0, 1, layout, params, dtype::f32, optim::adamw_config{});
      const shape fs{B, T, cfg.d_model};
      std::vector<owned_tensor<backend::cuda>> feats;
      for (int k = 0; k < 6; ++k) feats.push_back(random_tensor<float>(*be, fs, 10 + static_cast<std::uint64_t>(k)));
      seg.step(feats[0], feats[1], 1e-4);
      be->synchronize();
      layerwise = static_cast<double>(memory().peak(tier::device) - base);
    }
    {
      const auto dir = std::filesystem::temp_directory_path() / "lwcl_bench_e2e";
      std::filesystem::create_directories(dir);
      std::vector<std::int32_t> ids(static_cast<std::size_t>(4 * B * T + 1));
      for (std::size_t k = 0; k < ids.size(); ++k) ids[k] = static_cast<std::int32_t>((k * 31 + 7) % 256);
      data::write_shard((dir / "train.bin").string(), ids, 256);
      const data::shard shard((dir / "train.bin").string());
      const data::batch_loader loader(shard, B, T, 1);
      be->trim();
      const std::size_t base = memory().current(tier::device);
      memory().reset_peak(tier::device);
      model::transformer<backend::cuda> teacher(*be, cfg, dtype::f32), student(*be, cfg, dtype::f32);
      teacher.init(1);
      student.init(2);
      distill::e2e_options eo;
      eo.steps = 1;
      eo.progress_bar = false;
      const auto r = distill::train_e2e_kd(teacher, student, loader, B, T, eo);
      be->synchronize();
      e2e = static_cast<double>(memory().peak(tier::device) - base);
      e2e_declared = static_cast<double>(r.peak_compute_bytes);
      std::filesystem::remove_all(dir);
    }
    state.SetIterationTime(1);
  }
  state.counters["layerwise_GiB"] = layerwise / (1 << 30);
  state.counters["e2e_GiB"] = e2e / (1 << 30);
  state.counters["e2e_declared_GiB"] = e2e_declared / (1 << 30);
  state.counters["layerwise_over_e2e"] = e2e > 0 ? layerwise / e2e : 0;
}

}  // namespace

BENCHMARK(cuda_segment_step)->ArgNames({"B", "T", "layers", "upload", "bf16"})
    ->Args({4, 2048, 2, 0, 1})->Args({4, 2048, 2, 1, 1})->Args({4, 2048, 2, 0, 0})->Args({4, 2048, 2, 1, 0})
    ->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(5);
BENCHMARK(cuda_pinned_upload)->ArgNames({"MiB", "plain"})->Args({128, 0})->Args({128, 1})->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(cuda_peak_memory_layerwise_vs_e2e)->ArgNames({"B", "T"})->Args({2, 2048})->UseManualTime()->Iterations(1)
    ->Unit(benchmark::kSecond);

BENCHMARK_MAIN();
