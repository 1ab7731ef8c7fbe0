#pragma once
// The pruning-criterion policy kind: a criterion scores every structural group of a model (query heads,
// KV groups, FFN channels, whole layers) from a prune::scoring_input; an allocation then turns the
// scores into a prune_plan. score_groups runs a criterion with its preconditions checked.

#include <concepts>
#include <string_view>
#include <type_traits>

#include "lwcl/prune/plan.hpp"
#include "lwcl/prune/scoring_input.hpp"

namespace lwcl::policies {

// Requires: P::name, a static constexpr std::string_view naming the criterion in reports;
// P::needs_statistics and P::needs_gradients, static constexpr bools saying whether score() reads the
// calibration statistics and gradients; and a const p.score(in) taking a prune::scoring_input and
// returning prune::group_scores with, for every layer, H head, KVH KV-group and F FFN-channel scores and
// a layer score, a higher score meaning more important (kept first).
template <class P>
concept pruning_criterion = requires(const P& p, const prune::scoring_input& in) {
  requires std::same_as<std::remove_cv_t<decltype(P::name)>, std::string_view>;
  typename std::bool_constant<P::needs_statistics>;
  typename std::bool_constant<P::needs_gradients>;
  { p.score(in) } -> std::same_as<prune::group_scores>;
};

// p.score(in), after checking that the statistics and gradients it needs are there and fit the model,
// and before handing back scores checked to have one finite entry per group.
template <pruning_criterion P>
prune::group_scores score_groups(const P& p, const prune::scoring_input& in) {
  if constexpr (P::needs_statistics) in.statistics(P::name);
  if constexpr (P::needs_gradients) in.local_gradients_for(P::name);
  prune::group_scores s = p.score(in);
  prune::expect_scores_fit(in.config, s);
  return s;
}

}  // namespace lwcl::policies
