#pragma once
// The segmentation policy kind: cuts the student into segments that tile its layers, optionally one
// segmentation per stage; segment_model and segmentation_stages call a policy with its result checked.

#include <concepts>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/tensor/dtype.hpp"
#include "lwcl/model/config.hpp"
#include "lwcl/policies/named.hpp"
#include "lwcl/policies/segmentation/segment.hpp"

namespace lwcl::policies {

// Requires: named_policy, and a const p.segments(model) taking a model::model_config and returning the
// student's segments as std::vector<segment> tiling [0, model.n_layers()) in order. Runtime numbers (a
// byte budget, boundaries, difficulties) are data members of the policy. Optionally p.stages(model)
// returning segment_stages, one segmentation per stage, for policies whose segments grow.
template <class P>
concept segmentation_policy = named_policy<P> && requires(const P& p, const model::model_config& m) {
  { p.segments(m) } -> std::same_as<std::vector<segment>>;
};

// Whether a segmentation policy gives one segmentation per stage (p.stages(model) -> segment_stages).
template <class P>
concept grows_in_stages = requires(const P& p, const model::model_config& m) {
  { p.stages(m) } -> std::same_as<segment_stages>;
};

// ---- what a segmentation policy may ask of the run -------------------------------------------------
// Named capabilities: the pipeline sets these members, on its own copy of the policy when it segments
// (the bundle is never written to), only for a policy that satisfies the concept; each policy that
// relies on one checks it with a static_assert where it is declared.

// Requires: a data member layer_difficulty, a std::vector<double>. Left empty, the pipeline fills it
// with each student layer's initial local loss on teacher inputs before segmenting, and a resumed run
// restores the values the interrupted run measured.
template <class P>
concept needs_layer_difficulty = requires(P& p) {
  { p.layer_difficulty } -> std::same_as<std::vector<double>&>;
};

// Requires: data members batch and seq (index_t), type (dtype) and input_tensors (index_t). Left with
// batch and seq both 0, the pipeline sets them to the run's batch shape and dtype, and input_tensors to
// the (B, T, C) feature tensors it holds besides the trainer's own.
template <class P>
concept needs_batch_shape = requires(P& p) {
  { p.batch } -> std::same_as<index_t&>;
  { p.seq } -> std::same_as<index_t&>;
  { p.type } -> std::same_as<dtype&>;
  { p.input_tensors } -> std::same_as<index_t&>;
};

// p.segments(model), checked to tile the model.
template <segmentation_policy P>
std::vector<segment> segment_model(const P& p, const model::model_config& m) {
  std::vector<segment> segs = p.segments(m);
  check_tiling(segs, m.n_layers(), P::name);
  return segs;
}

// The segmentation of every stage: p.stages(model) where the policy grows its segments, otherwise the
// one segmentation p.segments(model). Each stage is checked to tile the model.
template <segmentation_policy P>
segment_stages segmentation_stages(const P& p, const model::model_config& m) {
  segment_stages stages;
  if constexpr (grows_in_stages<P>)
    stages = p.stages(m);
  else
    stages.push_back(p.segments(m));
  check(!stages.empty(), P::name, ": returned no stages, expected at least one segmentation");
  for (const auto& s : stages) check_tiling(s, m.n_layers(), P::name);
  return stages;
}

}  // namespace lwcl::policies
