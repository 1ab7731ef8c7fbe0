#pragma once
// The fused CUDA kernels behind ops::layernorm_* and ops::rmsnorm_* on backend::cuda (included by
// cuda.cuh): one thread block per row, row sums by cub::BlockReduce, and the per-element math of the
// host row functors (ops::kernel::layernorm_out, layernorm_dx, rmsnorm_dx, ...), so that only the
// summation order differs from the host.

#include <cuda_runtime_api.h>

#include <climits>
#include <cstddef>
#include <cub/block/block_reduce.cuh>
#include <string_view>
#include <type_traits>

#include "lwcl/backend/cuda/cuda.cuh"
#include "lwcl/backend/cuda/device.cuh"
#include "lwcl/backend/cuda/error.cuh"
#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/ops/common.hpp"
#include "lwcl/ops/layernorm.hpp"
#include "lwcl/ops/rmsnorm.hpp"
#include "lwcl/tensor/tensor.hpp"

namespace lwcl::backend {

// How the fused layernorm forward forms its statistics. two_pass: the mean, then the squared
// deviations from it (the host functor's formulas; the default). one_pass: sum and sum of squares in
// one sweep and var = E[x^2] - E[x]^2, one reduction fewer but inexact when |mean| >> std; kept for
// the benchmark.
enum class norm_stats { two_pass, one_pass };

namespace cuda_detail {

// Each thread touches the elements tid, tid + Threads, ... of its row in every pass, and reads back
// only what it cached itself, so the shared-memory row cache needs no barrier. Rows are cached when
// they fit the default 48 KiB per block (forward: C <= 12288 in f32, 6144 in f64; backward caches x and
// dout, half that); longer rows are read again from global memory, mostly from L2.
inline constexpr std::size_t norm_cache_limit = 48 * 1024;

// 128 threads up to C = 1024 (<= 8 elements each), 256 above.
inline int norm_threads(index_t C) { return C <= 1024 ? 128 : 256; }

struct norm_add {
  template <class U>
  LWCL_HD U operator()(const U& a, const U& b) const {
    return a + b;
  }
};

// Sum and sum of squares of a row, for the one-pass statistics.
template <class T>
struct norm_moments {
  T sum;
  T sum_sq;
  LWCL_HD friend norm_moments operator+(const norm_moments& a, const norm_moments& b) {
    return {a.sum + b.sum, a.sum_sq + b.sum_sq};
  }
};

// The block's total of every thread's `part`, returned to every thread. The barrier after the read
// lets the caller reuse `tmp` and `total` for the next reduction.
template <int Threads, class U>
__device__ U block_total(const U& part, typename cub::BlockReduce<U, Threads>::TempStorage& tmp, U& total) {
  const U r = cub::BlockReduce<U, Threads>(tmp).Reduce(part, norm_add{});
  if (threadIdx.x == 0) total = r;
  __syncthreads();
  const U out = total;
  __syncthreads();
  return out;
}

template <class T>
struct layernorm_forward_args {
  T* out;
  T* mean;
  T* rstd;
  const T* inp;
  const T* weight;
  const T* bias;  // may be null
  index_t C;
  compute_t<T> eps;
  bool cached;
};

// Rows are cached in shared memory in their storage type T; sums and statistics are formed in
// compute_t<T> (float for bf16), as in the host functors.
template <class T, int Threads, norm_stats Stats>
__global__ void __launch_bounds__(Threads) layernorm_forward_kernel(layernorm_forward_args<T> a) {
  extern __shared__ __align__(16) unsigned char norm_smem[];
  T* row_s = reinterpret_cast<T*>(norm_smem);
  const index_t row = blockIdx.x, C = a.C;
  const int tid = static_cast<int>(threadIdx.x);
  const T* x = a.inp + row * C;
  const T* src = a.cached ? row_s : x;
  using A = compute_t<T>;
  A m, s;
  if constexpr (Stats == norm_stats::one_pass) {
    __shared__ typename cub::BlockReduce<norm_moments<A>, Threads>::TempStorage tmp;
    __shared__ norm_moments<A> total;
    norm_moments<A> part{A(0), A(0)};
    for (index_t i = tid; i < C; i += Threads) {
      const T v = x[i];
      if (a.cached) row_s[i] = v;
      part.sum += A(v);
      part.sum_sq += A(v) * A(v);
    }
    const norm_moments<A> t = block_total<Threads>(part, tmp, total);
    m = ops::kernel::layernorm_mean(t.sum, C);
    s = ops::kernel::layernorm_rstd_one_pass(t.sum, t.sum_sq, C, a.eps);
  } else {
    __shared__ typename cub::BlockReduce<A, Threads>::TempStorage tmp;
    __shared__ A total;
    A part = 0;
    for (index_t i = tid; i < C; i += Threads) {
      const T v = x[i];
      if (a.cached) row_s[i] = v;
      part += A(v);
    }
    m = ops::kernel::layernorm_mean(block_total<Threads>(part, tmp, total), C);
    part = 0;
    for (index_t i = tid; i < C; i += Threads) part += ops::kernel::layernorm_sq_dev(A(src[i]), m);
    s = ops::kernel::layernorm_rstd(block_total<Threads>(part, tmp, total), C, a.eps);
  }
  T* y = a.out + row * C;
  for (index_t i = tid; i < C; i += Threads)
    y[i] = T(ops::kernel::layernorm_out(A(src[i]), m, s, A(a.weight[i]), a.bias ? A(a.bias[i]) : A(0)));
  if (tid == 0) {
    a.mean[row] = T(m);
    a.rstd[row] = T(s);
  }
}

template <class T>
struct layernorm_backward_args {
  T* dinp;
  const T* dout;
  const T* inp;
  const T* weight;
  const T* mean;
  const T* rstd;
  index_t C;
  bool cached;
};

// dinp only; dweight and dbias are the host's per-channel functor (one writer per channel).
template <class T, int Threads>
__global__ void __launch_bounds__(Threads) layernorm_backward_kernel(layernorm_backward_args<T> a) {
  extern __shared__ __align__(16) unsigned char norm_smem[];
  using A = compute_t<T>;
  using sums = ops::kernel::layernorm_grad_sums<A>;
  __shared__ typename cub::BlockReduce<sums, Threads>::TempStorage tmp;
  __shared__ sums total;
  const index_t row = blockIdx.x, C = a.C;
  const int tid = static_cast<int>(threadIdx.x);
  T* x_s = reinterpret_cast<T*>(norm_smem);
  T* dy_s = x_s + C;
  const T* x = a.inp + row * C;
  const T* dy = a.dout + row * C;
  const A m = a.mean[row], s = a.rstd[row];
  sums part{A(0), A(0)};
  for (index_t i = tid; i < C; i += Threads) {
    const T xv = x[i], dyv = dy[i];
    if (a.cached) {
      x_s[i] = xv;
      dy_s[i] = dyv;
    }
    part.add(A(dyv), A(a.weight[i]), A(xv), m, s);
  }
  const sums t = block_total<Threads>(part, tmp, total);
  const A g_mean = t.g / static_cast<A>(C), gx_mean = t.gx / static_cast<A>(C);
  const T* xr = a.cached ? x_s : x;
  const T* dyr = a.cached ? dy_s : dy;
  T* dx = a.dinp + row * C;
  for (index_t i = tid; i < C; i += Threads)
    dx[i] += ops::kernel::layernorm_dx(A(dyr[i]), A(a.weight[i]), A(xr[i]), m, s, g_mean, gx_mean);
}

template <class T>
struct rmsnorm_forward_args {
  T* out;
  T* rstd;
  const T* inp;
  const T* weight;
  index_t C;
  compute_t<T> eps;
  bool cached;
};

template <class T, int Threads>
__global__ void __launch_bounds__(Threads) rmsnorm_forward_kernel(rmsnorm_forward_args<T> a) {
  using A = compute_t<T>;
  extern __shared__ __align__(16) unsigned char norm_smem[];
  __shared__ typename cub::BlockReduce<A, Threads>::TempStorage tmp;
  __shared__ A total;
  T* row_s = reinterpret_cast<T*>(norm_smem);
  const index_t row = blockIdx.x, C = a.C;
  const int tid = static_cast<int>(threadIdx.x);
  const T* x = a.inp + row * C;
  A part = 0;
  for (index_t i = tid; i < C; i += Threads) {
    const T v = x[i];
    if (a.cached) row_s[i] = v;
    part += A(v) * A(v);
  }
  const A s = ops::kernel::rmsnorm_rstd(block_total<Threads>(part, tmp, total), C, a.eps);
  const T* src = a.cached ? row_s : x;
  T* y = a.out + row * C;
  for (index_t i = tid; i < C; i += Threads) y[i] = T(ops::kernel::rmsnorm_out(A(src[i]), s, A(a.weight[i])));
  if (tid == 0) a.rstd[row] = T(s);
}

template <class T>
struct rmsnorm_backward_args {
  T* dinp;
  const T* dout;
  const T* inp;
  const T* weight;
  const T* rstd;
  index_t C;
  bool cached;
};

template <class T, int Threads>
__global__ void __launch_bounds__(Threads) rmsnorm_backward_kernel(rmsnorm_backward_args<T> a) {
  using A = compute_t<T>;
  extern __shared__ __align__(16) unsigned char norm_smem[];
  __shared__ typename cub::BlockReduce<A, Threads>::TempStorage tmp;
  __shared__ A total;
  const index_t row = blockIdx.x, C = a.C;
  const int tid = static_cast<int>(threadIdx.x);
  T* x_s = reinterpret_cast<T*>(norm_smem);
  T* dy_s = x_s + C;
  const T* x = a.inp + row * C;
  const T* dy = a.dout + row * C;
  const A s = a.rstd[row];
  A part = 0;
  for (index_t i = tid; i < C; i += Threads) {
    const T xv = x[i], dyv = dy[i];
    if (a.cached) {
      x_s[i] = xv;
      dy_s[i] = dyv;
    }
    part += ops::kernel::rmsnorm_grad_term(A(dyv), A(a.weight[i]), A(xv));
  }
  const A gx_mean = block_total<Threads>(part, tmp, total) / static_cast<A>(C);
  const T* xr = a.cached ? x_s : x;
  const T* dyr = a.cached ? dy_s : dy;
  T* dx = a.dinp + row * C;
  for (index_t i = tid; i < C; i += Threads) dx[i] += ops::kernel::rmsnorm_dx(A(dyr[i]), A(a.weight[i]), A(xr[i]), s, gx_mean);
}

// Runs launch(threads, smem, cached) with threads = 128 or 256 (picked by C, as a std::integral_constant
// for the kernel's template argument), caching `row_arrays` rows of C in shared memory when they fit.
template <class T, class Launch>
void launch_norm(const cuda& be, std::string_view op, index_t N, index_t C, int row_arrays, Launch launch) {
  check(N <= INT_MAX, op, ": ", N, " rows exceed the grid limit");
  const std::size_t bytes = static_cast<std::size_t>(row_arrays) * static_cast<std::size_t>(C) * sizeof(T);
  const bool cached = bytes <= norm_cache_limit;
  scoped_device on(be.device());
  if (norm_threads(C) == 128)
    launch(std::integral_constant<int, 128>{}, cached ? bytes : 0, cached);
  else
    launch(std::integral_constant<int, 256>{}, cached ? bytes : 0, cached);
  LWCL_CUDA_CHECK_LAUNCH(op.data());
}

// The per-channel parameter gradients of the norms (dweight, and layernorm's dbias): sums over the N
// rows, taken in parallel over rows. A grid of (tiles of 32 channels) x (slabs of rows): thread (x, y)
// of a block's 32 x 8 sums rows y, y + 8, ... of its slab for channel x, the 8 partial sums are added
// in shared memory in a fixed order, and one partial per (slab, channel) goes to a workspace; a second
// kernel adds the slabs in order and accumulates into the gradient. Deterministic, as the host's
// one-writer-per-channel functors are; only the order of the sum differs from theirs.
inline constexpr int param_rows = 8;

template <class T>
struct rmsnorm_param_term {
  static constexpr int K = 1;
  const T* dout;
  const T* inp;
  const T* rstd;
  index_t C;
  __device__ void operator()(index_t r, index_t c, compute_t<T> (&acc)[K]) const {
    using A = compute_t<T>;
    acc[0] += A(dout[r * C + c]) * A(inp[r * C + c]) * A(rstd[r]);
  }
};

template <class T>
struct layernorm_param_term {
  static constexpr int K = 2;
  const T* dout;
  const T* inp;
  const T* mean;
  const T* rstd;
  index_t C;
  __device__ void operator()(index_t r, index_t c, compute_t<T> (&acc)[K]) const {
    using A = compute_t<T>;
    const A dy = A(dout[r * C + c]);
    acc[0] += dy * (A(inp[r * C + c]) - A(mean[r])) * A(rstd[r]);
    acc[1] += dy;
  }
};

template <class T, class Term>
__global__ void __launch_bounds__(32 * param_rows) norm_param_partial_kernel(Term term, index_t N, index_t C, index_t slab_rows,
                                                                               compute_t<T>* partial) {
  using A = compute_t<T>;
  constexpr int K = Term::K;
  __shared__ A sh[K][param_rows][33];
  const index_t c = static_cast<index_t>(blockIdx.x) * 32 + threadIdx.x;
  const index_t slab = blockIdx.y;
  const index_t r0 = slab * slab_rows, r1 = r0 + slab_rows < N ? r0 + slab_rows : N;
  A acc[K] = {};
  if (c < C)
    for (index_t r = r0 + threadIdx.y; r < r1; r += param_rows) term(r, c, acc);
  for (int k = 0; k < K; ++k) sh[k][threadIdx.y][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y == 0 && c < C)
    for (int k = 0; k < K; ++k) {
      A v = A(0);
      for (int y = 0; y < param_rows; ++y) v += sh[k][y][threadIdx.x];
      partial[(slab * K + k) * C + c] = v;
    }
}

template <class T, int K>
__global__ void norm_param_finish_kernel(const compute_t<T>* partial, index_t slabs, index_t C, T* out0, T* out1) {
  using A = compute_t<T>;
  const index_t stride = static_cast<index_t>(blockDim.x) * gridDim.x;
  for (index_t c = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < C; c += stride) {
    T* outs[2] = {out0, out1};
    for (int k = 0; k < K; ++k) {
      if (!outs[k]) continue;
      A v = A(0);
      for (index_t s = 0; s < slabs; ++s) v += partial[(s * K + k) * C + c];
      outs[k][c] += v;
    }
  }
}

// Queues both kernels on be's stream; out1 may be null (no dbias), and is unused when K is 1.
template <class T, class Term>
void norm_param_gradients(const cuda& be, const Term& term, index_t N, index_t C, T* out0, T* out1) {
  using A = compute_t<T>;
  constexpr int K = Term::K;
  const index_t tiles = (C + 31) / 32;
  // Enough blocks to fill every SM about four times, each slab at least param_rows rows.
  index_t slabs = (4 * static_cast<index_t>(be.sm_count()) + tiles - 1) / tiles;
  const index_t max_slabs = (N + param_rows - 1) / param_rows;
  slabs = slabs < 1 ? 1 : (slabs > max_slabs ? max_slabs : slabs);
  const index_t slab_rows = (N + slabs - 1) / slabs;
  slabs = (N + slab_rows - 1) / slab_rows;
  const std::size_t bytes = static_cast<std::size_t>(slabs * K * C) * sizeof(A);
  A* partial = static_cast<A*>(be.allocate_bytes(bytes));
  norm_param_partial_kernel<T, Term><<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(slabs)), dim3(32, param_rows), 0,
                                       be.stream()>>>(term, N, C, slab_rows, partial);
  LWCL_CUDA_CHECK_LAUNCH("norm_param_partial_kernel launch");
  const index_t blocks = (C + 255) / 256;
  norm_param_finish_kernel<T, K><<<static_cast<unsigned>(blocks), 256, 0, be.stream()>>>(partial, slabs, C, out0, out1);
  LWCL_CUDA_CHECK_LAUNCH("norm_param_finish_kernel launch");
  be.deallocate_bytes(partial, bytes);
}

}  // namespace cuda_detail

