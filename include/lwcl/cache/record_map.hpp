#pragma once
// The records of an in-memory feature store (host_store, and on CUDA pinned_host_store and
// device_store): a map from feature_key to shared, immutable records under a reader-writer lock, with
// the store's usage totals. Records are shared so that a record_view stays valid when its record is
// replaced or erased; a record that leaves the map is freed after the lock is released.

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string_view>
#include <utility>
#include <vector>

#include "lwcl/cache/concept.hpp"
#include "lwcl/cache/key.hpp"
#include "lwcl/core/config.hpp"
#include "lwcl/core/memory.hpp"

namespace lwcl::cache::cache_detail {

// Record: any type with a `record_meta meta` member (the payload is the store's business).
template <class Record>
class record_map {
 public:
  // Stores `r` under k, replacing any record there.
  void put(const feature_key& k, std::shared_ptr<const Record> r) {
    const record_meta m = r->meta;
    std::shared_ptr<const Record> old;  // declared before the lock: a replaced record is freed after it
    std::unique_lock lock(mu_);
    auto [it, inserted] = records_.try_emplace(k, r);
    if (!inserted) {
      usage_.remove(it->second->meta);
      old = std::exchange(it->second, std::move(r));
    }
    usage_.add(m);
  }

  std::optional<record_meta> meta(const feature_key& k) const {
    std::shared_lock lock(mu_);
    const auto it = records_.find(k);
    if (it == records_.end()) return std::nullopt;
    return it->second->meta;
  }

  std::shared_ptr<const Record> lookup(const feature_key& k) const {
    std::shared_lock lock(mu_);
    const auto it = records_.find(k);
    return it == records_.end() ? nullptr : it->second;
  }

  bool erase(const feature_key& k) {
    std::shared_ptr<const Record> old;
    std::unique_lock lock(mu_);
    const auto it = records_.find(k);
    if (it == records_.end()) return false;
    usage_.remove(it->second->meta);
    old = std::move(it->second);
    records_.erase(it);
    return true;
  }

  // Removes every record at (boundary, src); returns how many.
  std::size_t invalidate(index_t boundary, source src) {
    std::vector<std::shared_ptr<const Record>> old;
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

  store_usage usage(std::string_view store, lwcl::tier t) const {
    std::shared_lock lock(mu_);
    return usage_.snapshot(store, t);
  }

 private:
  mutable std::shared_mutex mu_;
  std::map<feature_key, std::shared_ptr<const Record>> records_;
  usage_counter usage_;
};

}  // namespace lwcl::cache::cache_detail
