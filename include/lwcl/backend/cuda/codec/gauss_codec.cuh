#pragma once
// gauss_codec's payload made and read on backend::cuda, device memory in and out, byte for byte the
// host codec's (codec/gauss_codec.hpp, fit::rms): one kernel sums each block's squares in the host's
// order (8 threads a block, exact squares, so the same float sum) and picks its table; one thread per
// lane counts its code bits, one per block settles its mode and directory entry, a CUB scan places the
// blocks, and then one thread per lane writes its stream while the planes are written element-wise
// (coalesced). Decoding reads the header and directory back to the host for the host codec's own
// checks, then one thread per lane runs the host's lane decoder (the same functions) into an exponent
// plane, and an element-wise kernel joins it with the planes.

#include <cuda_runtime_api.h>

#include <cub/device/device_scan.cuh>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "lwcl/backend/cuda/cuda.cuh"
#include "lwcl/backend/cuda/error.cuh"
#include "lwcl/codec/gauss_codec.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/tensor/tensor.hpp"

namespace lwcl::codec {

namespace cuda_gauss {

using gauss::layout;

inline constexpr unsigned threads_per_block = 128;

inline unsigned grid_for(std::size_t items) {
  return static_cast<unsigned>((items + threads_per_block - 1) / threads_per_block);
}

template <class F>
__device__ typename F::bits_t element(const void* raw, std::size_t i) {
  return static_cast<const typename F::bits_t*>(raw)[i];
}

template <class F>
__device__ float square(const void* raw, std::size_t i) {
  constexpr std::uint32_t emax = (1u << F::exponent_bits) - 1;
  const auto b = element<F>(raw, i);
  const std::uint32_t e = F::exponent(b);
  const std::uint32_t u = ((e + 127u - F::bias) << 23) | (F::mantissa7(b) << 16);
  const float m = (e != 0 && e != emax) ? __uint_as_float(u) : 0.0f;
  return __fmul_rn(m, m);
}

// Eight threads per block: thread j sums elements j, j + 8, ... of the block's whole groups of 8, thread
// 0 then its tail, and thread 0 adds the eight sums in order, as the host's block_statistic does.
template <class F>
__global__ void statistic_kernel(const void* raw, std::size_t n, std::size_t blocks, int* t) {
  const std::size_t g = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t b = g / 8;
  const unsigned j = static_cast<unsigned>(g % 8);
  float part = 0;
  std::size_t m = 0;
  if (b < blocks) {
    const std::size_t first = b * layout::block;
    m = n - first < layout::block ? n - first : layout::block;
    const std::size_t whole = m / 8 * 8;
    for (std::size_t i = j; i < whole; i += 8) part = __fadd_rn(part, square<F>(raw, first + i));
    if (j == 0)
      for (std::size_t i = whole; i < m; ++i) part = __fadd_rn(part, square<F>(raw, first + i));
  }
  // The eight threads of a block are consecutive lanes of one warp (8 divides 32).
  float parts[8];
  for (int k = 0; k < 8; ++k) parts[k] = __shfl_sync(0xffffffffu, part, static_cast<int>((threadIdx.x & ~7u) + k));
  if (b < blocks && j == 0) {
    float sum = 0;
    for (int k = 0; k < 8; ++k) sum = __fadd_rn(sum, parts[k]);
    t[b] = gauss::detail::statistic_of<F::exponent_bits, F::bias>(sum, m);
  }
}

// A lane's code for exponent e under table `codes` (a class_table's codes) at base exponent `base`.
template <int ExponentBits>
__device__ void code_of(const gauss::code* codes, int base, std::uint32_t e, std::uint32_t& value, std::uint32_t& length) {
  const int r = static_cast<int>(e) - base + gauss::below;
  if (r >= 0 && r < gauss::window) {
    value = codes[r].bits;
    length = codes[r].length;
  } else {
    const gauss::code esc = codes[gauss::escape];
    value = esc.bits | (e << esc.length);
    length = esc.length + ExponentBits;
  }
}

// One thread per lane: the bits its codes take.
template <class F>
__global__ void length_kernel(const void* raw, std::size_t n, std::size_t lanes, const int* t, const gauss::code* codes,
                              std::uint64_t* lane_bits) {
  const std::size_t g = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= lanes) return;
  const std::size_t b = g / layout::lanes, first = b * layout::block + (g % layout::lanes) * layout::lane;
  const std::size_t m = gauss::detail::lane_size(n - b * layout::block, static_cast<int>(g % layout::lanes));
  const int tb = t[b];
  const gauss::code* tab = codes + static_cast<std::size_t>(gauss::table_of(tb, gauss::law::normal)) * gauss::alphabet;
  std::uint64_t bits = 0;
  for (std::size_t i = 0; i < m; ++i) {
    std::uint32_t value, length;
    code_of<F::exponent_bits>(tab, tb >> 2, F::exponent(element<F>(raw, first + i)), value, length);
    bits += length;
  }
  lane_bits[g] = bits;
}

// One thread per block: coded when no lane is longer than its exponents raw and the block is shorter
// (the host's rule); the directory entry (info, 4 lane bytes) and the block's stream bytes.
template <class F>
__global__ void directory_kernel(std::size_t n, std::size_t blocks, const int* t, const std::uint64_t* lane_bits,
                                 std::uint16_t* dir, std::uint64_t* block_bytes) {
  const std::size_t b = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= blocks) return;
  constexpr int eb = F::exponent_bits;
  const std::size_t here = n - b * layout::block;
  std::uint64_t coded[layout::lanes], cap[layout::lanes], coded_total = 0, raw_total = 0;
  bool ok = true;
  for (std::size_t k = 0; k < layout::lanes; ++k) {
    const std::size_t m = gauss::detail::lane_size(here, static_cast<int>(k));
    cap[k] = (m * eb + 7) / 8;
    coded[k] = (lane_bits[b * layout::lanes + k] + 7) / 8;
    ok = ok && coded[k] <= cap[k];
    coded_total += coded[k];
    raw_total += cap[k];
  }
  const bool use_code = ok && coded_total < raw_total;
  std::uint16_t* e = dir + b * (layout::entry / 2);
  e[0] = static_cast<std::uint16_t>(use_code ? (t[b] | (layout::mode_coded << 12)) : (layout::mode_raw << 12));
  std::uint64_t total = 0;
  for (std::size_t k = 0; k < layout::lanes; ++k) {
    const std::uint64_t bytes = use_code ? coded[k] : cap[k];
    e[1 + k] = static_cast<std::uint16_t>(bytes);
    total += bytes;
  }
  block_bytes[b] = total;
}

