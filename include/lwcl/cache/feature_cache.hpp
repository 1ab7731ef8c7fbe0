#pragma once
// feature_cache<Store>: what the trainer talks to. Puts and gets (B, T, C) boundary features, f32 or
// bf16, keyed by (boundary, teacher|student, batch) over any feature_store, checking shapes, dtypes and
// the weights version: a student feature is only read with the version the reader expects, and a
// different stored version is an lwcl::error ("stale feature"), never a silent read.

#include <atomic>
#include <concepts>
#include <cstdint>
#include <iomanip>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "lwcl/cache/concept.hpp"
#include "lwcl/tensor/tensor.hpp"

namespace lwcl::cache {

struct cache_stats {
  store_usage store;               // bytes held now and at peak in the store's tier, raw and stored
  std::uint64_t hits = 0;          // reads that found their feature
  std::uint64_t misses = 0;        // reads that did not
  std::uint64_t puts = 0;
  std::uint64_t bytes_put = 0;     // raw bytes written
  std::uint64_t bytes_read = 0;    // raw bytes delivered

  double hit_rate() const { return hits + misses ? static_cast<double>(hits) / static_cast<double>(hits + misses) : 0.0; }
  // Raw over stored bytes of the records held now (1 for an uncompressed store).
  double compression_ratio() const {
    return store.stored_bytes ? static_cast<double>(store.raw_bytes) / static_cast<double>(store.stored_bytes) : 1.0;
  }
  std::string summary() const {
    std::ostringstream os;
    os << std::fixed << std::setprecision(2) << store.store << " (" << tier_name(store.memory_tier)
       << "): " << store.records << " records, " << static_cast<double>(store.stored_bytes) / 1e6 << " MB stored (peak "
       << static_cast<double>(store.peak_stored_bytes) / 1e6 << " MB) for " << static_cast<double>(store.raw_bytes) / 1e6
       << " MB raw, ratio " << compression_ratio() << "; " << hits << " hits, " << misses << " misses (hit rate "
       << hit_rate() << ")";
    return os.str();
  }
};

template <feature_store Store>
class feature_cache {
 public:
  using store_type = Store;

  // feature_cache<disk_store> cache("run/features"): the arguments construct the store in place.
  template <class... Args>
    requires std::constructible_from<Store, Args...>
  explicit feature_cache(Args&&... store_args) : store_(std::forward<Args>(store_args)...) {}
  feature_cache(const feature_cache&) = delete;
  feature_cache& operator=(const feature_cache&) = delete;

  // Stores `features` (f32, bf16 or f64, usually (B, T, C)) under k, replacing what was there. `version`
  // identifies the weights that produced them (teacher features: any fixed number, such as 0).
  void put(const feature_key& k, tensor features, std::uint64_t version) {
    check(is_feature_dtype(features.type), "feature_cache: features for ", k.str(), " are ", features.describe(),
          ", expected f32, bf16 or f64");
    check(features.data != nullptr || features.numel() == 0, "feature_cache: features for ", k.str(),
          " have no data");
    const record_meta m{features.type, features.shape, version, encoding::raw, features.bytes()};
    store_.put(k, m, std::span<const std::byte>(static_cast<const std::byte*>(features.data), features.bytes()));
    ++puts_;
    bytes_put_ += features.bytes();
  }
  void put(const feature_key& k, const float* data, const shape& s, std::uint64_t version) {
    put(k, tensor(data, s), version);
  }
  void put(const feature_key& k, const bf16* data, const shape& s, std::uint64_t version) {
    put(k, tensor(data, s), version);
  }

