#pragma once
// The tiled CUDA kernels behind ops::flash_attention_forward and ops::flash_attention_backward on
// backend::cuda (included by cuda.cuh). Forward: a block owns Br query rows of one (batch, head), a
// thread per row with its accumulator in registers, and streams keys and values through shared memory
// Bc rows at a time under the host functor's online softmax (ops::kernel::online_softmax_row).
// Backward: the same shape twice, a dq kernel (thread per query row, keys streamed) and a dk/dv kernel
// (thread per key row, the group's query rows streamed), each gradient element with one writer.

#include <cuda_runtime_api.h>

#include <climits>
#include <cstddef>
#include <string_view>
#include <type_traits>

#include "lwcl/backend/cuda/cuda.cuh"
#include "lwcl/backend/cuda/device.cuh"
#include "lwcl/backend/cuda/error.cuh"
#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/core/math.hpp"
#include "lwcl/ops/flash_attention.hpp"
#include "lwcl/tensor/tensor.hpp"

namespace lwcl::backend {

namespace cuda_detail {

// The largest head dimension the tiled kernel takes: the accumulator is a register array of DMax.
inline constexpr index_t flash_max_head_dim = 256;

template <class T>
struct flash_forward_args {
  T* out;
  T* lse;
  const T* q;
  const T* k;
  const T* v;
  ops::kernel::flash_dims d;
  T scale;
  bool causal;
  index_t row_tiles;  // ceil(T / Br) blocks per (batch, head)
};

// Shared memory: q tile transposed [D][Br] (thread t reads column t: consecutive banks, no conflicts;
// reused at the end to stage the output for coalesced stores), K and V tiles [Bc][D] (every thread
// reads the same element at once: a broadcast), and each thread's tile probabilities [Bc][Br], so that
// the P V loop runs over keys with only the D loop unrolled (unrolling both, DMax x Bc, made ptxas
// take minutes per kernel).
template <int Br, int Bc>
LWCL_HD constexpr std::size_t flash_forward_smem_elements(index_t D) {
  return static_cast<std::size_t>(Br * D + 2 * Bc * D + Bc * Br);
}

template <class T, int DMax, int Br, int Bc>
__global__ void __launch_bounds__(Br) flash_forward_kernel(flash_forward_args<T> a) {
  extern __shared__ __align__(16) unsigned char flash_smem[];
  const index_t D = a.d.D, L = a.d.T_len;
  T* q_s = reinterpret_cast<T*>(flash_smem);
  T* k_s = q_s + D * Br;
  T* v_s = k_s + Bc * D;
  T* p_s = v_s + Bc * D;

  const index_t tile = blockIdx.x % a.row_tiles, bh = blockIdx.x / a.row_tiles;
  const index_t h = bh % a.d.H, b = bh / a.d.H, g = h / a.d.group();
  const int tid = static_cast<int>(threadIdx.x);
  const index_t i0 = tile * Br, i = i0 + tid;
  const bool valid = i < L;

  // Coalesced along D in global memory; rows past T are zeros.
  for (index_t e = tid; e < Br * D; e += Br) {
    const index_t r = e / D, c = e % D;
    q_s[c * Br + r] = i0 + r < L ? a.q[a.d.q_row(b, i0 + r, h) + c] : T(0);
  }

  ops::kernel::online_softmax_row<T> sm;
  T acc[DMax];
#pragma unroll
  for (int c = 0; c < DMax; ++c) acc[c] = T(0);

  // Keys any row of the tile sees, and those this row sees.
  const index_t key_end = a.causal ? math::min<index_t>(L, i0 + Br) : L;
  const index_t my_end = !valid ? 0 : (a.causal ? i + 1 : L);
  for (index_t j0 = 0; j0 < key_end; j0 += Bc) {
    __syncthreads();  // q_s is complete, and every thread is done with the previous K/V tile
    for (index_t e = tid; e < Bc * D; e += Br) {
      const index_t r = e / D, c = e % D;
      const bool in = j0 + r < L;
      k_s[e] = in ? a.k[a.d.kv_row(b, j0 + r, g) + c] : T(0);
      v_s[e] = in ? a.v[a.d.kv_row(b, j0 + r, g) + c] : T(0);
    }
    __syncthreads();
    const int n = static_cast<int>(math::max<index_t>(0, math::min<index_t>(Bc, my_end - j0)));
    if (n > 0) {
      // Scores summed over D in the host functor's order, then scaled, as there.
      T s[Bc];
#pragma unroll
      for (int jj = 0; jj < Bc; ++jj) s[jj] = T(0);
      for (index_t c = 0; c < D; ++c) {
        const T qc = q_s[c * Br + tid];
#pragma unroll
        for (int jj = 0; jj < Bc; ++jj) s[jj] += qc * k_s[jj * D + c];
      }
#pragma unroll
      for (int jj = 0; jj < Bc; ++jj) s[jj] *= a.scale;
      const T alpha = sm.update(s, n);
#pragma unroll
      for (int jj = 0; jj < Bc; ++jj) p_s[jj * Br + tid] = s[jj];
      // Per element: rescale, then add the keys in order, as the host functor does.
#pragma unroll
      for (int c = 0; c < DMax; ++c)
        if (c < D) acc[c] *= alpha;
      for (int jj = 0; jj < n; ++jj) {
        const T p = p_s[jj * Br + tid];
#pragma unroll
        for (int c = 0; c < DMax; ++c)
          if (c < D) acc[c] += p * v_s[jj * D + c];
      }
    }
  }

  // Normalise into q_s (no longer needed), then store rows cooperatively, coalesced along D.
  __syncthreads();
  const T inv = valid ? T(1) / sm.l : T(0);
#pragma unroll
  for (int c = 0; c < DMax; ++c)
    if (c < D) q_s[c * Br + tid] = acc[c] * inv;
  if (valid) a.lse[bh * L + i] = sm.lse();
  __syncthreads();
  for (index_t e = tid; e < Br * D; e += Br) {
    const index_t r = e / D, c = e % D;
    if (i0 + r < L) a.out[a.d.q_row(b, i0 + r, h) + c] = q_s[c * Br + r];
  }
}

template <class T, int DMax, int Br, int Bc>
void launch_flash_forward(const cuda& be, const flash_forward_args<T>& a, std::string_view op) {
  const std::size_t smem = flash_forward_smem_elements<Br, Bc>(a.d.D) * sizeof(T);
  int optin = 0;
  LWCL_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, be.device()));
  check(smem <= static_cast<std::size_t>(optin), op, ": tiles of Br = ", Br, " query and Bc = ", Bc, " key rows at D = ", a.d.D,
        " need ", smem, " bytes of shared memory, the device allows ", optin, " per block");
  const index_t blocks = a.d.B * a.d.H * a.row_tiles;
  check(blocks <= INT_MAX, op, ": ", blocks, " blocks exceed the grid limit");
  auto* kernel = &flash_forward_kernel<T, DMax, Br, Bc>;
  // Above the default 48 KiB per block, shared memory must be requested per kernel.
  if (smem > 48 * 1024)
    LWCL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  kernel<<<static_cast<unsigned>(blocks), Br, smem, be.stream()>>>(a);
  LWCL_CUDA_CHECK_LAUNCH("flash_forward_kernel launch");
}

}  // namespace cuda_detail

