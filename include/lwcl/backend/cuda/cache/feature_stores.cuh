#pragma once
// The CUDA side of the feature cache, built by nvcc only: pinned_memory (page-locked host memory, tier
// pinned) for host_store and the prefetcher's staging ring, so copies to the GPU run on the copy
// stream while compute proceeds; and device_store, the GPU tier, keeping raw records in device memory.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "lwcl/backend/cuda/cuda.cuh"
#include "lwcl/backend/cuda/device.cuh"
#include "lwcl/backend/cuda/error.cuh"
#include "lwcl/backend/cuda/pinned.cuh"
#include "lwcl/cache/concept.hpp"
#include "lwcl/cache/host_store.hpp"
#include "lwcl/cache/prefetcher.hpp"
#include "lwcl/cache/record_map.hpp"

namespace lwcl::cache {

struct pinned_memory {
  static constexpr std::string_view name = "pinned";
  static constexpr lwcl::tier memory_tier = lwcl::tier::pinned;
  static void* allocate(std::size_t bytes) { return backend::allocate_pinned_bytes(bytes); }
  static void deallocate(void* p, std::size_t bytes) noexcept { backend::deallocate_pinned_bytes(p, bytes); }
};
static_assert(staging_memory<pinned_memory>);

using pinned_host_store = host_store<pinned_memory>;
static_assert(feature_store<pinned_host_store>);

// A prefetcher staging into pinned memory, ready for upload_staged.
template <feature_store Store>
using pinned_prefetcher = prefetcher<Store, pinned_memory>;

// Queues the copy of a staged feature to device memory on the backend's copy stream and returns. The
// staging buffer is reused once given back, so the copy must be finished (be.synchronize_copies())
// before the prefetcher's next next() or release(); be.compute_wait_for_copies() orders the kernels
// that read `device_dst` after it.
inline void upload_staged(const backend::cuda& be, const staged_feature& f, void* device_dst) {
  be.copy_async(device_dst, f.data.data, f.data.bytes());
}

namespace cache_detail {
// One record's device memory on one device, freed when the last view of it goes.
class device_bytes {
 public:
  device_bytes(int device, std::size_t bytes) : device_(device), bytes_(bytes) {
    if (!bytes_) return;
    backend::cuda_detail::scoped_device on(device_);
    LWCL_CUDA_CHECK(cudaMalloc(&data_, bytes_));
    memory().on_alloc(lwcl::tier::device, bytes_, lwcl::purpose::cache);
  }
  ~device_bytes() {
    if (!data_) return;
    LWCL_CUDA_REPORT(cudaFree(data_));
    memory().on_free(lwcl::tier::device, bytes_, lwcl::purpose::cache);
  }
  device_bytes(const device_bytes&) = delete;
  device_bytes& operator=(const device_bytes&) = delete;
  std::byte* data() const { return static_cast<std::byte*>(data_); }
  std::size_t bytes() const { return bytes_; }

 private:
  int device_ = 0;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};
}  // namespace cache_detail

// The device tier: raw records (no codec runs on the device) in memory of the device that was current
// when the store was made. find() returns views whose bytes are device addresses, for kernels to read
// in place; read() copies to host memory. Copies here are synchronous: the overlapped path is a
// pinned_prefetcher over a host or disk store plus upload_staged.
class device_store {
 public:
  static constexpr std::string_view name = "device";
  static constexpr lwcl::tier memory_tier = lwcl::tier::device;

  device_store() { LWCL_CUDA_CHECK(cudaGetDevice(&device_)); }
  explicit device_store(int device) : device_(device) {}
  device_store(const device_store&) = delete;
  device_store& operator=(const device_store&) = delete;
  int device() const { return device_; }

  // `payload` is host memory (pageable or pinned).
  void put(const feature_key& k, const record_meta& m, std::span<const std::byte> payload) {
    cache_detail::check_record(name, k, m, payload.size());
    check(m.enc == encoding::raw, name, ": feature ", k.str(), " arrives encoded as ", encoding_name(m.enc),
          "; the device tier holds raw features");
    auto r = std::make_shared<record>(m, device_);
    if (!payload.empty()) {
      backend::cuda_detail::scoped_device on(device_);
      LWCL_CUDA_CHECK(cudaMemcpy(r->bytes.data(), payload.data(), payload.size(), cudaMemcpyHostToDevice));
    }
    records_.put(k, std::move(r));
  }

  std::optional<record_meta> meta(const feature_key& k) const { return records_.meta(k); }

  std::optional<record_view> find(const feature_key& k) const {
    std::shared_ptr<const record> r = records_.lookup(k);
    if (!r) return std::nullopt;
    return record_view{r->meta, std::span<const std::byte>(r->bytes.data(), r->bytes.bytes()), r};
  }

  // `out` is host memory.
  record_meta read(const feature_key& k, std::span<std::byte> out) const {
    std::shared_ptr<const record> r = records_.lookup(k);
    if (!r) cache_detail::fail_missing(name, k);
    check(out.size() == r->meta.raw_bytes(), name, ": output of ", out.size(), " bytes for feature ", k.str(), " (",
          dtype_name(r->meta.type), r->meta.shape.str(), "), expected ", r->meta.raw_bytes());
    if (!out.empty()) {
      backend::cuda_detail::scoped_device on(device_);
      LWCL_CUDA_CHECK(cudaMemcpy(out.data(), r->bytes.data(), out.size(), cudaMemcpyDeviceToHost));
    }
    return r->meta;
  }

  bool erase(const feature_key& k) { return records_.erase(k); }
  std::size_t invalidate(index_t boundary, source src) { return records_.invalidate(boundary, src); }
  std::vector<feature_key> keys() const { return records_.keys(); }
  store_usage usage() const { return records_.usage(name, memory_tier); }

 private:
  struct record {
    record(const record_meta& m, int device) : meta(m), bytes(device, static_cast<std::size_t>(m.stored_bytes)) {}
    record_meta meta;
    cache_detail::device_bytes bytes;
  };

  int device_ = 0;
  cache_detail::record_map<record> records_;
};
static_assert(feature_store<device_store>);

}  // namespace lwcl::cache