// Sign and mantissa planes, element-wise (f16: a thread per group of 8 for the 3-bit plane).
template <class F>
__global__ void planes_kernel(const void* raw, std::size_t n, std::uint8_t* planes) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if constexpr (F::kind == gauss::f16_format::kind) {
    const std::size_t g = i * 8;
    if (g >= n) return;
    std::uint32_t packed = 0;
    for (std::size_t k = 0; k < 8 && g + k < n; ++k) {
      const std::uint32_t b = element<F>(raw, g + k);
      planes[g + k] = static_cast<std::uint8_t>(b & 0xffu);
      packed |= (((b >> 13) & 4u) | ((b >> 8) & 3u)) << (3 * k);
    }
    for (std::size_t k = 0; k < 3; ++k) planes[n + i * 3 + k] = static_cast<std::uint8_t>((packed >> (8 * k)) & 0xffu);
  } else {
    if (i >= n) return;
    const std::uint32_t b = element<F>(raw, i);
    if constexpr (F::kind == gauss::bf16_format::kind) {
      planes[i] = static_cast<std::uint8_t>(((b >> 8) & 0x80u) | (b & 0x7fu));
    } else {
      planes[i] = static_cast<std::uint8_t>(((b >> 24) & 0x80u) | ((b >> 16) & 0x7fu));
      planes[n + 2 * i] = static_cast<std::uint8_t>(b & 0xffu);
      planes[n + 2 * i + 1] = static_cast<std::uint8_t>((b >> 8) & 0xffu);
    }
  }
}

// One thread per lane: its stream, at the block's offset plus the lanes before it, byte by byte (a
// lane's bytes are its own, so no two threads write one byte).
template <class F>
__global__ void stream_kernel(const void* raw, std::size_t n, std::size_t lanes, const int* t, const std::uint16_t* dir,
                              const std::uint64_t* block_end, const gauss::code* codes, std::uint8_t* streams) {
  const std::size_t g = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= lanes) return;
  constexpr int eb = F::exponent_bits;
  const std::size_t b = g / layout::lanes, k = g % layout::lanes;
  const std::uint16_t* e = dir + b * (layout::entry / 2);
  std::uint64_t at = b ? block_end[b - 1] : 0;
  for (std::size_t j = 0; j < k; ++j) at += e[1 + j];
  const std::size_t first = b * layout::block + k * layout::lane;
  const std::size_t m = gauss::detail::lane_size(n - b * layout::block, static_cast<int>(k));
  const bool coded = (e[0] >> 12) == layout::mode_coded;
  const int tb = t[b];
  const gauss::code* tab = codes + static_cast<std::size_t>(gauss::table_of(tb, gauss::law::normal)) * gauss::alphabet;
  std::uint8_t* out = streams + at;
  std::uint64_t acc = 0;
  unsigned bits = 0;
  std::size_t pos = 0;
  for (std::size_t i = 0; i < m; ++i) {
    const std::uint32_t x = F::exponent(element<F>(raw, first + i));
    std::uint32_t value = x, length = eb;
    if (coded) code_of<eb>(tab, tb >> 2, x, value, length);
    acc |= static_cast<std::uint64_t>(value) << bits;
    bits += length;
    while (bits >= 8) {
      out[pos++] = static_cast<std::uint8_t>(acc & 0xffu);
      acc >>= 8;
      bits -= 8;
    }
  }
  if (bits) out[pos] = static_cast<std::uint8_t>(acc & 0xffu);
}

