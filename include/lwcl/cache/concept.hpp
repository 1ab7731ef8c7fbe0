#pragma once
// The feature-store kind of the feature cache. A store is one tier (device, host,
// pinned host, disk) holding payloads verbatim, or compressed_store wrapping a tier with a lossless
// codec; feature_cache and the prefetcher work with any of them.

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/core/memory.hpp"
#include "lwcl/cache/key.hpp"

namespace lwcl::cache {

// A record's payload exactly as its store holds it (encoded when meta.enc says so). `owner` keeps the
// bytes alive, so the view stays valid even if the record is replaced or erased meanwhile.
struct record_view {
  record_meta meta;
  std::span<const std::byte> bytes;
  std::shared_ptr<const void> owner;
};

// Cumulative codec work, for compression ratios and throughput; all zero for uncompressed stores.
struct codec_usage {
  std::string_view codec;              // empty when the store has none
  std::uint64_t encoded_raw_bytes = 0; // bytes handed to the encoder
  std::uint64_t encoded_bytes = 0;     // bytes it produced (or the raw size, when kept raw)
  std::uint64_t kept_raw = 0;          // records stored raw because encoding did not shrink them
  double encode_seconds = 0;
  std::uint64_t decoded_bytes = 0;     // raw bytes produced by the decoder
  double decode_seconds = 0;
};

// What a store holds now. stored bytes are what the tier really spends; raw bytes what the features
// decode to, so raw / stored is the compression ratio of the records held.
struct store_usage {
  std::string_view store;
  lwcl::tier memory_tier = lwcl::tier::host;
  std::size_t records = 0;
  std::uint64_t stored_bytes = 0;
  std::uint64_t peak_stored_bytes = 0;
  std::uint64_t raw_bytes = 0;
  codec_usage codec;
};

// Requires: S::name, a static constexpr std::string_view naming the store in reports; S::memory_tier,
// the lwcl::tier its bytes are reported under; and these members, each safe to call from several
// threads at once (the prefetcher reads while the trainer writes):
//   s.put(key, meta, payload): stores `payload` (std::span<const std::byte> of meta.stored_bytes bytes,
//     encoded as meta.enc) under key, replacing any record there; bad keys or sizes are lwcl::error;
//   s.meta(key) -> std::optional<record_meta>: the description, without reading the payload;
//   s.find(key) -> std::optional<record_view>: the payload as stored, kept alive by the view;
//   s.read(key, out) -> record_meta: the decoded elements copied into `out` (std::span<std::byte> of
//     exactly meta.raw_bytes() bytes); a missing key or a wrong size is lwcl::error. The meta returned
//     belongs to the same record as the bytes, even when another thread replaces it concurrently;
//   s.erase(key) -> bool; s.invalidate(boundary, src) -> std::size_t (records removed);
//   s.keys() -> std::vector<feature_key> (ascending); s.usage() -> store_usage.
template <class S>
concept feature_store = requires(S& s, const S& cs, const feature_key& k, const record_meta& m,
                                 std::span<const std::byte> payload, std::span<std::byte> out, index_t boundary,
                                 source src) {
  requires std::same_as<std::remove_cv_t<decltype(S::name)>, std::string_view>;
  requires std::same_as<std::remove_cv_t<decltype(S::memory_tier)>, lwcl::tier>;
  { s.put(k, m, payload) } -> std::same_as<void>;
  { cs.meta(k) } -> std::same_as<std::optional<record_meta>>;
  { cs.find(k) } -> std::same_as<std::optional<record_view>>;
  { cs.read(k, out) } -> std::same_as<record_meta>;
  { s.erase(k) } -> std::same_as<bool>;
  { s.invalidate(boundary, src) } -> std::same_as<std::size_t>;
  { cs.keys() } -> std::same_as<std::vector<feature_key>>;
  { cs.usage() } -> std::same_as<store_usage>;
};

namespace cache_detail {

// Running totals of one store; the store's own lock guards it.
class usage_counter {
 public:
  void add(const record_meta& m) {
    ++records_;
    stored_ += m.stored_bytes;
    raw_ += m.raw_bytes();
    if (stored_ > peak_) peak_ = stored_;
  }
  void remove(const record_meta& m) {
    --records_;
    stored_ -= m.stored_bytes;
    raw_ -= m.raw_bytes();
  }
  store_usage snapshot(std::string_view store, lwcl::tier t) const {
    store_usage u;
    u.store = store;
    u.memory_tier = t;
    u.records = records_;
    u.stored_bytes = stored_;
    u.peak_stored_bytes = peak_;
    u.raw_bytes = raw_;
    return u;
  }

 private:
  std::size_t records_ = 0;
  std::uint64_t stored_ = 0, peak_ = 0, raw_ = 0;
};

// read() of a store that keeps payloads verbatim: copies a raw record into `out`.
inline record_meta copy_raw(std::string_view who, const feature_key& k, const record_view& v, std::span<std::byte> out) {
  check(v.meta.enc == encoding::raw, who, ": feature ", k.str(), " is stored with encoding ", encoding_name(v.meta.enc),
        "; read it through a compressed_store with that codec");
  check(out.size() == v.meta.raw_bytes(), who, ": output of ", out.size(), " bytes for feature ", k.str(), " (",
        dtype_name(v.meta.type), v.meta.shape.str(), "), expected ", v.meta.raw_bytes());
  if (!out.empty()) std::memcpy(out.data(), v.bytes.data(), out.size());
  return v.meta;
}

[[noreturn]] inline void fail_missing(std::string_view who, const feature_key& k) {
  fail(who, ": no feature for ", k.str());
}

// The characters of parts..., joined at compile time, for names such as "compressed<disk,exponent>".
template <std::size_t N>
constexpr std::array<char, N> join_chars(std::initializer_list<std::string_view> parts) {
  std::array<char, N> out{};
  std::size_t i = 0;
  for (std::string_view p : parts)
    for (char c : p) out[i++] = c;
  return out;
}

}  // namespace cache_detail
}  // namespace lwcl::cache
