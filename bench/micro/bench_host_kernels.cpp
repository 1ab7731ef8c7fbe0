// The host backend's op kernels at GPT-2-small sizes (1024 tokens, C = 768, FFN 3072, 12 heads of 64).
// Memory-bound ops report GB/s of compulsory traffic: every tensor element read or written once, a
// read-modify-write (the += of backward passes) counted twice. GEMM-bound ops (linear, attention)
// report GFLOP/s of their GEMMs, comparable with bench_gemm. Every benchmark runs on backend::cpu
// (OpenBLAS GEMMs, OpenMP functors); times are wall-clock since both use several threads. Flash
// attention is timed against the materialised op at T = 128 and 512.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/rng.hpp"
#include "lwcl/ops/activation.hpp"
#include "lwcl/ops/attention.hpp"
#include "lwcl/ops/cross_entropy.hpp"
#include "lwcl/ops/distill_loss.hpp"
#include "lwcl/ops/elementwise.hpp"
#include "lwcl/ops/embedding.hpp"
#include "lwcl/ops/flash_attention.hpp"
#include "lwcl/ops/layernorm.hpp"
#include "lwcl/ops/linear.hpp"
#include "lwcl/ops/rmsnorm.hpp"
#include "lwcl/ops/rope.hpp"

using namespace lwcl;