  // Copies the feature into `out`, whose shape must be the stored one; its dtype the stored one, or f32
  // for a bf16 feature (widened exactly). Student features need expected_version; a missing key or a
  // version other than the expected one is lwcl::error.
  void get(const feature_key& k, tensor out, std::optional<std::uint64_t> expected_version = std::nullopt) {
    if (!try_get(k, out, expected_version)) fail_missing(k);
  }
  void get(const feature_key& k, float* out, const shape& s, std::optional<std::uint64_t> expected_version = std::nullopt) {
    get(k, tensor(out, s), expected_version);
  }
  // As get, but a missing key returns false (a miss) instead of throwing. A stale one still throws.
  bool try_get(const feature_key& k, tensor out, std::optional<std::uint64_t> expected_version = std::nullopt) {
    const std::optional<record_meta> m = store_.meta(k);
    if (!m) {
      ++misses_;
      return false;
    }
    check_version(k, *m, expected_version);
    check(out.shape == m->shape, "feature_cache: ", k.str(), " holds ", dtype_name(m->type), m->shape.str(),
          ", the output is ", out.describe());
    check(out.data != nullptr || out.numel() == 0, "feature_cache: the output for ", k.str(), " has no data");
    record_meta r;
    if (out.type == m->type) {
      r = store_.read(k, std::span<std::byte>(static_cast<std::byte*>(out.data), out.bytes()));
    } else {
      check(out.type == dtype::f32 && m->type == dtype::bf16, "feature_cache: ", k.str(), " is stored as ",
            dtype_name(m->type), " and cannot be read into ", dtype_name(out.type),
            m->type == dtype::bf16 ? std::string("; read it into f32 or bf16")
                                   : lwcl::detail::concat(" without rounding; read it into ", dtype_name(m->type)));
      std::vector<bf16> narrow(static_cast<std::size_t>(out.numel()));
      r = store_.read(k, std::as_writable_bytes(std::span<bf16>(narrow)));
      float* dst = static_cast<float*>(out.data);
      for (std::size_t i = 0; i < narrow.size(); ++i) dst[i] = narrow[i].to_float();
    }
    check(r.type == m->type && r.shape == m->shape, "feature_cache: ", k.str(), " was replaced while being read");
    check_version(k, r, expected_version);
    ++hits_;
    bytes_read_ += out.bytes();
    return true;
  }

  // The stored elements, in their stored dtype, into `out` (exactly meta_of(k).raw_bytes() bytes), with
  // the version checked as get does. Returns the record read. The prefetcher stages features this way.
  record_meta read_raw(const feature_key& k, std::span<std::byte> out, std::optional<std::uint64_t> expected_version) {
    const std::optional<record_meta> m = store_.meta(k);
    if (!m) {
      ++misses_;
      fail_missing(k);
    }
    check_version(k, *m, expected_version);
    const record_meta r = store_.read(k, out);
    check_version(k, r, expected_version);
    ++hits_;
    bytes_read_ += out.size();
    return r;
  }

  // The record of k as its store holds it (device addresses for a device store, the encoded payload
  // for a compressed one), with the version checked as get does. The view keeps the record alive.
  record_view view(const feature_key& k, std::optional<std::uint64_t> expected_version) {
    std::optional<record_view> v = store_.find(k);
    if (!v) {
      ++misses_;
      fail_missing(k);
    }
    check_version(k, v->meta, expected_version);
    ++hits_;
    bytes_read_ += v->bytes.size();
    return std::move(*v);
  }

  bool contains(const feature_key& k) const { return store_.meta(k).has_value(); }
  std::optional<record_meta> find_meta(const feature_key& k) const { return store_.meta(k); }
  record_meta meta_of(const feature_key& k) const {
    const std::optional<record_meta> m = store_.meta(k);
    if (!m) fail_missing(k);
    return *m;
  }
  std::uint64_t version_of(const feature_key& k) const { return meta_of(k).version; }

  bool erase(const feature_key& k) { return store_.erase(k); }
  // Drops every batch of one boundary and source: what a refresh does once the weights upstream of a
  // boundary change. Returns how many records went.
  std::size_t invalidate(index_t boundary, source src) { return store_.invalidate(boundary, src); }
  std::vector<feature_key> keys() const { return store_.keys(); }

  cache_stats stats() const {
    cache_stats s;
    s.store = store_.usage();
    s.hits = hits_.load();
    s.misses = misses_.load();
    s.puts = puts_.load();
    s.bytes_put = bytes_put_.load();
    s.bytes_read = bytes_read_.load();
    return s;
  }

  Store& store() { return store_; }
  const Store& store() const { return store_; }

 private:
  static void check_version(const feature_key& k, const record_meta& m, std::optional<std::uint64_t> expected) {
    check(k.src != source::student || expected.has_value(), "feature_cache: ", k.str(),
          " is a student feature: read it with the expected weights version, so that a stale feature cannot pass "
          "unnoticed");
    if (expected && *expected != m.version)
      fail("feature_cache: stale feature ", k.str(), ": stored from weights version ", m.version, ", expected version ",
           *expected, " (refresh it after the segments upstream of the boundary changed)");
  }
  [[noreturn]] static void fail_missing(const feature_key& k) {
    fail("feature_cache: no feature for ", k.str(), " in the ", Store::name, " store");
  }

  Store store_;
  std::atomic<std::uint64_t> hits_{0}, misses_{0}, puts_{0}, bytes_put_{0}, bytes_read_{0};
};

}  // namespace lwcl::cache
