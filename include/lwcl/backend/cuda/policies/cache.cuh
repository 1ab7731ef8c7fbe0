#pragma once
// Cache policies for runs on backend::cuda (nvcc only): features in pinned host memory, staged in pinned
// memory so the pipeline's copies to the GPU run on the copy stream while the previous step computes;
// disk records staged the same way; or features resident in device memory, read in place.

#include <filesystem>
#include <memory>
#include <string_view>

#include "lwcl/backend/cuda/cache/feature_stores.cuh"
#include "lwcl/cache/feature_cache.hpp"
#include "lwcl/policies/cache/disk.hpp"
#include "lwcl/policies/cache/concept.hpp"

namespace lwcl::policies::cache {

// The host tier in page-locked memory: every staged feature reaches the GPU by an asynchronous copy.
struct pinned {
  static constexpr std::string_view name = "pinned";
  using store = lwcl::cache::pinned_host_store;
  using staging = lwcl::cache::pinned_memory;

  std::unique_ptr<lwcl::cache::feature_cache<store>> open(const std::filesystem::path&) const {
    return std::make_unique<lwcl::cache::feature_cache<store>>();
  }
};
static_assert(cache_policy<pinned> && stages_in_own_memory<pinned>);

// Memory-mapped disk records, decoded by the prefetch workers into pinned staging buffers.
struct disk_pinned : disk {
  static constexpr std::string_view name = "disk_pinned";
  using staging = lwcl::cache::pinned_memory;
};
static_assert(cache_policy<disk_pinned> && stages_in_own_memory<disk_pinned>);

// The device tier: features live in GPU memory (counted as the cache's, not the trainer's), and a step
// copies its inputs device to device on the compute stream. The fastest tier when features fit beside
// the segment being trained.
struct device {
  static constexpr std::string_view name = "device";
  using store = lwcl::cache::device_store;

  std::unique_ptr<lwcl::cache::feature_cache<store>> open(const std::filesystem::path&) const {
    return std::make_unique<lwcl::cache::feature_cache<store>>();
  }
};
static_assert(cache_policy<device>);

}  // namespace lwcl::policies::cache
