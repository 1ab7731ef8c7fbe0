#pragma once
// The fused CUDA kernel behind ops::cross_entropy on backend::cuda (included by cuda.cuh): one thread
// block per row of logits, the row's (max, normaliser) pair gathered in a single read and merged by
// cub::BlockReduce, then a second read writing the gradient, with the per-row math of the host row
// functor (ops::kernel::cross_entropy_*), so that only the summation order differs from the host.

#include <cuda_runtime_api.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <string_view>

#include "lwcl/backend/cuda/cuda.cuh"
#include "lwcl/backend/cuda/device.cuh"
#include "lwcl/backend/cuda/error.cuh"
#include "lwcl/backend/cuda/norms.cuh"
#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/ops/common.hpp"
#include "lwcl/ops/cross_entropy.hpp"
#include "lwcl/tensor/tensor.hpp"

namespace lwcl::backend {

namespace cuda_detail {

// Vocabularies are long (32k to 150k logits per row), so a row has work for 256 threads at any model
// size, and rows are many (one per token), so one block per row fills the GPU.
inline constexpr int cross_entropy_threads = 256;

template <class T>
struct cross_entropy_args {
  T* dlogits;  // may be null: loss only
  T* row_loss;
  const T* logits;
  const std::int32_t* targets;
  index_t V;
  compute_t<T> scale;
};

// The probabilities are never stored: the gradient pass re-reads the logits (from L2 when the row's
// first read is recent) and forms each one from the log-sum-exp. A row is too long to cache in shared
// memory at the vocabularies this is for (200 KB in f32 at V = 50257).
template <class T, int Threads>
__global__ void __launch_bounds__(Threads) cross_entropy_kernel(cross_entropy_args<T> a) {
  using A = compute_t<T>;
  using stats = ops::kernel::cross_entropy_stats<A>;
  __shared__ typename cub::BlockReduce<stats, Threads>::TempStorage tmp;
  __shared__ stats total;
  const index_t row = blockIdx.x, V = a.V;
  const int tid = static_cast<int>(threadIdx.x);
  const index_t target = a.targets[row];
  // The target is the same for the whole block, so the block leaves together, before any barrier.
  // A target >= V (rejected by the op on the host) gives a NaN loss rather than an out-of-bounds read.
  if (target < 0 || target >= V) {
    if (tid == 0) a.row_loss[row] = target < 0 ? T(0) : static_cast<T>(NAN);
    return;
  }
  const T* x = a.logits + row * V;
  stats part{-static_cast<A>(INFINITY), A(0)};
  for (index_t i = tid; i < V; i += Threads) part.add(A(x[i]));
  const stats s = block_total<Threads>(part, tmp, total);
  const A lse = ops::kernel::cross_entropy_lse(s.m, s.z);
  if (tid == 0) a.row_loss[row] = T(ops::kernel::cross_entropy_loss(lse, A(x[target])));
  if (!a.dlogits) return;
  T* g = a.dlogits + row * V;
  for (index_t i = tid; i < V; i += Threads) g[i] += ops::kernel::cross_entropy_dx(A(x[i]), lse, a.scale, i == target);
}

}  // namespace cuda_detail

// The fused loss-and-gradient pass of ops::cross_entropy: row_loss[r] = each row's loss (0 if ignored)
// and, when dlogits is non-empty, dlogits += scale * (softmax - onehot) on counted rows. Arguments as
// ops::cross_entropy has checked them (a direct caller, the benchmark, must pass the same); the count
// and the mean stay in the op. f32, f64 and bf16. A template, so that the kernel is compiled only where it is
// called; backend::cuda::cross_entropy_rows runs the default block size.
template <int Threads = cuda_detail::cross_entropy_threads>
void cuda_cross_entropy_rows(const cuda& be, const tensor& dlogits, const tensor& row_loss, const tensor& logits,
                             const tensor& targets, double scale) {
  constexpr std::string_view op = "cuda_cross_entropy";
  const index_t V = logits.shape.last(), N = ops::rows_of(logits);
  if (N == 0) return;
  check(N <= INT_MAX, op, ": ", N, " rows exceed the grid limit");
  ops::dispatch_storage(op, logits.type, [&](auto t) {
    using T = decltype(t);
    const cuda_detail::cross_entropy_args<T> a{static_cast<T*>(dlogits.data), row_loss.ptr<T>(), logits.ptr<T>(),
                                               targets.ptr<std::int32_t>(), V, static_cast<compute_t<T>>(scale)};
    cuda_detail::scoped_device on(be.device());
    cuda_detail::cross_entropy_kernel<T, Threads><<<static_cast<unsigned>(N), Threads, 0, be.stream()>>>(a);
    LWCL_CUDA_CHECK_LAUNCH(op.data());
  });
}

template <class Tensor>
void cuda::cross_entropy_rows(const Tensor& dlogits, const Tensor& row_loss, const Tensor& logits, const Tensor& targets,
                              double scale) const {
  cuda_cross_entropy_rows(*this, dlogits, row_loss, logits, targets, scale);
}

}  // namespace lwcl::backend
