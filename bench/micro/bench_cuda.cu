// backend::cuda timed on the GPU: cuBLAS GEMMs on the transformer shapes of bench_gemm (f32 and f64),
// the layernorm and rmsnorm ops (fused block-per-row kernels; layernorm forward also with one-pass
// statistics and as the generic row functor), cross-entropy's loss-and-gradient pass (fused kernel
// against the row functor), and attention: the tiled flash kernel at two tile shapes against the
// materialised op (cuBLAS over stored probabilities), forward, and backward with the tiled flash kernels
// against the flash row functors and the materialised op. Each iteration is timed
// with CUDA events on the backend's compute stream and reported as manual time, so host launch
// overhead and queueing do not count.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cuda_bench.cuh"
#include "lwcl/backend/cuda/codec/gauss_codec.cuh"
#include "lwcl/backend/cuda/cuda.cuh"
#include "lwcl/core/rng.hpp"
#include "lwcl/backend/cuda/flash_attention.cuh"
#include "lwcl/backend/cuda/quant/matmul.cuh"
#include "lwcl/ops/attention.hpp"
#include "lwcl/ops/cross_entropy.hpp"
#include "lwcl/ops/flash_attention.hpp"
#include "lwcl/ops/layernorm.hpp"
#include "lwcl/ops/rmsnorm.hpp"
#include "lwcl/quant/rtn.hpp"
#include "lwcl/tensor/tensor.hpp"

using namespace lwcl;
using namespace lwcl::bench;

namespace {

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

// ---- norms ----------------------------------------------------------------------------------------
// GB/s over compulsory traffic. Forward: x read, out written, weight (and bias) and the per-row
// statistics. Backward: x and dout read, dinp read and written, plus the per-channel and per-row vectors.

// How the layernorm forward runs: the fused kernel with two-pass or one-pass statistics, or the host's
// row functor through for_each (one thread per row, the path before the fused kernels).
enum class layernorm_path { two_pass, one_pass, row_functor };

template <class T, layernorm_path Path>
void cuda_layernorm_forward_path(benchmark::State& state) {
  backend::cuda* be = gpu();
  if (!be) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const index_t N = state.range(0), C = state.range(1);
  auto x = random_tensor<T>(*be, {N, C}, 3), w = random_tensor<T>(*be, {C}, 4), b = random_tensor<T>(*be, {C}, 5);
  owned_tensor<backend::cuda> out(*be, dtype_of_v<T>, {N, C}), mean(*be, dtype_of_v<T>, {N}), rstd(*be, dtype_of_v<T>, {N});
  event_pair ev;
  ev.time(state, *be, [&] {
    if constexpr (Path == layernorm_path::two_pass)
      backend::cuda_layernorm_forward<backend::norm_stats::two_pass>(*be, out, mean, rstd, x, w, b, 1e-5);
    else if constexpr (Path == layernorm_path::one_pass)
      backend::cuda_layernorm_forward<backend::norm_stats::one_pass>(*be, out, mean, rstd, x, w, b, 1e-5);
    else
      be->for_each(N,
                   ops::kernel::layernorm_forward_row<T>{out.template ptr<T>(), mean.template ptr<T>(), rstd.template ptr<T>(),
                                                         x.template ptr<T>(), w.template ptr<T>(), b.template ptr<T>(), C, T(1e-5)},
                   8 * C);
  });
  report_bytes(state, (2.0 * N * C + 2.0 * C + 2.0 * N) * sizeof(T));
}

template <class T>
void cuda_rmsnorm_forward(benchmark::State& state) {
  backend::cuda* be = gpu();
  if (!be) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const index_t N = state.range(0), C = state.range(1);
  auto x = random_tensor<T>(*be, {N, C}, 3), w = random_tensor<T>(*be, {C}, 4);
  owned_tensor<backend::cuda> out(*be, dtype_of_v<T>, {N, C}), rstd(*be, dtype_of_v<T>, {N});
  event_pair ev;
  ev.time(state, *be, [&] { ops::rmsnorm_forward(*be, out, rstd, x, w, 1e-6); });
  report_bytes(state, (2.0 * N * C + C + N) * sizeof(T));
}

template <class T>
void cuda_rmsnorm_backward(benchmark::State& state) {
  backend::cuda* be = gpu();
  if (!be) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const index_t N = state.range(0), C = state.range(1);
  auto x = random_tensor<T>(*be, {N, C}, 3), w = random_tensor<T>(*be, {C}, 4), dout = random_tensor<T>(*be, {N, C}, 6);
  owned_tensor<backend::cuda> out(*be, dtype_of_v<T>, {N, C}), rstd(*be, dtype_of_v<T>, {N});
  owned_tensor<backend::cuda> dx(*be, dtype_of_v<T>, {N, C}), dw(*be, dtype_of_v<T>, {C});
  ops::rmsnorm_forward(*be, out, rstd, x, w, 1e-6);
  event_pair ev;
  ev.time(state, *be, [&] { ops::rmsnorm_backward(*be, dx, dw, dout, x, w, rstd); });
  report_bytes(state, (4.0 * N * C + 3.0 * C + N) * sizeof(T));
}

// A full training batch of tokens at GPT-2 small, an odd width, and a 7B-class width.
void norm_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"N", "C"});
  b->Args({16384, 768});
  b->Args({16384, 1000});
  b->Args({16384, 4096});
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
}

