#pragma once
// host: the feature cache in RAM. Boundary features live in host memory for the whole run, so a segment
// step reads them with a memcpy; the fastest tier when the features fit.

#include <filesystem>
#include <memory>
#include <string_view>
#include <tuple>

#include "lwcl/cache/feature_cache.hpp"
#include "lwcl/cache/host_store.hpp"
#include "lwcl/policies/cache/concept.hpp"

namespace lwcl::policies::cache {

struct host {
  static constexpr std::string_view name = "host";
  using store = lwcl::cache::host_store<>;

  // The store's constructor arguments for a run directory (none: RAM needs no place).
  std::tuple<> store_args(const std::filesystem::path&) const { return {}; }
  std::unique_ptr<lwcl::cache::feature_cache<store>> open(const std::filesystem::path&) const {
    return std::make_unique<lwcl::cache::feature_cache<store>>();
  }
};
static_assert(cache_policy<host>);

}  // namespace lwcl::policies::cache