// ops::flash_attention_forward on the GPU with tiles of Br query rows (threads per block) and Bc key
// rows; the arguments are those of the op. f32 runs the tiled kernel, with the accumulator sized for
// D <= 64, <= 128 or <= 256 (larger D is refused); f64, which is for reference checks, runs the host's
// row functor through for_each. The default tiles, 64 query rows (two warps) by 32 keys, fit shared
// memory up to D = 256 (136 KiB there) on sm_80 and sm_90. A template even at the defaults, so that
// the kernels are compiled only where it is called.
template <int Br = 64, int Bc = 32>
void cuda_flash_attention_forward(const cuda& be, const tensor& out, const tensor& lse, const tensor& q, const tensor& k,
                                  const tensor& v, bool causal) {
  static_assert(Br % 32 == 0 && Br <= 1024, "cuda_flash_attention_forward: Br is the block size, a multiple of 32");
  static_assert(Bc >= 1 && Bc <= 64, "cuda_flash_attention_forward: Bc key scores live in registers, keep Bc <= 64");
  constexpr std::string_view op = "cuda_flash_attention_forward";
  const ops::kernel::flash_dims d = ops::flash_detail::check_forward(op, out, lse, q, k, v);
  ops::dispatch_float(op, q.type, [&](auto t) {
    using T = decltype(t);
    const T scale = T(1) / math::sqrt(static_cast<T>(d.D));
    if constexpr (std::is_same_v<T, double>) {
      be.for_each(d.B * d.H * d.T_len,
                  ops::kernel::flash_attention_forward_row<T>{out.ptr<T>(), lse.ptr<T>(), q.ptr<T>(), k.ptr<T>(), v.ptr<T>(), d,
                                                              scale, causal},
                  4 * d.D * d.T_len);
    } else {
      check(d.D <= cuda_detail::flash_max_head_dim, op, ": head dimension D = ", d.D, " (q ", q.shape.str(), ") exceeds ",
            cuda_detail::flash_max_head_dim, ", the largest the tiled kernel supports");
      const cuda_detail::flash_forward_args<T> a{out.ptr<T>(), lse.ptr<T>(), q.ptr<T>(), k.ptr<T>(), v.ptr<T>(), d, scale, causal,
                                                 (d.T_len + Br - 1) / Br};
      cuda_detail::scoped_device on(be.device());
      if (d.D <= 64)
        cuda_detail::launch_flash_forward<T, 64, Br, Bc>(be, a, op);
      else if (d.D <= 128)
        cuda_detail::launch_flash_forward<T, 128, Br, Bc>(be, a, op);
      else
        cuda_detail::launch_flash_forward<T, 256, Br, Bc>(be, a, op);
    }
  });
}