// ---- cross-entropy --------------------------------------------------------------------------------
// The loss-and-gradient pass of ops::cross_entropy over a batch of token rows: the fused block-per-row
// kernel against the row functor through for_each (one thread per row, the path before the fused
// kernel). The op's count and mean (two device sums that wait for the host) are left out. GB/s over
// compulsory traffic: logits read once, dlogits read and written, targets and row losses; the fused
// kernel reads each row of logits twice, the second time mostly from L2.

enum class cross_entropy_path { fused, row_functor };

// Targets drawn uniformly from [0, V), every 16th row ignored.
struct fill_targets {
  std::int32_t* p;
  philox_stream s;
  index_t V;
  LWCL_HD void operator()(index_t i) const {
    p[i] = i % 16 == 15 ? -1 : static_cast<std::int32_t>(s.bits(static_cast<std::uint64_t>(i)) % static_cast<std::uint32_t>(V));
  }
};

template <class T, cross_entropy_path Path>
void cuda_cross_entropy(benchmark::State& state) {
  backend::cuda* be = gpu();
  if (!be) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const index_t N = state.range(0), V = state.range(1);
  auto x = random_tensor<T>(*be, {N, V}, 21, 3.0);
  owned_tensor<backend::cuda> dl(*be, dtype_of_v<T>, {N, V}), loss(*be, dtype_of_v<T>, {N}), targets(*be, dtype::i32, {N});
  be->for_each(N, fill_targets{targets.template ptr<std::int32_t>(), philox_stream{22, 0}, V});
  const double scale = 1.0 / static_cast<double>(N);
  event_pair ev;
  ev.time(state, *be, [&] {
    if constexpr (Path == cross_entropy_path::fused)
      backend::cuda_cross_entropy_rows(*be, dl, loss, x, targets, scale);
    else
      be->for_each(N,
                   ops::kernel::cross_entropy_row<T>{dl.template ptr<T>(), loss.template ptr<T>(), x.template ptr<T>(),
                                                     targets.template ptr<std::int32_t>(), V, static_cast<T>(scale)},
                   8 * V);
  });
  report_bytes(state, 3.0 * static_cast<double>(N) * static_cast<double>(V) * sizeof(T) +
                          static_cast<double>(N) * (sizeof(std::int32_t) + sizeof(T)));
}

// A batch of 8192 tokens at a LLaMA vocabulary and at GPT-2's.
void cross_entropy_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"N", "V"});
  b->Args({8192, 32000});
  b->Args({8192, 50257});
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
}

// ---- attention ------------------------------------------------------------------------------------
// Flops are counted in GEMMs of 2 T^2 D each per (batch, head): two forward (q k^T, P v) and five
// backward (the recomputed q k^T, then dP, dv, dq, dk), 2.5 times the forward, as flash attention
// is usually counted; halved under the causal mask, the work a kernel that skips masked tiles can save.
// Every backward run is counted alike (the materialised op, which reuses stored probabilities, too), so
// within a direction the TFLOP/s ratio is the speed ratio. The flash backward runs as the tiled kernels
// and as the generic row functors through for_each.

