#pragma once
// A pruning criterion chosen by name at run time, and a model cut by it through prune_with (prune.hpp),
// the one function every cut goes through. experiments/prune and the programs that sweep criteria
// (paper_repro/pruning_methods) call it, so that a criterion is dispatched in one place.

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/data/loader.hpp"
#include "lwcl/policies/pruning/activation.hpp"
#include "lwcl/policies/pruning/block_influence.hpp"
#include "lwcl/policies/pruning/concept.hpp"
#include "lwcl/policies/pruning/flap.hpp"
#include "lwcl/policies/pruning/magnitude.hpp"
#include "lwcl/policies/pruning/prune.hpp"
#include "lwcl/policies/pruning/random.hpp"
#include "lwcl/policies/pruning/taylor.hpp"
#include "lwcl/policies/pruning/wanda_sp.hpp"
#include "lwcl/prune/allocate.hpp"

namespace lwcl::policies::pruning {

// Every criterion with_criterion knows, as an error message lists them.
inline constexpr const char* criterion_names =
    "random, magnitude_l1, magnitude_l2, wanda_sp, wanda_sp_in_out, flap, flap_pooled, taylor, activation, block_influence";
inline constexpr std::array<std::string_view, 10> criteria = {"random",      "magnitude_l1", "magnitude_l2", "wanda_sp",
                                                              "wanda_sp_in_out", "flap",      "flap_pooled",  "taylor",
                                                              "activation",  "block_influence"};
inline bool known_criterion(std::string_view name) {
  return std::find(criteria.begin(), criteria.end(), name) != criteria.end();
}

// Calls f with the criterion policy called `name` (`seed`: the random criterion's).
template <class F>
decltype(auto) with_criterion(const std::string& name, std::uint64_t seed, F&& f) {
  if (name == "random") return f(random{seed});
  if (name == "magnitude_l1") return f(magnitude_l1{});
  if (name == "magnitude_l2") return f(magnitude_l2{});
  if (name == "wanda_sp") return f(wanda_sp{});
  if (name == "wanda_sp_in_out") return f(wanda_sp_in_out{});
  if (name == "flap") return f(flap{});
  if (name == "flap_pooled") return f(flap_pooled{});
  if (name == "taylor") return f(taylor{});
  if (name == "activation") return f(activation{});
  if (name == "block_influence") return f(block_influence{});
  fail("pruning criterion '", name, "' is unknown (expected one of ", criterion_names, ")");
}

// The allocation a criterion is published with: FLAP ranks KV groups and FFN channels together across
// layers by parameter cost (its adaptive structure search); block influence scores whole layers; the
// others keep the same ratio in every layer, heads and FFN channels alike.
inline prune::allocation published_allocation(const std::string& criterion) {
  prune::allocation a;
  if (criterion == "flap") {
    a.global = true;
    a.joint = true;
  } else if (criterion == "block_influence") {
    a.gran = prune::granularity::layers;
  }
  return a;
}

// prune_options with the criterion's name and the random criterion's seed.
struct named_options : prune_options {
  std::string criterion = "wanda_sp";
  std::uint64_t seed = 0;  // the random criterion's
};

template <class Net>
using named_result = pruned_model<Net>;

// `teacher` cut by the criterion `o.criterion` (prune_with, prune.hpp), with statistics from the first
// `o.calib_batches` batches of `loader`. Throws lwcl::error for an unknown criterion, an allocation the
// criterion does not allow (block_influence at width granularity), or a parameter fraction no ratio
// reaches.
template <class Net>
named_result<Net> prune_named(const Net& teacher, const data::batch_loader& loader, const named_options& o) {
  return with_criterion(o.criterion, o.seed, [&](const auto& policy) { return prune_with(policy, teacher, loader, o); });
}

}  // namespace lwcl::policies::pruning