// One thread per lane: the host's lane decoder into the exponent plane; the first bad block's index
// into *bad.
template <class F>
__global__ void decode_kernel(const std::uint8_t* payload, std::size_t n, std::size_t lanes, const std::uint16_t* dir,
                              const std::uint64_t* block_start, const gauss::entry* multi, const std::uint16_t* single,
                              std::uint8_t* exponents, unsigned long long* bad) {
  const std::size_t g = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (g >= lanes) return;
  constexpr int eb = F::exponent_bits;
  constexpr std::uint64_t emask = (1u << eb) - 1;
  const std::size_t b = g / layout::lanes, k = g % layout::lanes;
  const std::uint16_t* e = dir + b * (layout::entry / 2);
  std::uint64_t at = block_start[b];
  for (std::size_t j = 0; j < k; ++j) at += e[1 + j];
  const std::size_t bytes = e[1 + k];
  const std::size_t m = gauss::detail::lane_size(n - b * layout::block, static_cast<int>(k));
  const auto* stream = reinterpret_cast<const std::byte*>(payload + at);
  std::uint8_t* out = exponents + b * layout::block + k * layout::lane;
  const std::uint16_t info = e[0];
  bool ok = true;
  if ((info >> 12) == layout::mode_raw) {
    ok = bytes == (m * eb + 7) / 8;
    for (std::size_t i = 0; ok && i < m; ++i) {
      const std::size_t bit = i * eb;
      out[i] = static_cast<std::uint8_t>((gauss::detail::load64_tail(stream + bit / 8, stream + bytes) >> (bit & 7)) & emask);
    }
  } else {
    const int t = info & 0x3ff;
    const std::size_t table =
        static_cast<std::size_t>(gauss::table_of(t, static_cast<gauss::law>((info >> 10) & 1)));
    // Decodes into a private copy: the lane decoder's stores run 8 bytes past a symbol, which here
    // would reach the next lane, decoded by another thread.
    std::uint8_t mine[layout::lane + 16];
    const gauss::detail::lane_decoder<eb> dec(multi + table * (std::size_t{1} << gauss::table_bits),
                                              single + table * (std::size_t{1} << gauss::table_bits),
                                              static_cast<std::uint8_t>((t >> 2) - gauss::below));
    std::size_t pos = 0, i = 0;
    while (i + gauss::detail::step_room <= m && pos / 8 + gauss::detail::step_bytes <= bytes) dec.step(stream, pos, mine, i);
    ok = dec.finish(stream, bytes, pos, m, mine, i);
    for (std::size_t j = 0; ok && j < m; ++j) out[j] = mine[j];
  }
  if (!ok) atomicMin(bad, static_cast<unsigned long long>(b));
}

// Element-wise: exponent plane + planes -> elements.
template <class F>
__global__ void join_kernel(const std::uint8_t* exponents, const std::uint8_t* planes, std::size_t n, void* raw) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const std::uint32_t e = exponents[i], p = planes[i];
  if constexpr (F::kind == gauss::bf16_format::kind) {
    static_cast<std::uint16_t*>(raw)[i] = static_cast<std::uint16_t>(((p & 0x80u) << 8) | (e << 7) | (p & 0x7fu));
  } else if constexpr (F::kind == gauss::f32_format::kind) {
    const std::uint32_t low = planes[n + 2 * i] | (static_cast<std::uint32_t>(planes[n + 2 * i + 1]) << 8);
    static_cast<std::uint32_t*>(raw)[i] = ((p & 0x80u) << 24) | (e << 23) | ((p & 0x7fu) << 16) | low;
  } else {
    const std::uint8_t* three = planes + n + i / 8 * 3;
    const std::uint32_t packed = three[0] | (three[1] << 8) | (three[2] << 16);
    const std::uint32_t s = (packed >> (3 * (i % 8))) & 7u;
    static_cast<std::uint16_t*>(raw)[i] = static_cast<std::uint16_t>(((s & 4u) << 13) | ((e & 0x1fu) << 10) | ((s & 3u) << 8) | p);
  }
}

}  // namespace cuda_gauss