// The fused layernorm forward with either statistics; backend::cuda::layernorm_forward runs the
// two-pass default. Arguments as ops::layernorm_forward has checked them (shapes, dtypes): a direct
// caller (the benchmark) must pass the same. f32, f64 and bf16. A template, so that the kernels are compiled
// only where it is called.
template <norm_stats Stats = norm_stats::two_pass>
void cuda_layernorm_forward(const cuda& be, const tensor& out, const tensor& mean, const tensor& rstd, const tensor& inp,
                            const tensor& weight, const tensor& bias, double eps) {
  constexpr std::string_view op = "cuda_layernorm_forward";
  const index_t C = inp.shape.last(), N = ops::rows_of(inp);
  if (N == 0) return;
  ops::dispatch_storage(op, inp.type, [&](auto t) {
    using T = decltype(t);
    const cuda_detail::layernorm_forward_args<T> a{out.ptr<T>(),    mean.ptr<T>(), rstd.ptr<T>(), inp.ptr<T>(),
                                                   weight.ptr<T>(), static_cast<const T*>(bias.data), C, static_cast<compute_t<T>>(eps),
                                                   false};
    cuda_detail::launch_norm<T>(be, op, N, C, 1, [&](auto threads, std::size_t smem, bool cached) {
      constexpr int Threads = decltype(threads)::value;
      auto args = a;
      args.cached = cached;
      cuda_detail::layernorm_forward_kernel<T, Threads, Stats><<<static_cast<unsigned>(N), Threads, smem, be.stream()>>>(args);
    });
  });
}

