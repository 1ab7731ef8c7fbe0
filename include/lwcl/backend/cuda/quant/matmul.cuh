#pragma once
// The dequantising GEMM on backend::cuda: y = x W^T (+ bias), W an int8/int4 weight packed as
// quant/packed.hpp stores it and uploaded once (device_packed_weight), x and y f32 on the device.
// - Few input rows (decoding, M <= 8): one warp per 4 output rows. A lane reads 16 bytes of each row's
//   codes a step (an int4 tile of 32 columns, or 16 int8 codes), turns them into floats in registers,
//   and dots them with its slice of every input row, loaded once for the 4 rows; each chunk's sum is
//   multiplied by its group's scale. The weight's bytes cross the memory bus once and nothing but y is
//   written. Shapes the 16-byte reads cannot take (int8 rows not a multiple of 16 codes, x not 16-byte
//   aligned) go through a kernel reading one code at a time, a warp per row.
// - More rows: the weight is dequantised into f32 a slab of rows at a time (a tracked workspace of at
//   most `slab_bytes`, 32 MiB by default, or one row where a row is larger) and each slab multiplied by cuBLAS in exact fp32
//   (backend::cuda::gemm), then the bias is added.
// The slab path and the one-code kernel form each product from scale * (code - zero) in f32, as
// quant::dequantize does on the host; the vector kernel multiplies a chunk's sum by the scale instead.
// Either way the result equals dequantise-then-GEMM within the rounding of an f32 summation.

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "lwcl/backend/cuda/cuda.cuh"
#include "lwcl/backend/cuda/error.cuh"
#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/quant/packed.hpp"
#include "lwcl/tensor/tensor.hpp"

namespace lwcl::quant {

// A packed weight in device memory, byte for byte as on the host (codes, scales' bits, zero points).
// The host weight is validated before it is uploaded.
class device_packed_weight {
 public:
  device_packed_weight(backend::cuda& gpu, const packed_weight& p, std::string_view what = "device_packed_weight")
      : format_(p.format), rows_(p.rows), cols_(p.cols) {
    p.validate(what);
    codes_ = buffer<backend::cuda>(gpu, p.codes.size());
    scales_ = buffer<backend::cuda>(gpu, p.scales.size() * sizeof(std::uint16_t));
    gpu.from_host(codes_.data(), p.codes.data(), p.codes.size());
    gpu.from_host(scales_.data(), p.scales.data(), p.scales.size() * sizeof(std::uint16_t));
    if (!p.zeros.empty()) {
      zeros_ = buffer<backend::cuda>(gpu, p.zeros.size());
      gpu.from_host(zeros_.data(), p.zeros.data(), p.zeros.size());
    }
  }

  const weight_format& format() const { return format_; }
  index_t rows() const { return rows_; }
  index_t cols() const { return cols_; }
  index_t groups() const { return format_.groups(cols_); }
  index_t row_bytes() const { return cols_ * format_.bits / 8; }
  std::size_t bytes() const { return codes_.bytes() + scales_.bytes() + zeros_.bytes(); }
  const std::uint8_t* codes() const { return static_cast<const std::uint8_t*>(codes_.data()); }
  const std::uint16_t* scales() const { return static_cast<const std::uint16_t*>(scales_.data()); }
  const std::uint8_t* zeros() const { return static_cast<const std::uint8_t*>(zeros_.data()); }  // null: symmetric

