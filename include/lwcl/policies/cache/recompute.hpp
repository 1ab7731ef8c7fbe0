#pragma once
// recompute: no feature cache. Boundary features are produced by running the teacher (and the student
// upstream) again for every batch, trading compute for memory; the default cache of a bundle until a
// tiered store (device, host, disk, compressed) is chosen.

#include <string_view>

#include "lwcl/policies/concepts.hpp"

namespace lwcl::policies::cache {

struct recompute {
  // The store type of a policy that keeps nothing.
  struct no_store {};

  static constexpr std::string_view name = "recompute";
  using store = no_store;
};
static_assert(cache_policy<recompute>);

}  // namespace lwcl::policies::cache