// The codec on one GPU: the tables uploaded once; encode and decode queue on the backend's compute
// stream and return when their result is in place (encode must learn the payload's size).
class cuda_gauss_codec {
 public:
  explicit cuda_gauss_codec(backend::cuda& gpu) : gpu_(&gpu) {
    const gauss::tables& t = gauss::code_tables();
    std::vector<gauss::code> codes;
    std::vector<gauss::entry> multi;
    std::vector<std::uint16_t> single;
    for (const auto& c : t.by_class) {
      codes.insert(codes.end(), c.codes.begin(), c.codes.end());
      multi.insert(multi.end(), c.multi.begin(), c.multi.end());
      single.insert(single.end(), c.single.begin(), c.single.end());
    }
    codes_ = upload(codes.data(), codes.size() * sizeof(gauss::code));
    multi_ = upload(multi.data(), multi.size() * sizeof(gauss::entry));
    single_ = upload(single.data(), single.size() * sizeof(std::uint16_t));
  }

  // Replaces `out` with the payload of n elements of `type` at device pointer raw; returns its bytes.
  std::size_t encode(dtype type, const void* raw, std::size_t n, buffer<backend::cuda>& out) const {
    switch (type) {
      case dtype::bf16: return encode_as<gauss::bf16_format>(raw, n, out);
      case dtype::f16: return encode_as<gauss::f16_format>(raw, n, out);
      case dtype::f32: return encode_as<gauss::f32_format>(raw, n, out);
      default: fail("cuda_gauss_codec: cannot encode ", dtype_name(type), " elements, expected bf16, f16 or f32");
    }
  }

  // Decodes the payload at device pointer `encoded` (`encoded_bytes` long) into n elements at raw.
  void decode(dtype type, const void* encoded, std::size_t encoded_bytes, void* raw, std::size_t n) const {
    switch (type) {
      case dtype::bf16: return decode_as<gauss::bf16_format>(encoded, encoded_bytes, raw, n);
      case dtype::f16: return decode_as<gauss::f16_format>(encoded, encoded_bytes, raw, n);
      case dtype::f32: return decode_as<gauss::f32_format>(encoded, encoded_bytes, raw, n);
      default: fail("cuda_gauss_codec: cannot decode ", dtype_name(type), " elements, expected bf16, f16 or f32");
    }
  }

 private:
  buffer<backend::cuda> upload(const void* host, std::size_t bytes) const {
    buffer<backend::cuda> b(*gpu_, bytes);
    gpu_->from_host(b.data(), host, bytes);
    return b;
  }

