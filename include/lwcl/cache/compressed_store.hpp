#pragma once
// compressed_store<Inner, Codec>: a tier (host, pinned host or disk store) whose payloads pass through
// a lossless codec: encoded on put, decoded straight from the tier's bytes (a disk record's memory
// map, say) into the reader's buffer on read. A record the codec would not shrink is kept raw.

#include <array>
#include <atomic>
#include <concepts>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "lwcl/cache/concept.hpp"
#include "lwcl/codec/concept.hpp"
#include "lwcl/core/timer.hpp"

namespace lwcl::cache {

template <feature_store Inner, codec::lossless_codec Codec>
class compressed_store {
  static_assert(Inner::memory_tier != lwcl::tier::device,
                "compressed_store decodes on the host: wrap a host, pinned host or disk store, not device_store");
  static constexpr std::size_t name_size = std::string_view("compressed<,>").size() + Inner::name.size() + Codec::name.size();
  static constexpr std::array<char, name_size> name_chars =
      cache_detail::join_chars<name_size>({"compressed<", Inner::name, ",", Codec::name, ">"});

 public:
  static constexpr std::string_view name{name_chars.data(), name_size};
  static constexpr lwcl::tier memory_tier = Inner::memory_tier;

  // compressed_store(zstd_codec(5), "run/features"): the codec, then the inner store's arguments.
  template <class... Args>
    requires std::constructible_from<Inner, Args...>
  explicit compressed_store(Codec codec, Args&&... inner_args)
      : inner_(std::forward<Args>(inner_args)...), codec_(std::move(codec)) {}
  compressed_store()
    requires std::default_initializable<Inner> && std::default_initializable<Codec>
  = default;
  compressed_store(const compressed_store&) = delete;
  compressed_store& operator=(const compressed_store&) = delete;

  Inner& inner() { return inner_; }
  const Inner& inner() const { return inner_; }
  const Codec& codec() const { return codec_; }

  // Takes raw payloads only (meta.enc == raw) and stores the codec's encoding.
  void put(const feature_key& k, const record_meta& m, std::span<const std::byte> payload) {
    cache_detail::check_record(name, k, m, payload.size());
    check(m.enc == encoding::raw, name, ": feature ", k.str(), " arrives encoded as ", encoding_name(m.enc),
          ", expected raw bytes to encode");
    std::vector<std::byte> encoded;
    const timer t;
    codec_.encode(m.type, payload, encoded);
    encode_seconds_.fetch_add(t.seconds());
    encoded_raw_bytes_ += payload.size();
    if (encoded.size() < payload.size()) {
      record_meta e = m;
      e.enc = Codec::id;
      e.stored_bytes = encoded.size();
      encoded_bytes_ += encoded.size();
      inner_.put(k, e, encoded);
    } else {
      encoded_bytes_ += payload.size();
      ++kept_raw_;
      inner_.put(k, m, payload);
    }
  }

  std::optional<record_meta> meta(const feature_key& k) const { return inner_.meta(k); }
  std::optional<record_view> find(const feature_key& k) const { return inner_.find(k); }

  record_meta read(const feature_key& k, std::span<std::byte> out) const {
    const std::optional<record_view> v = inner_.find(k);
    if (!v) cache_detail::fail_missing(name, k);
    if (v->meta.enc == encoding::raw) return cache_detail::copy_raw(name, k, *v, out);
    check(v->meta.enc == Codec::id, name, ": feature ", k.str(), " is encoded with ", encoding_name(v->meta.enc),
          ", this store decodes ", encoding_name(Codec::id));
    check(out.size() == v->meta.raw_bytes(), name, ": output of ", out.size(), " bytes for feature ", k.str(), " (",
          dtype_name(v->meta.type), v->meta.shape.str(), "), expected ", v->meta.raw_bytes());
    const timer t;
    try {
      codec_.decode(v->meta.type, v->bytes, out);
    } catch (const error& e) {
      fail(name, ": feature ", k.str(), ": ", e.what());
    }
    decode_seconds_.fetch_add(t.seconds());
    decoded_bytes_ += out.size();
    return v->meta;
  }

  bool erase(const feature_key& k) { return inner_.erase(k); }
  std::size_t invalidate(index_t boundary, source src) { return inner_.invalidate(boundary, src); }
  std::vector<feature_key> keys() const { return inner_.keys(); }

  store_usage usage() const {
    store_usage u = inner_.usage();
    u.store = name;
    u.codec.codec = Codec::name;
    u.codec.encoded_raw_bytes = encoded_raw_bytes_.load();
    u.codec.encoded_bytes = encoded_bytes_.load();
    u.codec.kept_raw = kept_raw_.load();
    u.codec.encode_seconds = encode_seconds_.load();
    u.codec.decoded_bytes = decoded_bytes_.load();
    u.codec.decode_seconds = decode_seconds_.load();
    return u;
  }

 private:
  Inner inner_;
  Codec codec_;
  std::atomic<std::uint64_t> encoded_raw_bytes_{0}, encoded_bytes_{0}, kept_raw_{0};
  mutable std::atomic<std::uint64_t> decoded_bytes_{0};
  std::atomic<double> encode_seconds_{0};
  mutable std::atomic<double> decode_seconds_{0};
};
}  // namespace lwcl::cache