template <class Tensor>
void cuda::flash_attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                                   bool causal) const {
  cuda_flash_attention_forward(*this, out, lse, q, k, v, causal);
}

namespace cuda_detail {

template <class T>
struct flash_backward_args {
  T* dq;
  T* dk;
  T* dv;
  T* delta;
  const T* dout;
  const T* q;
  const T* k;
  const T* v;
  const T* out;
  const T* lse;
  ops::kernel::flash_dims d;
  T scale;
  bool causal;
  index_t tiles;  // blocks per (batch, head) for dq, per (batch, kv head) for dk and dv
};

// Rows streamed per step by the backward kernels: keys for the dq kernel, query rows for the dk/dv
// kernel. Their scores (and dP) sit in register arrays of this size beside the DMax accumulator.
template <int DMax>
inline constexpr int flash_dq_key_tile = DMax <= 64 ? 32 : 16;
inline constexpr int flash_dkv_query_tile = 16;

// Copies the R rows of a tile (row r at src + r * ld, D elements; rows r >= n read as zeros) into shared
// memory, transposed [D][R] or as rows [R][D]. The block's threads split the elements so that global
// reads run along D (coalesced).
template <class T>
LWCL_DEVICE void flash_stage(T* dst, const T* src, index_t ld, index_t n, index_t D, int R, bool transposed, int tid,
                             int threads) {
  for (index_t e = tid; e < R * D; e += threads) {
    const index_t r = e / D, c = e % D;
    dst[transposed ? c * R + r : e] = r < n ? src[r * ld + c] : T(0);
  }
}
// The reverse for a transposed tile: rows r < n of src [D][R] to dst + r * ld.
template <class T>
LWCL_DEVICE void flash_unstage(T* dst, const T* src, index_t ld, index_t n, index_t D, int R, int tid, int threads) {
  for (index_t e = tid; e < R * D; e += threads) {
    const index_t r = e / D, c = e % D;
    if (r < n) dst[r * ld + c] = src[c * R + r];
  }
}

// dq kernel, shared memory: q and dout tiles transposed [D][Br] (thread t reads column t, no bank
// conflicts; the q tile first stages out for delta and the incoming dq, and last the outgoing dq), K and
// V tiles [Bc][D] (broadcast reads), and each thread's scale * dS for the tile [Bc][Br], so that the
// dq update runs over keys with only the D loop unrolled (as in the forward).
template <int Br, int Bc>
LWCL_HD constexpr std::size_t flash_dq_smem_elements(index_t D) {
  return static_cast<std::size_t>(2 * Br * D + 2 * Bc * D + Bc * Br);
}

// Block: Br query rows of one (batch, head), a thread per row. Writes delta_i = dout_i . out_i, then
// continues the host functor's sum dq_i += scale * dS_ij k_j over the keys in order, from dq's old value.
template <class T, int DMax, int Br, int Bc>
__global__ void __launch_bounds__(Br) flash_backward_dq_kernel(flash_backward_args<T> a) {
  extern __shared__ __align__(16) unsigned char flash_smem[];
  const index_t D = a.d.D, L = a.d.T_len;
  T* q_s = reinterpret_cast<T*>(flash_smem);
  T* g_s = q_s + D * Br;
  T* k_s = g_s + D * Br;
  T* v_s = k_s + Bc * D;
  T* w_s = v_s + Bc * D;

  // Under the causal mask later row tiles see more keys: they get the lower block indices, which start first.
  const index_t tile = a.tiles - 1 - blockIdx.x % a.tiles, bh = blockIdx.x / a.tiles;
  const index_t h = bh % a.d.H, b = bh / a.d.H, g = h / a.d.group();
  const int tid = static_cast<int>(threadIdx.x);
  const index_t i0 = tile * Br, i = i0 + tid, rows = math::min<index_t>(Br, L - i0);
  const bool valid = i < L;
  const index_t ld_q = a.d.H * D, ld_kv = a.d.KVH * D, row0 = a.d.q_row(b, i0, h);

  flash_stage(g_s, a.dout + row0, ld_q, rows, D, Br, true, tid, Br);
  flash_stage(q_s, a.out + row0, ld_q, rows, D, Br, true, tid, Br);
  __syncthreads();
  T di = 0;
  for (index_t c = 0; c < D; ++c) di += g_s[c * Br + tid] * q_s[c * Br + tid];
  if (valid) a.delta[bh * L + i] = di;
  const T li = valid ? a.lse[bh * L + i] : T(0);
  __syncthreads();
  flash_stage(q_s, a.dq + row0, ld_q, rows, D, Br, true, tid, Br);
  __syncthreads();
  T acc[DMax];
#pragma unroll
  for (int c = 0; c < DMax; ++c) acc[c] = c < D ? q_s[c * Br + tid] : T(0);
  __syncthreads();
  flash_stage(q_s, a.q + row0, ld_q, rows, D, Br, true, tid, Br);

  const index_t key_end = a.causal ? math::min<index_t>(L, i0 + Br) : L;
  const index_t my_end = !valid ? 0 : (a.causal ? i + 1 : L);
  for (index_t j0 = 0; j0 < key_end; j0 += Bc) {
    __syncthreads();  // q_s is complete, and every thread is done with the previous K/V tile
    const index_t keys = math::min<index_t>(Bc, L - j0);
    flash_stage(k_s, a.k + a.d.kv_row(b, j0, g), ld_kv, keys, D, Bc, false, tid, Br);
    flash_stage(v_s, a.v + a.d.kv_row(b, j0, g), ld_kv, keys, D, Bc, false, tid, Br);
    __syncthreads();
    const int n = static_cast<int>(math::max<index_t>(0, math::min<index_t>(Bc, my_end - j0)));
    if (n > 0) {
      // Scores and dP summed over D in the host functor's order.
      T s[Bc], dp[Bc];
#pragma unroll
      for (int jj = 0; jj < Bc; ++jj) s[jj] = dp[jj] = T(0);
      for (index_t c = 0; c < D; ++c) {
        const T qc = q_s[c * Br + tid], gc = g_s[c * Br + tid];
#pragma unroll
        for (int jj = 0; jj < Bc; ++jj) {
          s[jj] += qc * k_s[jj * D + c];
          dp[jj] += gc * v_s[jj * D + c];
        }
      }
#pragma unroll
      for (int jj = 0; jj < Bc; ++jj)
        w_s[jj * Br + tid] =
            jj < n ? a.scale * ops::kernel::flash_score_grad(ops::kernel::flash_probability(s[jj], a.scale, li), dp[jj], di)
                   : T(0);
      for (int jj = 0; jj < n; ++jj) {
        const T w = w_s[jj * Br + tid];
#pragma unroll
        for (int c = 0; c < DMax; ++c)
          if (c < D) acc[c] += w * k_s[jj * D + c];
      }
    }
  }

  __syncthreads();
#pragma unroll
  for (int c = 0; c < DMax; ++c)
    if (c < D) q_s[c * Br + tid] = acc[c];
  __syncthreads();
  flash_unstage(a.dq + row0, q_s, ld_q, rows, D, Br, tid, Br);
}

// dk/dv kernel, shared memory: K and V tiles transposed [D][Bc] (thread t reads column t; they first
// stage the incoming dk and dv, and last the outgoing ones), q and dout tiles [Br][D] (broadcast reads),
// P and scale * dS per (query, thread) [Br][Bc], and the tile's lse and delta [Br].
template <int Bc, int Br>
LWCL_HD constexpr std::size_t flash_dkv_smem_elements(index_t D) {
  return static_cast<std::size_t>(2 * D * Bc + 2 * Br * D + 2 * Br * Bc + 2 * Br);
}

// Block: Bc key rows of one (batch, kv head), a thread per key. Continues the host functor's sums
// dv_j += P_ij dout_i and dk_j += scale * dS_ij q_i over the group's query heads and, per head, the
// query rows in order, from the old values. Reads delta, so it runs after the dq kernel. Dk and Dv say
// which gradients it forms: both at once need 2 x DMax accumulator registers, so past D = 64 each gets
// its own pass (recomputing P, and for dk dP).
template <class T, int DMax, int Bc, int Br, bool Dk, bool Dv>
__global__ void __launch_bounds__(Bc) flash_backward_dkv_kernel(flash_backward_args<T> a) {
  static_assert(Dk || Dv, "flash_backward_dkv_kernel: a pass forms dk, dv or both");
  extern __shared__ __align__(16) unsigned char flash_smem[];
  const index_t D = a.d.D, L = a.d.T_len;
  T* k_s = reinterpret_cast<T*>(flash_smem);
  T* v_s = k_s + D * Bc;
  T* q_s = v_s + D * Bc;
  T* g_s = q_s + Br * D;
  T* p_s = g_s + Br * D;
  T* w_s = p_s + Br * Bc;
  T* lse_s = w_s + Br * Bc;
  T* delta_s = lse_s + Br;

  const index_t tile = blockIdx.x % a.tiles, bg = blockIdx.x / a.tiles;
  const index_t g = bg % a.d.KVH, b = bg / a.d.KVH, group = a.d.group();
  const int tid = static_cast<int>(threadIdx.x);
  const index_t j0 = tile * Bc, j = j0 + tid, keys = math::min<index_t>(Bc, L - j0);
  const bool valid = j < L;
  const index_t ld_q = a.d.H * D, ld_kv = a.d.KVH * D, row0 = a.d.kv_row(b, j0, g);

  constexpr int NK = Dk ? DMax : 1, NV = Dv ? DMax : 1;
  T dk[NK], dv[NV];
  if constexpr (Dk) flash_stage(k_s, a.dk + row0, ld_kv, keys, D, Bc, true, tid, Bc);
  if constexpr (Dv) flash_stage(v_s, a.dv + row0, ld_kv, keys, D, Bc, true, tid, Bc);
  __syncthreads();
  if constexpr (Dk) {
#pragma unroll
    for (int c = 0; c < DMax; ++c) dk[c] = c < D ? k_s[c * Bc + tid] : T(0);
  }
  if constexpr (Dv) {
#pragma unroll
    for (int c = 0; c < DMax; ++c) dv[c] = c < D ? v_s[c * Bc + tid] : T(0);
  }
  __syncthreads();
  flash_stage(k_s, a.k + row0, ld_kv, keys, D, Bc, true, tid, Bc);
  if constexpr (Dk) flash_stage(v_s, a.v + row0, ld_kv, keys, D, Bc, true, tid, Bc);  // dP needs v

  // Query tiles wholly above the block's first key are masked under causality: start at the tile holding row j0.
  const index_t first = a.causal ? j0 / Br * Br : 0;
  for (index_t h = g * group; h < (g + 1) * group; ++h) {
    const index_t bh = b * a.d.H + h;
    for (index_t i0 = first; i0 < L; i0 += Br) {
      const index_t rows = math::min<index_t>(Br, L - i0);
      __syncthreads();  // the K/V tiles are complete, and every thread is done with the previous query tile
      flash_stage(q_s, a.q + a.d.q_row(b, i0, h), ld_q, rows, D, Br, false, tid, Bc);
      flash_stage(g_s, a.dout + a.d.q_row(b, i0, h), ld_q, rows, D, Br, false, tid, Bc);
      for (int r = tid; r < Br; r += Bc) {
        lse_s[r] = r < rows ? a.lse[bh * L + i0 + r] : T(0);
        delta_s[r] = r < rows ? a.delta[bh * L + i0 + r] : T(0);
      }
      __syncthreads();
      // The rows this key sees: i >= j under the mask, and i < T.
      const int lo = a.causal ? static_cast<int>(math::max<index_t>(0, math::min<index_t>(Br, j - i0))) : 0;
      const int hi = valid ? static_cast<int>(rows) : 0;
      if (lo < hi) {
        T s[Br], dp[Br];
#pragma unroll
        for (int ii = 0; ii < Br; ++ii) s[ii] = dp[ii] = T(0);
        for (index_t c = 0; c < D; ++c) {
          const T kc = k_s[c * Bc + tid];
          const T vc = Dk ? v_s[c * Bc + tid] : T(0);
#pragma unroll
          for (int ii = 0; ii < Br; ++ii) {
            s[ii] += q_s[ii * D + c] * kc;
            if constexpr (Dk) dp[ii] += g_s[ii * D + c] * vc;
          }
        }
#pragma unroll
        for (int ii = 0; ii < Br; ++ii) {
          const bool on = ii >= lo && ii < hi;
          const T p = on ? ops::kernel::flash_probability(s[ii], a.scale, lse_s[ii]) : T(0);
          if constexpr (Dv) p_s[ii * Bc + tid] = p;
          if constexpr (Dk) w_s[ii * Bc + tid] = on ? a.scale * ops::kernel::flash_score_grad(p, dp[ii], delta_s[ii]) : T(0);
        }
        for (int ii = lo; ii < hi; ++ii) {
          if constexpr (Dv) {
            const T p = p_s[ii * Bc + tid];
#pragma unroll
            for (int c = 0; c < DMax; ++c)
              if (c < D) dv[c] += p * g_s[ii * D + c];
          }
          if constexpr (Dk) {
            const T w = w_s[ii * Bc + tid];
#pragma unroll
            for (int c = 0; c < DMax; ++c)
              if (c < D) dk[c] += w * q_s[ii * D + c];
          }
        }
      }
    }
  }

  __syncthreads();
  if constexpr (Dk) {
#pragma unroll
    for (int c = 0; c < DMax; ++c)
      if (c < D) k_s[c * Bc + tid] = dk[c];
  }
  if constexpr (Dv) {
#pragma unroll
    for (int c = 0; c < DMax; ++c)
      if (c < D) v_s[c * Bc + tid] = dv[c];
  }
  __syncthreads();
  if constexpr (Dk) flash_unstage(a.dk + row0, k_s, ld_kv, keys, D, Bc, tid, Bc);
  if constexpr (Dv) flash_unstage(a.dv + row0, v_s, ld_kv, keys, D, Bc, tid, Bc);
}

// Checks that smem bytes fit the device's per-block opt-in limit, and raises the kernel's limit above
// the default 48 KiB when needed.
template <class Kernel>
void flash_prepare_smem(const cuda& be, Kernel* kernel, std::size_t smem, std::string_view op, std::string_view what,
                        index_t rows, index_t D) {
  int optin = 0;
  LWCL_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, be.device()));
  check(smem <= static_cast<std::size_t>(optin), op, ": the ", what, " kernel's tiles of ", rows, " rows at D = ", D, " need ",
        smem, " bytes of shared memory, the device allows ", optin, " per block");
  if (smem > 48 * 1024)
    LWCL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
}

