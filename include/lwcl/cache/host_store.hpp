#pragma once
// host_store: the RAM tier of the feature cache. Each record is one allocation from a memory policy:
// heap_memory on the host (tier host), pinned_memory under CUDA (backend/cuda/cache/feature_stores.cuh, tier pinned) so the
// trainer's copies to the GPU run asynchronously. Records are shared, so a reader never sees them freed.

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string_view>
#include <vector>

#include "lwcl/cache/concept.hpp"
#include "lwcl/cache/memory.hpp"

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
    std::shared_ptr<const record> old;
    std::unique_lock lock(mu_);
    auto [it, inserted] = records_.try_emplace(k, r);
    if (!inserted) {
      usage_.remove(it->second->meta);
      old = std::exchange(it->second, r);  // freed after the lock is dropped
    }
    usage_.add(m);
  }

  std::optional<record_meta> meta(const feature_key& k) const {
    std::shared_lock lock(mu_);
    const auto it = records_.find(k);
    if (it == records_.end()) return std::nullopt;
    return it->second->meta;
  }

  std::optional<record_view> find(const feature_key& k) const {
    std::shared_ptr<const record> r = lookup(k);
    if (!r) return std::nullopt;
    return record_view{r->meta, std::span<const std::byte>(r->bytes.data(), r->bytes.bytes()), r};
  }

  record_meta read(const feature_key& k, std::span<std::byte> out) const {
    const std::optional<record_view> v = find(k);
    if (!v) cache_detail::fail_missing(name, k);
    return cache_detail::copy_raw(name, k, *v, out);
  }

  bool erase(const feature_key& k) {
    std::shared_ptr<const record> old;
    std::unique_lock lock(mu_);
    const auto it = records_.find(k);
    if (it == records_.end()) return false;
    usage_.remove(it->second->meta);
    old = std::move(it->second);
    records_.erase(it);
    return true;
  }

  std::size_t invalidate(index_t boundary, source src) {
    std::vector<std::shared_ptr<const record>> old;
    std::unique_lock lock(mu_);
    for (auto it = records_.begin(); it != records_.end();) {
      if (it->first.boundary == boundary && it->first.src == src) {
        usage_.remove(it->second->meta);
        old.push_back(std::move(it->second));
        it = records_.erase(it);
      } else {
        ++it;
      }
    }
    return old.size();
  }

  std::vector<feature_key> keys() const {
    std::shared_lock lock(mu_);
    std::vector<feature_key> out;
    out.reserve(records_.size());
    for (const auto& [k, r] : records_) out.push_back(k);
    return out;
  }

  store_usage usage() const {
    std::shared_lock lock(mu_);
    return usage_.snapshot(name, memory_tier);
  }

 private:
  struct record {
    record(const record_meta& m, memory_block<Memory>&& b) : meta(m), bytes(std::move(b)) {}
    record_meta meta;
    memory_block<Memory> bytes;
  };

  std::shared_ptr<const record> lookup(const feature_key& k) const {
    std::shared_lock lock(mu_);
    const auto it = records_.find(k);
    return it == records_.end() ? nullptr : it->second;
  }

  mutable std::shared_mutex mu_;
  std::map<feature_key, std::shared_ptr<const record>> records_;
  cache_detail::usage_counter usage_;
};
static_assert(feature_store<host_store<>>);

}  // namespace lwcl::cache
