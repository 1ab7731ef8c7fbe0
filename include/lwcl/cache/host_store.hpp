#pragma once
// host_store: the RAM tier of the feature cache. Each record is one allocation from a memory policy:
// heap_memory on the host (tier host), pinned_memory under CUDA (backend/cuda/cache/feature_stores.cuh, tier pinned) so the
// trainer's copies to the GPU run asynchronously. Records are shared, so a reader never sees them freed.

#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "lwcl/cache/concept.hpp"
#include "lwcl/cache/memory.hpp"
#include "lwcl/cache/record_map.hpp"

namespace lwcl::cache {

template <staging_memory Memory = heap_memory>
class host_store {
 public:
  static constexpr std::string_view name =
      Memory::memory_tier == lwcl::tier::pinned ? std::string_view("pinned_host") : std::string_view("host");
  static constexpr lwcl::tier memory_tier = Memory::memory_tier;

  host_store() = default;
  host_store(const host_store&) = delete;
  host_store& operator=(const host_store&) = delete;

  void put(const feature_key& k, const record_meta& m, std::span<const std::byte> payload) {
    cache_detail::check_record(name, k, m, payload.size());
    auto r = std::make_shared<record>(m, memory_block<Memory>(payload.size()));
    if (!payload.empty()) std::memcpy(r->bytes.data(), payload.data(), payload.size());
    records_.put(k, std::move(r));
  }

  std::optional<record_meta> meta(const feature_key& k) const { return records_.meta(k); }

  std::optional<record_view> find(const feature_key& k) const {
    std::shared_ptr<const record> r = records_.lookup(k);
    if (!r) return std::nullopt;
    return record_view{r->meta, std::span<const std::byte>(r->bytes.data(), r->bytes.bytes()), r};
  }

  record_meta read(const feature_key& k, std::span<std::byte> out) const {
    const std::optional<record_view> v = find(k);
    if (!v) cache_detail::fail_missing(name, k);
    return cache_detail::copy_raw(name, k, *v, out);
  }

  bool erase(const feature_key& k) { return records_.erase(k); }
  std::size_t invalidate(index_t boundary, source src) { return records_.invalidate(boundary, src); }
  std::vector<feature_key> keys() const { return records_.keys(); }
  store_usage usage() const { return records_.usage(name, memory_tier); }

 private:
  struct record {
    record(const record_meta& m, memory_block<Memory>&& b) : meta(m), bytes(std::move(b)) {}
    record_meta meta;
    memory_block<Memory> bytes;
  };

  cache_detail::record_map<record> records_;
};
static_assert(feature_store<host_store<>>);

}  // namespace lwcl::cache