template <class T, int DMax, int Br, int Bc>
void launch_flash_backward(const cuda& be, flash_backward_args<T> a, std::string_view op) {
  const index_t D = a.d.D;
  constexpr int Bk = flash_dq_key_tile<DMax>, Bq = flash_dkv_query_tile;
  a.tiles = (a.d.T_len + Br - 1) / Br;
  const index_t dq_blocks = a.d.B * a.d.H * a.tiles;
  check(dq_blocks <= INT_MAX, op, ": ", dq_blocks, " blocks exceed the grid limit");
  const std::size_t dq_smem = flash_dq_smem_elements<Br, Bk>(D) * sizeof(T);
  auto* dq_kernel = &flash_backward_dq_kernel<T, DMax, Br, Bk>;
  flash_prepare_smem(be, dq_kernel, dq_smem, op, "dq", Br, D);
  dq_kernel<<<static_cast<unsigned>(dq_blocks), Br, dq_smem, be.stream()>>>(a);
  LWCL_CUDA_CHECK_LAUNCH("flash_backward_dq_kernel launch");

  a.tiles = (a.d.T_len + Bc - 1) / Bc;
  const index_t kv_blocks = a.d.B * a.d.KVH * a.tiles;
  check(kv_blocks <= INT_MAX, op, ": ", kv_blocks, " blocks exceed the grid limit");
  const std::size_t kv_smem = flash_dkv_smem_elements<Bc, Bq>(D) * sizeof(T);
  const auto run = [&](auto* kernel) {
    flash_prepare_smem(be, kernel, kv_smem, op, "dk/dv", Bc, D);
    kernel<<<static_cast<unsigned>(kv_blocks), Bc, kv_smem, be.stream()>>>(a);
    LWCL_CUDA_CHECK_LAUNCH("flash_backward_dkv_kernel launch");
  };
  if constexpr (DMax <= 64) {
    run(&flash_backward_dkv_kernel<T, DMax, Bc, Bq, true, true>);
  } else {
    run(&flash_backward_dkv_kernel<T, DMax, Bc, Bq, false, true>);
    run(&flash_backward_dkv_kernel<T, DMax, Bc, Bq, true, false>);
  }
}

}  // namespace cuda_detail

