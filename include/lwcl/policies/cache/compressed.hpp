#pragma once
// compressed<Tier, Codec>: a host or disk cache whose records pass through a lossless codec:
// codec::exponent_codec (entropy-coded exponents of f32/bf16 features, mantissas verbatim),
// codec::gauss_codec (the same without a histogram: closed-form tables picked per block, decoded
// several exponents per lookup) or codec::zstd_codec (the general codec; its level is the codec
// member's). Bit-exact on every input.

#include <filesystem>
#include <memory>
#include <string_view>
#include <tuple>
#include <utility>

#include "lwcl/cache/compressed_store.hpp"
#include "lwcl/codec/exponent_codec.hpp"
#include "lwcl/codec/gauss_codec.hpp"
#include "lwcl/codec/zstd_codec.hpp"
#include "lwcl/cache/feature_cache.hpp"
#include "lwcl/policies/cache/disk.hpp"
#include "lwcl/policies/cache/host.hpp"
#include "lwcl/policies/cache/concept.hpp"
#include "lwcl/policies/name.hpp"

namespace lwcl::policies::cache {

namespace detail {
struct compressed_head {
  static constexpr std::string_view name = "compressed";
};
}  // namespace detail

template <class Tier = host, codec::lossless_codec Codec = codec::zstd_codec>
struct compressed {
  static_assert(cache_policy<Tier>, "compressed<Tier, Codec>: Tier must be a cache policy (cache::host or cache::disk)");
  static constexpr std::string_view name = policies::detail::template_name<detail::compressed_head, Tier, Codec>::value;
  using store = lwcl::cache::compressed_store<typename Tier::store, Codec>;

  Tier tier{};
  Codec codec{};

  std::unique_ptr<lwcl::cache::feature_cache<store>> open(const std::filesystem::path& run_dir) const {
    return std::apply(
        [&](auto&&... args) {
          return std::make_unique<lwcl::cache::feature_cache<store>>(codec, std::forward<decltype(args)>(args)...);
        },
        tier.store_args(run_dir));
  }
};
static_assert(cache_policy<compressed<>>);
static_assert(cache_policy<compressed<disk, codec::exponent_codec>>);
static_assert(cache_policy<compressed<disk, codec::gauss_codec>>);

}  // namespace lwcl::policies::cache