namespace {

constexpr index_t tokens = 1024, width = 768, ffn = 3072, vocab = 8192;
constexpr index_t batch = 4, seq = 256, heads = 12, head_dim = 64;

template <class T>
std::vector<T> randn(index_t n, std::uint64_t seed, double scale = 1.0) {
  const philox_stream s{seed, 5};
  std::vector<T> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<T>(scale * s.normal(i));
  return v;
}

// Rate counters, printed as "GB=<value>/s" and "GFLOP=<value>/s".
template <class T>
void report_bytes(benchmark::State& state, double elements) {
  state.counters["GB"] =
      benchmark::Counter(elements * sizeof(T) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
void report_flops(benchmark::State& state, double flops) {
  state.counters["GFLOP"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// ---- normalisation ---------------------------------------------------------------------------------

template <class T>
void layernorm_forward(benchmark::State& state) {
  backend::cpu be;
  const shape s{tokens, width};
  auto x = randn<T>(tokens * width, 1), w = randn<T>(width, 2), b = randn<T>(width, 3);
  std::vector<T> out(x.size()), mean(tokens), rstd(tokens);
  for (auto _ : state)
    ops::layernorm_forward(be, tensor(out.data(), s), tensor(mean.data(), {tokens}), tensor(rstd.data(), {tokens}),
                           tensor(x.data(), s), tensor(w.data(), {width}), tensor(b.data(), {width}));
  report_bytes<T>(state, 2.0 * tokens * width + 2 * width + 2 * tokens);
}

template <class T>
void layernorm_backward(benchmark::State& state) {
  backend::cpu be;
  const shape s{tokens, width};
  auto x = randn<T>(tokens * width, 1), w = randn<T>(width, 2), b = randn<T>(width, 3), dout = randn<T>(tokens * width, 4);
  std::vector<T> out(x.size()), mean(tokens), rstd(tokens), dx(x.size()), dw(width), db(width);
  ops::layernorm_forward(be, tensor(out.data(), s), tensor(mean.data(), {tokens}), tensor(rstd.data(), {tokens}),
                         tensor(x.data(), s), tensor(w.data(), {width}), tensor(b.data(), {width}));
  for (auto _ : state)
    ops::layernorm_backward(be, tensor(dx.data(), s), tensor(dw.data(), {width}), tensor(db.data(), {width}),
                            tensor(dout.data(), s), tensor(x.data(), s), tensor(w.data(), {width}),
                            tensor(mean.data(), {tokens}), tensor(rstd.data(), {tokens}));
  report_bytes<T>(state, 4.0 * tokens * width + 5 * width + 2 * tokens);
}

template <class T>
void rmsnorm_forward(benchmark::State& state) {
  backend::cpu be;
  const shape s{tokens, width};
  auto x = randn<T>(tokens * width, 1), w = randn<T>(width, 2);
  std::vector<T> out(x.size()), rstd(tokens);
  for (auto _ : state)
    ops::rmsnorm_forward(be, tensor(out.data(), s), tensor(rstd.data(), {tokens}), tensor(x.data(), s),
                         tensor(w.data(), {width}), 1e-6);
  report_bytes<T>(state, 2.0 * tokens * width + width + tokens);
}

template <class T>
void rmsnorm_backward(benchmark::State& state) {
  backend::cpu be;
  const shape s{tokens, width};
  auto x = randn<T>(tokens * width, 1), w = randn<T>(width, 2), dout = randn<T>(tokens * width, 4);
  std::vector<T> out(x.size()), rstd(tokens), dx(x.size()), dw(width);
  ops::rmsnorm_forward(be, tensor(out.data(), s), tensor(rstd.data(), {tokens}), tensor(x.data(), s),
                       tensor(w.data(), {width}), 1e-6);
  for (auto _ : state)
    ops::rmsnorm_backward(be, tensor(dx.data(), s), tensor(dw.data(), {width}), tensor(dout.data(), s), tensor(x.data(), s),
                          tensor(w.data(), {width}), tensor(rstd.data(), {tokens}));
  report_bytes<T>(state, 4.0 * tokens * width + 3 * width + tokens);
}

// ---- activations ----------------------------------------------------------------------------------

template <class T, ops::gelu_kind Kind>
void gelu_forward(benchmark::State& state) {
  backend::cpu be;
  const shape s{tokens, ffn};
  auto x = randn<T>(tokens * ffn, 5);
  std::vector<T> out(x.size());
  for (auto _ : state) ops::gelu_forward(be, tensor(out.data(), s), tensor(x.data(), s), Kind);
  report_bytes<T>(state, 2.0 * tokens * ffn);
}

template <class T, ops::gelu_kind Kind>
void gelu_backward(benchmark::State& state) {
  backend::cpu be;
  const shape s{tokens, ffn};
  auto x = randn<T>(tokens * ffn, 5), dout = randn<T>(tokens * ffn, 6);
  std::vector<T> dx(x.size());
  for (auto _ : state) ops::gelu_backward(be, tensor(dx.data(), s), tensor(dout.data(), s), tensor(x.data(), s), Kind);
  report_bytes<T>(state, 4.0 * tokens * ffn);
}

template <class T>
void swiglu_forward(benchmark::State& state) {
  backend::cpu be;
  const shape s{tokens, ffn};
  auto g = randn<T>(tokens * ffn, 7), u = randn<T>(tokens * ffn, 8);
  std::vector<T> out(g.size());
  for (auto _ : state) ops::swiglu_forward(be, tensor(out.data(), s), tensor(g.data(), s), tensor(u.data(), s));
  report_bytes<T>(state, 3.0 * tokens * ffn);
}

template <class T>
void swiglu_backward(benchmark::State& state) {
  backend::cpu be;
  const shape s{tokens, ffn};
  auto g = randn<T>(tokens * ffn, 7), u = randn<T>(tokens * ffn, 8), dout = randn<T>(tokens * ffn, 9);
  std::vector<T> dg(g.size()), du(g.size());
  for (auto _ : state)
    ops::swiglu_backward(be, tensor(dg.data(), s), tensor(du.data(), s), tensor(dout.data(), s), tensor(g.data(), s),
                         tensor(u.data(), s));
  report_bytes<T>(state, 7.0 * tokens * ffn);
}

// ---- embeddings, element-wise, RoPE -----------------------------------------------------------------

std::vector<std::int32_t> token_ids(index_t n) {
  const philox_stream s{11, 2};
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>(s.bits(i) % vocab);
  return ids;
}

template <class T>
void embedding_forward(benchmark::State& state) {
  backend::cpu be;
  auto ids = token_ids(batch * seq);
  auto wte = randn<T>(vocab * width, 12), wpe = randn<T>(seq * width, 13);
  std::vector<T> out(static_cast<std::size_t>(batch * seq * width));
  for (auto _ : state)
    ops::embedding_forward(be, tensor(out.data(), {batch, seq, width}), tensor(ids.data(), {batch, seq}),
                           tensor(wte.data(), {vocab, width}), tensor(wpe.data(), {seq, width}));
  report_bytes<T>(state, 3.0 * batch * seq * width + batch * seq);
}

template <class T>
void embedding_backward(benchmark::State& state) {
  backend::cpu be;
  auto ids = token_ids(batch * seq);
  auto dout = randn<T>(batch * seq * width, 14);
  std::vector<T> dwte(static_cast<std::size_t>(vocab * width)), dwpe(static_cast<std::size_t>(seq * width));
  for (auto _ : state)
    ops::embedding_backward(be, tensor(dwte.data(), {vocab, width}), tensor(dwpe.data(), {seq, width}),
                            tensor(dout.data(), {batch, seq, width}), tensor(ids.data(), {batch, seq}));
  // dout once, the touched rows of dwte read and written, dwpe read and written.
  report_bytes<T>(state, 3.0 * batch * seq * width + 2.0 * seq * width + batch * seq);
}

template <class T>
void add(benchmark::State& state) {
  backend::cpu be;
  const shape s{tokens, width};
  auto a = randn<T>(tokens * width, 15), b = randn<T>(tokens * width, 16);
  std::vector<T> out(a.size());
  for (auto _ : state) ops::add(be, tensor(out.data(), s), tensor(a.data(), s), tensor(b.data(), s));
  report_bytes<T>(state, 3.0 * tokens * width);
}

template <class T>
void rope_forward(benchmark::State& state) {
  backend::cpu be;
  const shape s{batch, seq, heads, head_dim};
  auto x = randn<T>(s.numel(), 17);
  std::vector<T> out(x.size());
  for (auto _ : state) ops::rope_forward(be, tensor(out.data(), s), tensor(x.data(), s), 10000.0);
  report_bytes<T>(state, 2.0 * static_cast<double>(s.numel()));
}

// ---- losses ---------------------------------------------------------------------------------------

template <class T>
void cross_entropy(benchmark::State& state) {
  backend::cpu be;
  const index_t rows = 512;
  auto logits = randn<T>(rows * vocab, 18);
  auto targets = token_ids(rows);
  std::vector<T> dlogits(logits.size()), row_loss(static_cast<std::size_t>(rows));
  for (auto _ : state)
    benchmark::DoNotOptimize(ops::cross_entropy(be, tensor(dlogits.data(), {rows, vocab}), tensor(row_loss.data(), {rows}),
                                                tensor(logits.data(), {rows, vocab}), tensor(targets.data(), {rows})));
  report_bytes<T>(state, 3.0 * rows * vocab);
}

template <class T>
void logit_kl_loss(benchmark::State& state) {
  backend::cpu be;
  const index_t rows = 512;
  auto s = randn<T>(rows * vocab, 19), t = randn<T>(rows * vocab, 20);
  std::vector<T> ds(s.size()), scratch(static_cast<std::size_t>(2 * rows));
  for (auto _ : state)
    benchmark::DoNotOptimize(ops::logit_kl_loss(be, tensor(ds.data(), {rows, vocab}), tensor(scratch.data(), {2 * rows}),
                                                tensor(s.data(), {rows, vocab}), tensor(t.data(), {rows, vocab}), 2.0));
  report_bytes<T>(state, 4.0 * rows * vocab);
}

template <class T>
void mse_loss(benchmark::State& state) {
  backend::cpu be;
  const shape sh{tokens, width};
  auto s = randn<T>(tokens * width, 21), t = randn<T>(tokens * width, 22);
  std::vector<T> ds(s.size()), scratch(static_cast<std::size_t>(2 * tokens));
  for (auto _ : state)
    benchmark::DoNotOptimize(ops::mse_loss(be, tensor(ds.data(), sh), tensor(scratch.data(), {2 * tokens}),
                                           tensor(s.data(), sh), tensor(t.data(), sh)));
  report_bytes<T>(state, 4.0 * tokens * width);
}

// ---- GEMM-bound ops --------------------------------------------------------------------------------

template <class T>
void linear_forward(benchmark::State& state) {
  backend::cpu be;
  auto x = randn<T>(tokens * width, 23), w = randn<T>(ffn * width, 24, 0.02), b = randn<T>(ffn, 25);
  std::vector<T> out(static_cast<std::size_t>(tokens * ffn));
  for (auto _ : state)
    ops::linear_forward(be, tensor(out.data(), {tokens, ffn}), tensor(x.data(), {tokens, width}),
                        tensor(w.data(), {ffn, width}), tensor(b.data(), {ffn}));
  report_flops(state, 2.0 * tokens * width * ffn);
}

template <class T>
void linear_backward(benchmark::State& state) {
  backend::cpu be;
  auto x = randn<T>(tokens * width, 23), w = randn<T>(ffn * width, 24, 0.02), dout = randn<T>(tokens * ffn, 26);
  std::vector<T> dx(x.size()), dw(w.size()), db(static_cast<std::size_t>(ffn));
  for (auto _ : state)
    ops::linear_backward(be, tensor(dx.data(), {tokens, width}), tensor(dw.data(), {ffn, width}), tensor(db.data(), {ffn}),
                         tensor(dout.data(), {tokens, ffn}), tensor(x.data(), {tokens, width}), tensor(w.data(), {ffn, width}));
  report_flops(state, 4.0 * tokens * width * ffn);
}

template <class T>
void attention_forward(benchmark::State& state) {
  backend::cpu be;
  const shape qs{batch, seq, heads, head_dim}, ps{batch, heads, seq, seq};
  auto q = randn<T>(qs.numel(), 27), k = randn<T>(qs.numel(), 28), v = randn<T>(qs.numel(), 29);
  std::vector<T> out(q.size()), probs(static_cast<std::size_t>(ps.numel()));
  for (auto _ : state)
    ops::attention_forward(be, tensor(out.data(), qs), tensor(probs.data(), ps), tensor(q.data(), qs), tensor(k.data(), qs),
                           tensor(v.data(), qs), true);
  // Two GEMMs per head (q k^T and p v), each 2 * T * T * D flops per batch element.
  report_flops(state, 4.0 * batch * heads * seq * seq * head_dim);
}

template <class T>
void attention_backward(benchmark::State& state) {
  backend::cpu be;
  const shape qs{batch, seq, heads, head_dim}, ps{batch, heads, seq, seq};
  auto q = randn<T>(qs.numel(), 27), k = randn<T>(qs.numel(), 28), v = randn<T>(qs.numel(), 29),
       dout = randn<T>(qs.numel(), 30);
  std::vector<T> out(q.size()), probs(static_cast<std::size_t>(ps.numel())), dprobs(probs.size());
  std::vector<T> dq(q.size()), dk(q.size()), dv(q.size());
  ops::attention_forward(be, tensor(out.data(), qs), tensor(probs.data(), ps), tensor(q.data(), qs), tensor(k.data(), qs),
                         tensor(v.data(), qs), true);
  for (auto _ : state)
    ops::attention_backward(be, tensor(dq.data(), qs), tensor(dk.data(), qs), tensor(dv.data(), qs), tensor(dprobs.data(), ps),
                            tensor(dout.data(), qs), tensor(q.data(), qs), tensor(k.data(), qs), tensor(v.data(), qs),
                            tensor(probs.data(), ps), true);
  report_flops(state, 8.0 * batch * heads * seq * seq * head_dim);
}

// ---- flash against materialised attention, by sequence length ------------------------------------
// The same shapes (batch 4, 12 heads of 64, causal) through ops::attention_* (GEMMs over the stored
// (B, H, T, T) probabilities) and ops::flash_attention_* (row functors, memory linear in T). Flops
// are counted alike for both, as the materialised op's GEMMs (full T x T), so the GFLOP/s ratio is
// the speed ratio.

template <class T>
void materialised_attention_forward(benchmark::State& state) {
  backend::cpu be;
  const index_t L = state.range(0);
  const shape qs{batch, L, heads, head_dim}, ps{batch, heads, L, L};
  auto q = randn<T>(qs.numel(), 31), k = randn<T>(qs.numel(), 32), v = randn<T>(qs.numel(), 33);
  std::vector<T> out(q.size()), probs(static_cast<std::size_t>(ps.numel()));
  for (auto _ : state)
    ops::attention_forward(be, tensor(out.data(), qs), tensor(probs.data(), ps), tensor(q.data(), qs), tensor(k.data(), qs),
                           tensor(v.data(), qs), true);
  report_flops(state, 4.0 * batch * heads * L * L * head_dim);
}

template <class T>
void flash_attention_forward(benchmark::State& state) {
  backend::cpu be;
  const index_t L = state.range(0);
  const shape qs{batch, L, heads, head_dim}, ls{batch, heads, L};
  auto q = randn<T>(qs.numel(), 31), k = randn<T>(qs.numel(), 32), v = randn<T>(qs.numel(), 33);
  std::vector<T> out(q.size()), lse(static_cast<std::size_t>(ls.numel()));
  for (auto _ : state)
    ops::flash_attention_forward(be, tensor(out.data(), qs), tensor(lse.data(), ls), tensor(q.data(), qs), tensor(k.data(), qs),
                                 tensor(v.data(), qs), true);
  report_flops(state, 4.0 * batch * heads * L * L * head_dim);
}

template <class T>
void materialised_attention_backward(benchmark::State& state) {
  backend::cpu be;
  const index_t L = state.range(0);
  const shape qs{batch, L, heads, head_dim}, ps{batch, heads, L, L};
  auto q = randn<T>(qs.numel(), 31), k = randn<T>(qs.numel(), 32), v = randn<T>(qs.numel(), 33), dout = randn<T>(qs.numel(), 34);
  std::vector<T> out(q.size()), probs(static_cast<std::size_t>(ps.numel())), dprobs(probs.size());
  std::vector<T> dq(q.size()), dk(q.size()), dv(q.size());
  ops::attention_forward(be, tensor(out.data(), qs), tensor(probs.data(), ps), tensor(q.data(), qs), tensor(k.data(), qs),
                         tensor(v.data(), qs), true);
  for (auto _ : state)
    ops::attention_backward(be, tensor(dq.data(), qs), tensor(dk.data(), qs), tensor(dv.data(), qs), tensor(dprobs.data(), ps),
                            tensor(dout.data(), qs), tensor(q.data(), qs), tensor(k.data(), qs), tensor(v.data(), qs),
                            tensor(probs.data(), ps), true);
  report_flops(state, 8.0 * batch * heads * L * L * head_dim);
}

template <class T>
void flash_attention_backward(benchmark::State& state) {
  backend::cpu be;
  const index_t L = state.range(0);
  const shape qs{batch, L, heads, head_dim}, ls{batch, heads, L};
  auto q = randn<T>(qs.numel(), 31), k = randn<T>(qs.numel(), 32), v = randn<T>(qs.numel(), 33), dout = randn<T>(qs.numel(), 34);
  std::vector<T> out(q.size()), lse(static_cast<std::size_t>(ls.numel())), delta(lse.size());
  std::vector<T> dq(q.size()), dk(q.size()), dv(q.size());
  ops::flash_attention_forward(be, tensor(out.data(), qs), tensor(lse.data(), ls), tensor(q.data(), qs), tensor(k.data(), qs),
                               tensor(v.data(), qs), true);
  for (auto _ : state)
    ops::flash_attention_backward(be, tensor(dq.data(), qs), tensor(dk.data(), qs), tensor(dv.data(), qs),
                                  tensor(delta.data(), ls), tensor(dout.data(), qs), tensor(q.data(), qs), tensor(k.data(), qs),
                                  tensor(v.data(), qs), tensor(out.data(), qs), tensor(lse.data(), ls), true);
  report_flops(state, 8.0 * batch * heads * L * L * head_dim);
}

}  // namespace

#define LWCL_BENCH(...) BENCHMARK_TEMPLATE(__VA_ARGS__)->Unit(benchmark::kMicrosecond)->UseRealTime()

LWCL_BENCH(layernorm_forward, float);
LWCL_BENCH(layernorm_forward, double);
LWCL_BENCH(layernorm_backward, float);
LWCL_BENCH(layernorm_backward, double);
LWCL_BENCH(rmsnorm_forward, float);
LWCL_BENCH(rmsnorm_backward, float);
LWCL_BENCH(gelu_forward, float, ops::gelu_kind::tanh);
LWCL_BENCH(gelu_forward, float, ops::gelu_kind::erf);
LWCL_BENCH(gelu_backward, float, ops::gelu_kind::tanh);
LWCL_BENCH(gelu_backward, float, ops::gelu_kind::erf);
LWCL_BENCH(swiglu_forward, float);
LWCL_BENCH(swiglu_backward, float);
LWCL_BENCH(embedding_forward, float);
LWCL_BENCH(embedding_backward, float);
LWCL_BENCH(add, float);
LWCL_BENCH(rope_forward, float);
LWCL_BENCH(cross_entropy, float);
LWCL_BENCH(logit_kl_loss, float);
LWCL_BENCH(mse_loss, float);
LWCL_BENCH(linear_forward, float);
LWCL_BENCH(linear_backward, float);
LWCL_BENCH(attention_forward, float);
LWCL_BENCH(attention_backward, float);
LWCL_BENCH(materialised_attention_forward, float)->ArgName("T")->Arg(128)->Arg(512);
LWCL_BENCH(flash_attention_forward, float)->ArgName("T")->Arg(128)->Arg(512);
LWCL_BENCH(materialised_attention_backward, float)->ArgName("T")->Arg(128)->Arg(512);
LWCL_BENCH(flash_attention_backward, float)->ArgName("T")->Arg(128)->Arg(512);

BENCHMARK_MAIN();