// ops::flash_attention_backward on the GPU; the arguments are those of the op, and like its row functors
// it accumulates into dq, dk and dv and overwrites delta. f32 runs the tiled kernels, deterministic and
// without atomics: first the dq kernel (Br query rows per block, a thread per row, keys streamed through
// shared memory; it also writes delta), then the dk/dv kernel (Bc keys per block, a thread per key, the
// query rows of every head in the key's group streamed through shared memory, tiles above the mask
// skipped). Accumulators are sized for D <= 64, <= 128 or <= 256 (larger D is refused); past D = 64 dk
// and dv take separate passes, and at D > 128 both kernels run half the rows per block, so that shared
// memory stays within sm_80's 163 KiB. f64, which is for reference checks, runs the host's row functors
// through for_each. A template even at the defaults, so that the kernels are compiled only where it is
// called.
template <int Br = 64, int Bc = 64>
void cuda_flash_attention_backward(const cuda& be, const tensor& dq, const tensor& dk, const tensor& dv, const tensor& delta,
                                   const tensor& dout, const tensor& q, const tensor& k, const tensor& v, const tensor& out,
                                   const tensor& lse, bool causal) {
  static_assert(Br % 64 == 0 && Br <= 1024, "cuda_flash_attention_backward: Br is the dq block size, a multiple of 64");
  static_assert(Bc % 64 == 0 && Bc <= 1024, "cuda_flash_attention_backward: Bc is the dk/dv block size, a multiple of 64");
  constexpr std::string_view op = "cuda_flash_attention_backward";
  const ops::kernel::flash_dims d = ops::flash_detail::check_backward(op, dq, dk, dv, delta, dout, q, k, v, out, lse);
  ops::dispatch_float(op, q.type, [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, double>) {
      ops::flash_detail::backward_rows<T>(be, dq, dk, dv, delta, dout, q, k, v, out, lse, d, causal);
    } else {
      check(d.D <= cuda_detail::flash_max_head_dim, op, ": head dimension D = ", d.D, " (q ", q.shape.str(), ") exceeds ",
            cuda_detail::flash_max_head_dim, ", the largest the tiled kernels support");
      const T scale = T(1) / math::sqrt(static_cast<T>(d.D));
      const cuda_detail::flash_backward_args<T> a{dq.ptr<T>(), dk.ptr<T>(), dv.ptr<T>(), delta.ptr<T>(), dout.ptr<T>(),
                                                  q.ptr<T>(),  k.ptr<T>(),  v.ptr<T>(),  out.ptr<T>(),   lse.ptr<T>(),
                                                  d,           scale,       causal,      0};
      cuda_detail::scoped_device on(be.device());
      if (d.D <= 64)
        cuda_detail::launch_flash_backward<T, 64, Br, Bc>(be, a, op);
      else if (d.D <= 128)
        cuda_detail::launch_flash_backward<T, 128, Br, Bc>(be, a, op);
      else
        cuda_detail::launch_flash_backward<T, 256, Br / 2, Bc / 2>(be, a, op);
    }
  });
}

template <class Tensor>
void cuda::flash_attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& delta,
                                    const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                    const Tensor& lse, bool causal) const {
  cuda_flash_attention_backward(*this, dq, dk, dv, delta, dout, q, k, v, out, lse, causal);
}

}  // namespace lwcl::backend
