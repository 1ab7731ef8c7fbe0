#pragma once
// The device ranking behind prune::allocate on backend::cuda (included by cuda.cuh): a stable CUB radix
// sort of (key, index) pairs by descending key, so that equal keys keep ascending index, the order of
// std::stable_sort with `a > b` on the host ranking.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cub/device/device_radix_sort.cuh>

#include "lwcl/backend/cuda/cuda.cuh"
#include "lwcl/backend/cuda/device.cuh"
#include "lwcl/backend/cuda/error.cuh"
#include "lwcl/core/config.hpp"

namespace lwcl::backend {

namespace cuda_detail {

// -0.0 becomes +0.0. A comparison sort sees the two as equal; a radix sort orders bit patterns, and
// whether it folds the zeros together depends on the CUB version (recent ones do), so the ranking
// does not rely on it.
struct canonical_zero {
  double* keys;
  LWCL_HD void operator()(index_t i) const {
    if (keys[i] == 0.0) keys[i] = 0.0;
  }
};

struct iota_index {
  index_t* values;
  LWCL_HD void operator()(index_t i) const { values[i] = i; }
};

// Offsets of the pieces of one scratch allocation, each aligned for CUB.
inline std::size_t round_up_256(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace cuda_detail

template <class>
void cuda::rank_descending(index_t* order_host, const double* keys_host, index_t n) const {
  if (n <= 0) return;
  cuda_detail::scoped_device on(device_);
  const auto count = static_cast<std::size_t>(n);
  std::size_t temp_bytes = 0;
  LWCL_CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(nullptr, temp_bytes, static_cast<const double*>(nullptr),
                                                            static_cast<double*>(nullptr), static_cast<const index_t*>(nullptr),
                                                            static_cast<index_t*>(nullptr), n, 0,
                                                            static_cast<int>(sizeof(double) * 8), stream_));
  // One tracked allocation: keys in and out, indices in and out, then CUB's temporary storage.
  const std::size_t key_bytes = cuda_detail::round_up_256(count * sizeof(double));
  const std::size_t value_bytes = cuda_detail::round_up_256(count * sizeof(index_t));
  const std::size_t bytes = 2 * key_bytes + 2 * value_bytes + temp_bytes;
  char* scratch = static_cast<char*>(allocate_bytes(bytes));
  auto* keys_in = reinterpret_cast<double*>(scratch);
  auto* keys_out = reinterpret_cast<double*>(scratch + key_bytes);
  auto* values_in = reinterpret_cast<index_t*>(scratch + 2 * key_bytes);
  auto* values_out = reinterpret_cast<index_t*>(scratch + 2 * key_bytes + value_bytes);
  void* temp = scratch + 2 * key_bytes + 2 * value_bytes;
  try {
    // From pageable memory the copy has left keys_host when the call returns.
    LWCL_CUDA_CHECK(cudaMemcpyAsync(keys_in, keys_host, count * sizeof(double), cudaMemcpyHostToDevice, stream_));
    for_each(n, cuda_detail::canonical_zero{keys_in});
    for_each(n, cuda_detail::iota_index{values_in});
    LWCL_CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(temp, temp_bytes, keys_in, keys_out, values_in, values_out, n,
                                                              0, static_cast<int>(sizeof(double) * 8), stream_));
    LWCL_CUDA_CHECK(cudaMemcpyAsync(order_host, values_out, count * sizeof(index_t), cudaMemcpyDeviceToHost, stream_));
    LWCL_CUDA_CHECK(cudaStreamSynchronize(stream_));
  } catch (...) {
    deallocate_bytes(scratch, bytes);
    throw;
  }
  deallocate_bytes(scratch, bytes);
}

}  // namespace lwcl::backend