struct attention_shape {
  index_t B, T, H, KVH, D;
  bool causal;
  explicit attention_shape(const benchmark::State& state)
      : B(state.range(0)), T(state.range(1)), H(state.range(2)), KVH(state.range(3)), D(state.range(4)),
        causal(state.range(5) != 0) {}
  shape q() const { return {B, T, H, D}; }
  shape kv() const { return {B, T, KVH, D}; }
  double flops(double gemms) const {
    const double f = gemms * 2.0 * static_cast<double>(B * H) * static_cast<double>(T) * static_cast<double>(T) *
                     static_cast<double>(D);
    return causal ? f / 2 : f;
  }
};

// Printed as "TFLOP=<value>/s".
void report_tflops(benchmark::State& state, double flops) {
  state.counters["TFLOP"] = benchmark::Counter(flops * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
}

template <int Br, int Bc>
void cuda_flash_attention_forward(benchmark::State& state) {
  backend::cuda* be = gpu();
  if (!be) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const attention_shape a(state);
  auto q = random_tensor<float>(*be, a.q(), 11), k = random_tensor<float>(*be, a.kv(), 12), v = random_tensor<float>(*be, a.kv(), 13);
  owned_tensor<backend::cuda> out(*be, dtype::f32, a.q()), lse(*be, dtype::f32, {a.B, a.H, a.T});
  event_pair ev;
  ev.time(state, *be, [&] { backend::cuda_flash_attention_forward<Br, Bc>(*be, out, lse, q, k, v, a.causal); });
  report_tflops(state, a.flops(2));
}

void cuda_materialised_attention_forward(benchmark::State& state) {
  backend::cuda* be = gpu();
  if (!be) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const attention_shape a(state);
  auto q = random_tensor<float>(*be, a.q(), 11), k = random_tensor<float>(*be, a.kv(), 12), v = random_tensor<float>(*be, a.kv(), 13);
  owned_tensor<backend::cuda> out(*be, dtype::f32, a.q()), probs(*be, dtype::f32, {a.B, a.H, a.T, a.T});
  event_pair ev;
  ev.time(state, *be, [&] { ops::attention_forward(*be, out, probs, q, k, v, a.causal); });
  report_tflops(state, a.flops(2));
}

enum class flash_backward_path { tiled, row_functors };

template <flash_backward_path Path>
void cuda_flash_attention_backward(benchmark::State& state) {
  backend::cuda* be = gpu();
  if (!be) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const attention_shape a(state);
  auto q = random_tensor<float>(*be, a.q(), 11), k = random_tensor<float>(*be, a.kv(), 12), v = random_tensor<float>(*be, a.kv(), 13);
  auto dout = random_tensor<float>(*be, a.q(), 14);
  const shape ls{a.B, a.H, a.T};
  owned_tensor<backend::cuda> out(*be, dtype::f32, a.q()), lse(*be, dtype::f32, ls), delta(*be, dtype::f32, ls);
  owned_tensor<backend::cuda> dq(*be, dtype::f32, a.q()), dk(*be, dtype::f32, a.kv()), dv(*be, dtype::f32, a.kv());
  ops::flash_attention_forward(*be, out, lse, q, k, v, a.causal);
  const ops::kernel::flash_dims d{a.B, a.T, a.H, a.KVH, a.D};
  event_pair ev;
  ev.time(state, *be, [&] {
    if constexpr (Path == flash_backward_path::tiled)
      backend::cuda_flash_attention_backward(*be, dq, dk, dv, delta, dout, q, k, v, out, lse, a.causal);
    else
      ops::flash_detail::backward_rows<float>(*be, dq, dk, dv, delta, dout, q, k, v, out, lse, d, a.causal);
  });
  report_tflops(state, a.flops(5));
}

void cuda_materialised_attention_backward(benchmark::State& state) {
  backend::cuda* be = gpu();
  if (!be) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const attention_shape a(state);
  auto q = random_tensor<float>(*be, a.q(), 11), k = random_tensor<float>(*be, a.kv(), 12), v = random_tensor<float>(*be, a.kv(), 13);
  auto dout = random_tensor<float>(*be, a.q(), 14);
  const shape ps{a.B, a.H, a.T, a.T};
  owned_tensor<backend::cuda> out(*be, dtype::f32, a.q()), probs(*be, dtype::f32, ps), dprobs(*be, dtype::f32, ps);
  owned_tensor<backend::cuda> dq(*be, dtype::f32, a.q()), dk(*be, dtype::f32, a.kv()), dv(*be, dtype::f32, a.kv());
  ops::attention_forward(*be, out, probs, q, k, v, a.causal);
  event_pair ev;
  ev.time(state, *be, [&] { ops::attention_backward(*be, dq, dk, dv, dprobs, dout, q, k, v, probs, a.causal); });
  report_tflops(state, a.flops(5));
}

// GQA with 16 query heads over 4 kv heads; the materialised runs hold B * H * T^2 floats of
// probabilities (2 GiB at T = 4096), the flash runs B * H * T.
void attention_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"B", "T", "H", "KVH", "D", "causal"});
  b->Args({4, 1024, 16, 4, 64, 1});
  b->Args({4, 1024, 16, 4, 128, 1});
  b->Args({2, 4096, 16, 4, 64, 1});
  b->Args({2, 4096, 16, 4, 128, 1});
  b->Args({2, 4096, 16, 4, 128, 0});
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
}