template <class Tensor>
void cuda::layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp, const Tensor& weight,
                             const Tensor& bias, double eps) const {
  cuda_layernorm_forward(*this, out, mean, rstd, inp, weight, bias, eps);
}

// The fused dinp kernel, then dweight and dbias summed over rows in parallel (norm_param_gradients;
// deterministic, as the host's ops::kernel::layernorm_backward_param).
template <class Tensor>
void cuda::layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                              const Tensor& inp, const Tensor& weight, const Tensor& mean, const Tensor& rstd) const {
  constexpr std::string_view op = "cuda_layernorm_backward";
  const index_t C = inp.shape.last(), N = ops::rows_of(inp);
  if (N == 0) return;
  ops::dispatch_storage(op, inp.type, [&](auto t) {
    using T = decltype(t);
    cuda_detail::launch_norm<T>(*this, op, N, C, 2, [&](auto threads, std::size_t smem, bool cached) {
      constexpr int Threads = decltype(threads)::value;
      const cuda_detail::layernorm_backward_args<T> a{dinp.template ptr<T>(), dout.template ptr<T>(),   inp.template ptr<T>(),
                                                      weight.template ptr<T>(), mean.template ptr<T>(), rstd.template ptr<T>(),
                                                      C,                        cached};
      cuda_detail::layernorm_backward_kernel<T, Threads><<<static_cast<unsigned>(N), Threads, smem, stream()>>>(a);
    });
    cuda_detail::norm_param_gradients<T>(
        *this, cuda_detail::layernorm_param_term<T>{dout.template ptr<T>(), inp.template ptr<T>(), mean.template ptr<T>(), rstd.template ptr<T>(), C},
        N, C, dweight.template ptr<T>(), static_cast<T*>(dbias.data));
  });
}

