#pragma once
// The tiled CUDA kernel behind ops::flash_attention_forward on backend::cuda (included by cuda.cuh):
// a block owns Br query rows of one (batch, head), a thread per row with its accumulator in registers,
// and streams keys and values through shared memory Bc rows at a time under the host functor's online
// softmax (ops::kernel::online_softmax_row).

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

}  // namespace lwcl::backend
