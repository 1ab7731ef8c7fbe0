#pragma once
// The cache policy kind: names a feature store (cache/) and opens the feature cache a run reads its
// boundary features from.

#include <concepts>
#include <filesystem>
#include <memory>

#include "lwcl/cache/concept.hpp"
#include "lwcl/cache/feature_cache.hpp"
#include "lwcl/cache/memory.hpp"
#include "lwcl/policies/named.hpp"

namespace lwcl::policies {

// Requires: named_policy; a nested type P::store, the feature store (cache/concept.hpp) the
// trainer reads boundary features from; and a const p.open(run_dir) taking a std::filesystem::path and
// returning a std::unique_ptr<lwcl::cache::feature_cache<P::store>> ready for the run (a directory-backed
// store lives under run_dir, and an unusable place is lwcl::error here).
template <class P>
concept cache_policy = named_policy<P> && requires(const P& p, const std::filesystem::path& run_dir) {
  typename P::store;
  requires lwcl::cache::feature_store<typename P::store>;
  { p.open(run_dir) } -> std::same_as<std::unique_ptr<lwcl::cache::feature_cache<typename P::store>>>;
};

// Requires: a nested type P::staging, a cache::staging_memory: the memory the prefetcher stages this
// policy's records in instead of the heap (pinned host memory under CUDA, so copies to the device are
// asynchronous).
template <class P>
concept stages_in_own_memory = requires {
  typename P::staging;
  requires lwcl::cache::staging_memory<typename P::staging>;
};

}  // namespace lwcl::policies