// y[M,N] = x[M,K] W[N,K]^T with W packed (bits 4 or 8: quant::dequant_matmul, group 128, symmetric, f16
// scales) or dense (bits 16: cuBLAS bf16 with f32 accumulation; 32: cuBLAS exact f32), the peers a
// quantised linear layer replaces. GB/s counts the weight's stored bytes plus x and y.
void cuda_dequant_matmul(benchmark::State& state) {
  backend::cuda* be = gpu();
  if (!be) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const index_t M = state.range(0), K = state.range(1), N = state.range(2);
  const int bits = static_cast<int>(state.range(3));
  auto x = random_tensor<float>(*be, {M, K}, 1);
  owned_tensor<backend::cuda> y(*be, dtype::f32, {M, N});
  double weight_bytes = 0;
  if (bits == 4 || bits == 8) {
    quant::weight_format f;
    f.bits = bits;
    f.group = 128;
    std::vector<float> w(static_cast<std::size_t>(N * K));
    philox_stream s{3, 0};
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.02f * static_cast<float>(s.normal(i));
    const quant::device_packed_weight dw(*be, quant::quantize_rtn(w, N, K, f, "bench"));
    weight_bytes = static_cast<double>(dw.bytes());
    event_pair ev;
    ev.time(state, *be, [&] { quant::dequant_matmul(*be, dw, x.ptr<float>(), M, nullptr, y.ptr<float>()); });
  } else if (bits == 16) {
    auto xb = random_tensor<bf16>(*be, {M, K}, 1), wb = random_tensor<bf16>(*be, {N, K}, 2, 0.02);
    owned_tensor<backend::cuda> yb(*be, dtype::bf16, {M, N});
    weight_bytes = 2.0 * static_cast<double>(N * K);
    event_pair ev;
    ev.time(state, *be, [&] {
      be->gemm(false, true, M, N, K, 1.0f, xb.ptr<bf16>(), K, wb.ptr<bf16>(), K, 0.0f, yb.ptr<bf16>(), N);
    });
  } else {
    auto wf = random_tensor<float>(*be, {N, K}, 2, 0.02);
    weight_bytes = 4.0 * static_cast<double>(N * K);
    event_pair ev;
    ev.time(state, *be, [&] {
      be->gemm(false, true, M, N, K, 1.0f, x.ptr<float>(), K, wf.ptr<float>(), K, 0.0f, y.ptr<float>(), N);
    });
  }
  report_bytes(state, weight_bytes + 4.0 * static_cast<double>(M * (K + N)));
  report_flops(state, 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K));
}

// Decoding (M 1 and 8, the packed kernel) and a batch of 16 (dequantised slabs and cuBLAS) on a 4096^2
// projection, and decoding on a 4096 x 14336 FFN projection; each at 4, 8, 16 and 32 bits.
void dequant_shapes(benchmark::internal::Benchmark* b) {
  for (const auto& [M, K, N] : {std::array<int64_t, 3>{1, 4096, 4096}, {8, 4096, 4096}, {16, 4096, 4096}, {1, 4096, 14336}})
    for (const int64_t bits : {4, 8, 16, 32}) b->Args({M, K, N, bits});
  b->ArgNames({"M", "K", "N", "bits"})->UseManualTime()->Unit(benchmark::kMicrosecond);
}

}  // namespace