  template <class F>
  std::size_t encode_as(const void* raw, std::size_t n, buffer<backend::cuda>& out) const {
    using L = gauss::layout;
    namespace k = cuda_gauss;
    backend::cuda& gpu = *gpu_;
    const std::size_t blocks = gauss::blocks_of(n), lanes = blocks * L::lanes;
    const std::size_t dir_at = L::header, planes_at = dir_at + blocks * L::entry, streams_at = planes_at + F::plane_bytes(n);
    std::uint64_t stream_total = 0;
    buffer<backend::cuda> t(gpu, blocks * sizeof(int)), lane_bits(gpu, lanes * 8), dir(gpu, blocks * L::entry),
        block_bytes(gpu, blocks * 8), block_end(gpu, blocks * 8);
    const auto* codes = static_cast<const gauss::code*>(codes_.data());
    auto* tt = static_cast<int*>(t.data());
    auto* bits = static_cast<std::uint64_t*>(lane_bits.data());
    auto* d = static_cast<std::uint16_t*>(dir.data());
    auto* bb = static_cast<std::uint64_t*>(block_bytes.data());
    auto* be = static_cast<std::uint64_t*>(block_end.data());
    if (blocks) {
      k::statistic_kernel<F><<<k::grid_for(blocks * 8), k::threads_per_block, 0, gpu.stream()>>>(raw, n, blocks, tt);
      LWCL_CUDA_CHECK_LAUNCH("cuda_gauss_codec: statistic_kernel");
      k::length_kernel<F><<<k::grid_for(lanes), k::threads_per_block, 0, gpu.stream()>>>(raw, n, lanes, tt, codes, bits);
      LWCL_CUDA_CHECK_LAUNCH("cuda_gauss_codec: length_kernel");
      k::directory_kernel<F><<<k::grid_for(blocks), k::threads_per_block, 0, gpu.stream()>>>(n, blocks, tt, bits, d, bb);
      LWCL_CUDA_CHECK_LAUNCH("cuda_gauss_codec: directory_kernel");
      std::size_t temp_bytes = 0;
      LWCL_CUDA_CHECK(cub::DeviceScan::InclusiveSum(nullptr, temp_bytes, bb, be, static_cast<int>(blocks), gpu.stream()));
      buffer<backend::cuda> temp(gpu, temp_bytes);
      LWCL_CUDA_CHECK(cub::DeviceScan::InclusiveSum(temp.data(), temp_bytes, bb, be, static_cast<int>(blocks), gpu.stream()));
      gpu.to_host(&stream_total, be + blocks - 1, 8);
    }
    out = buffer<backend::cuda>(gpu, streams_at + stream_total);
    auto* o = static_cast<std::uint8_t*>(out.data());
    std::byte header[L::header];
    gauss::write_header<F>(header, n, stream_total);
    gpu.from_host(o, header, L::header);
    if (blocks) {
      gpu.copy(o + dir_at, d, blocks * L::entry);
      const std::size_t plane_items = F::kind == gauss::f16_format::kind ? (n + 7) / 8 : n;
      k::planes_kernel<F><<<k::grid_for(plane_items), k::threads_per_block, 0, gpu.stream()>>>(raw, n, o + planes_at);
      LWCL_CUDA_CHECK_LAUNCH("cuda_gauss_codec: planes_kernel");
      k::stream_kernel<F><<<k::grid_for(lanes), k::threads_per_block, 0, gpu.stream()>>>(raw, n, lanes, tt, d, be, codes,
                                                                                          o + streams_at);
      LWCL_CUDA_CHECK_LAUNCH("cuda_gauss_codec: stream_kernel");
    }
    gpu.synchronize();
    return streams_at + stream_total;
  }

  template <class F>
  void decode_as(const void* encoded, std::size_t encoded_bytes, void* raw, std::size_t n) const {
    using L = gauss::layout;
    namespace k = cuda_gauss;
    backend::cuda& gpu = *gpu_;
    // The header and the directory come to the host, which checks them as the host codec does.
    std::vector<std::byte> head(encoded_bytes < L::header ? encoded_bytes : L::header);
    gpu.to_host(head.data(), encoded, head.size());
    const std::size_t count = gauss::check_header<F>(head, encoded_bytes);
    check(count == n, "cuda_gauss_codec: payload holds ", count, " elements, expected ", n);
    const std::size_t blocks = gauss::blocks_of(n), lanes = blocks * L::lanes;
    head.resize(L::header + blocks * L::entry);
    gpu.to_host(head.data(), encoded, head.size());
    const std::vector<std::size_t> offset = gauss::stream_offsets<F>(head, encoded_bytes, n);
    if (!blocks) return;
    const std::vector<std::uint64_t> start(offset.begin(), offset.end() - 1);
    buffer<backend::cuda> starts = upload(start.data(), blocks * 8), exponents(gpu, n), bad(gpu, 8);
    const unsigned long long none = ULLONG_MAX;
    gpu.from_host(bad.data(), &none, 8);
    const auto* payload = static_cast<const std::uint8_t*>(encoded);
    auto* e = static_cast<std::uint8_t*>(exponents.data());
    k::decode_kernel<F><<<k::grid_for(lanes), k::threads_per_block, 0, gpu.stream()>>>(
        payload, n, lanes, reinterpret_cast<const std::uint16_t*>(payload + L::header),
        static_cast<const std::uint64_t*>(starts.data()), static_cast<const gauss::entry*>(multi_.data()),
        static_cast<const std::uint16_t*>(single_.data()), e, static_cast<unsigned long long*>(bad.data()));
    LWCL_CUDA_CHECK_LAUNCH("cuda_gauss_codec: decode_kernel");
    unsigned long long first_bad = none;
    gpu.to_host(&first_bad, bad.data(), 8);
    check(first_bad == none, "gauss_codec: the exponent stream of block ", first_bad, " does not hold exactly its codes");
    k::join_kernel<F><<<k::grid_for(n), k::threads_per_block, 0, gpu.stream()>>>(e, payload + L::header + blocks * L::entry,
                                                                                  n, raw);
    LWCL_CUDA_CHECK_LAUNCH("cuda_gauss_codec: join_kernel");
    gpu.synchronize();
  }

  backend::cuda* gpu_;
  buffer<backend::cuda> codes_, multi_, single_;
};

}  // namespace lwcl::codec