 private:
  weight_format format_;
  index_t rows_, cols_;
  buffer<backend::cuda> codes_, scales_, zeros_;
};

namespace cuda_qmm {

// The decoding kernel's largest batch; above it the slab path runs.
inline constexpr index_t max_rows_per_warp = 8;
inline constexpr int warps_per_block = 4;

struct params {
  const std::uint8_t* codes;
  const std::uint16_t* scales;
  const std::uint8_t* zeros;  // null: symmetric, zero point `mid`
  const float* x;             // M x cols
  const float* bias;          // rows, or null
  float* y;                   // M x rows (row stride ldy)
  index_t rows, cols, row_bytes, groups, group_width, ldy;
  int M, bits, mid;
  bool bf16_scales;
};

__device__ __forceinline__ float scale_value(std::uint16_t b, bool bf16_scales) {
  return bf16_scales ? __uint_as_float(static_cast<unsigned>(b) << 16) : __half2float(__ushort_as_half(b));
}

__device__ __forceinline__ float weight_at(const params& p, index_t r, index_t c) {
  const std::uint8_t* row = p.codes + r * p.row_bytes;
  int code;
  if (p.bits == 8) {
    code = row[c];
  } else {
    const std::uint8_t b = row[(c / 32) * 16 + c % 16];
    code = (c % 32) >= 16 ? b >> 4 : b & 15;
  }
  const index_t k = r * p.groups + c / p.group_width;
  const int zero = p.zeros ? static_cast<int>(p.zeros[k]) : p.mid;
  return scale_value(p.scales[k], p.bf16_scales) * static_cast<float>(code - zero);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

__device__ __forceinline__ void write_row(const params& p, index_t r, float (&acc)[max_rows_per_warp]) {
  const int lane = static_cast<int>(threadIdx.x & 31);
#pragma unroll
  for (int m = 0; m < max_rows_per_warp; ++m)
    if (m < p.M) acc[m] = warp_sum(acc[m]);  // p.M is the same for the whole warp
  if (lane == 0) {
    const float b = p.bias ? p.bias[r] : 0.0f;
#pragma unroll
    for (int m = 0; m < max_rows_per_warp; ++m)
      if (m < p.M) p.y[m * p.ldy + r] = acc[m] + b;
  }
}

// The vector kernel's output rows per warp: each lane's slice of x, loaded once, serves this many rows.
inline constexpr int rows_per_warp = 4;

// 16 bytes of codes a lane a step for each of the warp's rows_per_warp rows: Chunk = 32 columns (int4,
// one tile) or 16 (int8). A chunk never straddles two groups (groups are whole rows or multiples of 32
// columns, and cols % Chunk == 0 here), so a row's chunk is the scale times the dot product of x with
// (code - zero). A code becomes a float exactly by placing it in the mantissa of 2^23 and subtracting
// 2^23 + zero (codes and zeros are below 2^8), without an integer-to-float conversion.
template <int Bits>
__global__ void qmv_vector_kernel(params p) {
  constexpr int chunk = Bits == 4 ? 32 : 16;
  constexpr int R = rows_per_warp;
  const index_t r0 = (static_cast<index_t>(blockIdx.x) * warps_per_block + threadIdx.x / 32) * R;
  if (r0 >= p.rows) return;
  const int lane = static_cast<int>(threadIdx.x & 31);
  float acc[R][max_rows_per_warp] = {};
  const index_t chunks = p.cols / chunk;
  for (index_t t = lane; t < chunks; t += 32) {
    const index_t c0 = t * chunk;
    uint4 v[R];
    float sc[R], off[R];
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const index_t r = r0 + i < p.rows ? r0 + i : p.rows - 1;  // past the matrix: read a real row, write nothing
      v[i] = __ldg(reinterpret_cast<const uint4*>(p.codes + r * p.row_bytes + t * 16));
      const index_t k = r * p.groups + c0 / p.group_width;
      sc[i] = scale_value(p.scales[k], p.bf16_scales);
      off[i] = 8388608.0f + static_cast<float>(p.zeros ? static_cast<int>(p.zeros[k]) : p.mid);
    }
#pragma unroll
    for (int m = 0; m < max_rows_per_warp; ++m) {
      if (m < p.M) {
        float xr[chunk];
        const float4* xp = reinterpret_cast<const float4*>(p.x + m * p.cols + c0);
#pragma unroll
        for (int q = 0; q < chunk / 4; ++q) {
          const float4 xv = __ldg(xp + q);
          xr[4 * q] = xv.x;
          xr[4 * q + 1] = xv.y;
          xr[4 * q + 2] = xv.z;
          xr[4 * q + 3] = xv.w;
        }
#pragma unroll
        for (int i = 0; i < R; ++i) {
          const unsigned words[4] = {v[i].x, v[i].y, v[i].z, v[i].w};
          float a = 0.0f;
#pragma unroll
          for (int j = 0; j < 16; ++j) {
            const unsigned b = (words[j / 4] >> (8 * (j % 4))) & 0xffu;
            if constexpr (Bits == 4) {
              a = fmaf(xr[j], __uint_as_float(0x4b000000u | (b & 15u)) - off[i], a);
              a = fmaf(xr[j + 16], __uint_as_float(0x4b000000u | (b >> 4)) - off[i], a);
            } else {
              a = fmaf(xr[j], __uint_as_float(0x4b000000u | b) - off[i], a);
            }
          }
          acc[i][m] = fmaf(sc[i], a, acc[i][m]);
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < R; ++i)
    if (r0 + i < p.rows) write_row(p, r0 + i, acc[i]);
}

// One code at a time: lane l takes columns l, l + 32, ... of its warp's row.
__global__ void qmv_scalar_kernel(params p) {
  const index_t r = static_cast<index_t>(blockIdx.x) * warps_per_block + threadIdx.x / 32;
  if (r >= p.rows) return;
  const int lane = static_cast<int>(threadIdx.x & 31);
  float acc[max_rows_per_warp] = {};
  for (index_t c = lane; c < p.cols; c += 32) {
    const float w = weight_at(p, r, c);
#pragma unroll
    for (int m = 0; m < max_rows_per_warp; ++m)
      if (m < p.M) acc[m] = fmaf(p.x[m * p.cols + c], w, acc[m]);
  }
  write_row(p, r, acc);
}

// out[i] = W[r0 + i / cols][i % cols] for i < n (one slab of rows, row by row).
__global__ void dequantize_kernel(params p, index_t r0, index_t n, float* out) {
  const index_t stride = static_cast<index_t>(blockDim.x) * gridDim.x;
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = weight_at(p, r0 + i / p.cols, i % p.cols);
}

__global__ void add_bias_kernel(float* y, const float* bias, index_t M, index_t rows) {
  const index_t stride = static_cast<index_t>(blockDim.x) * gridDim.x;
  for (index_t i = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < M * rows; i += stride)
    y[i] += bias[i % rows];
}

inline params make_params(const device_packed_weight& w, const float* x, index_t M, const float* bias, float* y) {
  params p{};
  p.codes = w.codes();
  p.scales = w.scales();
  p.zeros = w.zeros();
  p.x = x;
  p.bias = bias;
  p.y = y;
  p.rows = w.rows();
  p.cols = w.cols();
  p.row_bytes = w.row_bytes();
  p.groups = w.groups();
  p.group_width = w.format().group_width(w.cols());
  p.ldy = w.rows();
  p.M = static_cast<int>(M < max_rows_per_warp ? M : max_rows_per_warp);
  p.bits = w.format().bits;
  p.mid = w.format().mid();
  p.bf16_scales = w.format().scale_type == dtype::bf16;
  return p;
}

inline unsigned grid_for(index_t n, const backend::cuda& gpu) {
  const index_t blocks = (n + 255) / 256, cap = 8 * static_cast<index_t>(gpu.sm_count());
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > cap ? cap : blocks));
}

// Refuses a pointer the GPU cannot read (host memory, or null where an array is required).
inline void check_device_pointer(const backend::cuda& gpu, const void* ptr, const char* what, bool optional) {
  if (!ptr) {
    check(optional, "quant::dequant_matmul (cuda): ", what, " is null (expected a device array)");
    return;
  }
  cudaPointerAttributes a{};
  LWCL_CUDA_CHECK(cudaPointerGetAttributes(&a, ptr));
  check(a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged, "quant::dequant_matmul (cuda): ", what,
        " is not in device memory (expected a pointer from the cuda backend)");
  check(a.type == cudaMemoryTypeManaged || a.device == gpu.device(), "quant::dequant_matmul (cuda): ", what, " is on device ",
        a.device, ", the backend on device ", gpu.device());
}

inline bool aligned16(const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0; }

// The arguments dequant_matmul checks before it queues anything.
inline void check_arguments(const backend::cuda& gpu, const float* x, index_t M, const float* bias, const float* y) {
  check(M > 0, "quant::dequant_matmul (cuda): ", M, " input rows (expected at least 1)");
  check_device_pointer(gpu, x, "the input x", false);
  check_device_pointer(gpu, y, "the output y", false);
  check_device_pointer(gpu, bias, "the bias", true);
}

// dequant_matmul without the checks (the caller made them once; the latency table times this).
inline void queue_matmul(backend::cuda& gpu, const device_packed_weight& w, const float* x, index_t M, const float* bias,
                         float* y, std::size_t slab_bytes) {
  backend::cuda_detail::scoped_device on(gpu.device());
  const index_t rows = w.rows(), cols = w.cols();
  const params p = make_params(w, x, M, bias, y);
  if (M <= max_rows_per_warp) {
    const unsigned threads = 32 * warps_per_block;
    const bool vector = cols % (w.format().bits == 4 ? 32 : 16) == 0 && aligned16(x) && aligned16(w.codes());
    const index_t per_block = warps_per_block * (vector ? rows_per_warp : 1);
    const unsigned blocks = static_cast<unsigned>((rows + per_block - 1) / per_block);
    if (vector && w.format().bits == 4) qmv_vector_kernel<4><<<blocks, threads, 0, gpu.stream()>>>(p);
    else if (vector) qmv_vector_kernel<8><<<blocks, threads, 0, gpu.stream()>>>(p);
    else qmv_scalar_kernel<<<blocks, threads, 0, gpu.stream()>>>(p);
    LWCL_CUDA_CHECK_LAUNCH("quant::qmv kernel launch");
    return;
  }
  const std::size_t row_f32 = static_cast<std::size_t>(cols) * sizeof(float);
  index_t slab = static_cast<index_t>(slab_bytes / row_f32);
  slab = slab < 1 ? 1 : (slab > rows ? rows : slab);
  buffer<backend::cuda> ws(gpu, static_cast<std::size_t>(slab) * row_f32);
  float* wf = static_cast<float*>(ws.data());
  for (index_t r0 = 0; r0 < rows; r0 += slab) {
    const index_t n_r = rows - r0 < slab ? rows - r0 : slab;
    dequantize_kernel<<<grid_for(n_r * cols, gpu), 256, 0, gpu.stream()>>>(p, r0, n_r * cols, wf);
    LWCL_CUDA_CHECK_LAUNCH("quant::dequantize_kernel launch");
    // y[:, r0 : r0 + n_r] = x W[r0 : r0 + n_r]^T, the slab's columns of the row-major y (ldc = rows).
    gpu.gemm<float>(false, true, M, n_r, cols, 1.0f, x, cols, wf, cols, 0.0f, y + r0, rows);
  }
  if (bias) {
    add_bias_kernel<<<grid_for(M * rows, gpu), 256, 0, gpu.stream()>>>(y, bias, M, rows);
    LWCL_CUDA_CHECK_LAUNCH("quant::add_bias_kernel launch");
  }
}

}  // namespace cuda_qmm

// The f32 (rows x cols) matrix w stands for, written to `out` on the device (rows * cols floats), as
// quant::dequantize forms it on the host.
inline void dequantize(backend::cuda& gpu, const device_packed_weight& w, float* out) {
  cuda_qmm::check_device_pointer(gpu, out, "the output", false);
  backend::cuda_detail::scoped_device on(gpu.device());
  const cuda_qmm::params p = cuda_qmm::make_params(w, nullptr, 1, nullptr, nullptr);
  const index_t n = w.rows() * w.cols();
  cuda_qmm::dequantize_kernel<<<cuda_qmm::grid_for(n, gpu), 256, 0, gpu.stream()>>>(p, 0, n, out);
  LWCL_CUDA_CHECK_LAUNCH("quant::dequantize_kernel launch");
}

// y (M x rows) = x (M x cols) W^T + bias (rows, or null), every array on gpu's device. Up to
// cuda_qmm::max_rows_per_warp input rows read the packed codes directly; more go through f32 slabs of
// `slab_bytes` (at least one row) and cuBLAS. Queued on the backend's compute stream.
inline void dequant_matmul(backend::cuda& gpu, const device_packed_weight& w, const float* x, index_t M, const float* bias,
                           float* y, std::size_t slab_bytes = std::size_t(32) << 20) {
  cuda_qmm::check_arguments(gpu, x, M, bias, y);
  cuda_qmm::queue_matmul(gpu, w, x, M, bias, y, slab_bytes);
}

}  // namespace lwcl::quant