BENCHMARK_TEMPLATE(cuda_gemm, float)->Apply(transformer_shapes);
BENCHMARK_TEMPLATE(cuda_gemm, double)->Apply(transformer_shapes);
BENCHMARK_TEMPLATE(cuda_layernorm_forward, float)->Apply(layernorm_shapes);
BENCHMARK_TEMPLATE(cuda_layernorm_backward, float)->Apply(layernorm_shapes);
BENCHMARK_TEMPLATE(cuda_layernorm_forward_path, float, layernorm_path::two_pass)->Apply(norm_shapes);
BENCHMARK_TEMPLATE(cuda_layernorm_forward_path, float, layernorm_path::one_pass)->Apply(norm_shapes);
BENCHMARK_TEMPLATE(cuda_layernorm_forward_path, float, layernorm_path::row_functor)->Apply(norm_shapes);
BENCHMARK_TEMPLATE(cuda_rmsnorm_forward, float)->Apply(norm_shapes);
BENCHMARK_TEMPLATE(cuda_rmsnorm_backward, float)->Apply(norm_shapes);
BENCHMARK_TEMPLATE(cuda_cross_entropy, float, cross_entropy_path::fused)->Apply(cross_entropy_shapes);
BENCHMARK_TEMPLATE(cuda_cross_entropy, float, cross_entropy_path::row_functor)->Apply(cross_entropy_shapes);
// Two tile shapes: 64 query rows (2 warps) by 32 keys, and 128 rows (4 warps) by 32 keys, which halves
// the K/V tile loads per query row at twice the shared memory per block.
BENCHMARK_TEMPLATE(cuda_flash_attention_forward, 64, 32)->Apply(attention_shapes);
BENCHMARK_TEMPLATE(cuda_flash_attention_forward, 128, 32)->Apply(attention_shapes);
BENCHMARK(cuda_materialised_attention_forward)->Apply(attention_shapes);
BENCHMARK_TEMPLATE(cuda_flash_attention_backward, flash_backward_path::tiled)->Apply(attention_shapes);
BENCHMARK_TEMPLATE(cuda_flash_attention_backward, flash_backward_path::row_functors)->Apply(attention_shapes);
BENCHMARK(cuda_materialised_attention_backward)->Apply(attention_shapes);
BENCHMARK(cuda_dequant_matmul)->Apply(dequant_shapes);

// gauss_codec on the device (backend/cuda/codec/gauss_codec.cuh): encode (0) or decode (1) of n bf16
// values from N(0, 1); GB = raw bytes per second, and the payload's ratio. Each call ends with a copy
// to the host (encode learns its size, decode its error flag), which the time includes.
void cuda_gauss_codec_bench(benchmark::State& state) {
  backend::cuda* be = gpu();
  if (!be) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const bool decode = state.range(0) == 1;
  const auto n = static_cast<std::size_t>(state.range(1));
  auto x = random_tensor<bf16>(*be, {static_cast<index_t>(n)}, 3);
  const codec::cuda_gauss_codec coder(*be);
  buffer<backend::cuda> enc;
  const std::size_t size = coder.encode(dtype::bf16, x.template ptr<bf16>(), n, enc);
  owned_tensor<backend::cuda> back(*be, dtype::bf16, {static_cast<index_t>(n)});
  buffer<backend::cuda> scratch;
  event_pair ev;
  ev.time(state, *be, [&] {
    if (decode)
      coder.decode(dtype::bf16, enc.data(), size, back.template ptr<bf16>(), n);
    else
      coder.encode(dtype::bf16, x.template ptr<bf16>(), n, scratch);
  });
  report_bytes(state, 2.0 * static_cast<double>(n));
  state.counters["ratio"] = 2.0 * static_cast<double>(n) / static_cast<double>(size);
}
BENCHMARK(cuda_gauss_codec_bench)
    ->ArgNames({"decode", "n"})
    ->ArgsProduct({{0, 1}, {1 << 20, 1 << 24}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

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