template <class Tensor>
void cuda::rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp, const Tensor& weight, double eps) const {
  constexpr std::string_view op = "cuda_rmsnorm_forward";
  const index_t C = inp.shape.last(), N = ops::rows_of(inp);
  if (N == 0) return;
  ops::dispatch_storage(op, inp.type, [&](auto t) {
    using T = decltype(t);
    cuda_detail::launch_norm<T>(*this, op, N, C, 1, [&](auto threads, std::size_t smem, bool cached) {
      constexpr int Threads = decltype(threads)::value;
      const cuda_detail::rmsnorm_forward_args<T> a{out.template ptr<T>(), rstd.template ptr<T>(), inp.template ptr<T>(),
                                                   weight.template ptr<T>(), C, static_cast<compute_t<T>>(eps), cached};
      cuda_detail::rmsnorm_forward_kernel<T, Threads><<<static_cast<unsigned>(N), Threads, smem, stream()>>>(a);
    });
  });
}

// The fused dinp kernel, then dweight summed over rows in parallel (norm_param_gradients).
template <class Tensor>
void cuda::rmsnorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dout, const Tensor& inp,
                            const Tensor& weight, const Tensor& rstd) const {
  constexpr std::string_view op = "cuda_rmsnorm_backward";
  const index_t C = inp.shape.last(), N = ops::rows_of(inp);
  if (N == 0) return;
  ops::dispatch_storage(op, inp.type, [&](auto t) {
    using T = decltype(t);
    cuda_detail::launch_norm<T>(*this, op, N, C, 2, [&](auto threads, std::size_t smem, bool cached) {
      constexpr int Threads = decltype(threads)::value;
      const cuda_detail::rmsnorm_backward_args<T> a{dinp.template ptr<T>(), dout.template ptr<T>(), inp.template ptr<T>(),
                                                    weight.template ptr<T>(), rstd.template ptr<T>(), C, cached};
      cuda_detail::rmsnorm_backward_kernel<T, Threads><<<static_cast<unsigned>(N), Threads, smem, stream()>>>(a);
    });
    cuda_detail::norm_param_gradients<T>(
        *this, cuda_detail::rmsnorm_param_term<T>{dout.template ptr<T>(), inp.template ptr<T>(), rstd.template ptr<T>(), C}, N, C,
        dweight.template ptr<T>(), static_cast<T*>(nullptr));
  });
}

}  // namespace lwcl::backend
