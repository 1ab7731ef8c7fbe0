#pragma once
// One C++20 concept per policy kind (segmentation, curriculum and its three axes, pruning criterion,
// feature cache, loss, backend), and the checked calls through which the framework uses a policy: each
// validates what a policy hands back, so a user-written policy that breaks a rule fails loudly.

#include <cmath>
#include <concepts>
#include <filesystem>
#include <memory>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/core/memory.hpp"
#include "lwcl/distill/cache/feature_cache.hpp"
#include "lwcl/model/config.hpp"
#include "lwcl/policies/curriculum/phase.hpp"
#include "lwcl/policies/pruning/concept.hpp"
#include "lwcl/policies/segmentation/segment.hpp"
#include "lwcl/tensor/tensor.hpp"

namespace lwcl::policies {

// Requires: P::name, a static constexpr std::string_view that reports, tables and config.json print.
template <class P>
concept named_policy = requires {
  requires std::same_as<std::remove_cv_t<decltype(P::name)>, std::string_view>;
};

// ---- segmentation ---------------------------------------------------------------------------------

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

// ---- curriculum: order x input schedule x growth --------------------------------------------------

// Requires: named_policy; P::needs_difficulty, a static constexpr bool saying whether the order reads
// the segments' measured difficulties; and a const p.visiting_order(n, difficulty) taking the number of
// segments and a std::span<const double> of per-segment difficulties (empty allowed when
// !needs_difficulty) and returning a permutation of [0, n) as std::vector<index_t>, first visited first.
template <class P>
concept order_policy = named_policy<P> && requires(const P& p, index_t n, std::span<const double> difficulty) {
  typename std::bool_constant<P::needs_difficulty>;
  { p.visiting_order(n, difficulty) } -> std::same_as<std::vector<index_t>>;
};

// Requires: named_policy; P::uses_student_inputs, a static constexpr bool, false when every step trains
// on teacher inputs; and a const p.student_fraction(step) taking the optimiser step (0-based, counted
// within a segment's training) and returning, as a double in [0, 1], the share of student inputs: the
// mix ratio r of x = (1 - r) h_teacher + r h_student, or the probability that a batch uses h_student.
template <class P>
concept input_schedule = named_policy<P> && requires(const P& p, index_t step) {
  typename std::bool_constant<P::uses_student_inputs>;
  { p.student_fraction(step) } -> std::same_as<double>;
};

// Requires: named_policy; a const p.stages(s) taking the segmentation policy's segment_stages and
// returning the segment_stages to train, one per stage, each tiling the model; and p.final_kd,
// convertible to bool, whether an end-to-end logit distillation stage closes the curriculum.
template <class P>
concept growth_policy = named_policy<P> && requires(const P& p, const segment_stages& s) {
  { p.stages(s) } -> std::same_as<segment_stages>;
  { p.final_kd } -> std::convertible_to<bool>;
};

// Requires: named_policy, and const members
//   phases(s): segment_stages -> std::vector<curriculum_phase>, phase i with index i;
//   visiting_order(phase, difficulty) -> std::vector<index_t>, a permutation of the phase's segments
//     (difficulty: one entry per segment, or empty when !phase.needs_difficulty);
//   student_fraction(phase, step) -> double in [0, 1], as input_schedule's;
//   has_final_kd() -> bool, whether an end-to-end logit KD stage follows the last phase.
template <class P>
concept curriculum_policy = named_policy<P> && requires(const P& p, const segment_stages& s, const curriculum_phase& ph,
                                                        std::span<const double> difficulty, index_t step) {
  { p.phases(s) } -> std::same_as<std::vector<curriculum_phase>>;
  { p.visiting_order(ph, difficulty) } -> std::same_as<std::vector<index_t>>;
  { p.student_fraction(ph, step) } -> std::same_as<double>;
  { p.has_final_kd() } -> std::same_as<bool>;
};

// ---- pruning ----------------------------------------------------------------------------------------
// pruning_criterion lives in policies/pruning/concept.hpp (included above).

// ---- feature cache ----------------------------------------------------------------------------------

// Requires: named_policy; a nested type P::store, the feature store (distill/cache/concept.hpp) the
// trainer reads boundary features from; and a const p.open(run_dir) taking a std::filesystem::path and
// returning a std::unique_ptr<distill::feature_cache<P::store>> ready for the run (a directory-backed
// store lives under run_dir, and an unusable place is lwcl::error here).
template <class P>
concept cache_policy = named_policy<P> && requires(const P& p, const std::filesystem::path& run_dir) {
  typename P::store;
  requires distill::feature_store<typename P::store>;
  { p.open(run_dir) } -> std::same_as<std::unique_ptr<distill::feature_cache<typename P::store>>>;
};

// ---- loss -------------------------------------------------------------------------------------------

// What a loss compares: hidden states at a segment boundary, or LM logits (end-to-end KD).
enum class loss_target { features, logits };

// Requires: named_policy; P::target, a static constexpr loss_target; and a const
// p.compute(be, dstudent, scratch, student, teacher, grad_scale) returning the loss as a double and,
// when dstudent is non-empty, accumulating grad_scale * dloss/dstudent into it (the conventions of
// ops/distill_loss.hpp; scratch holds at least 2 * rows elements). Checked with the host backend;
// compute is a template over the backend.
template <class P>
concept loss_policy = named_policy<P> && requires(const P& p, lwcl::backend::cpu& be, const tensor& t, double scale) {
  requires std::same_as<std::remove_cv_t<decltype(P::target)>, loss_target>;
  { p.compute(be, t, t, t, t, scale) } -> std::same_as<double>;
};

// ---- backend ----------------------------------------------------------------------------------------

// Requires: the interface every backend offers the ops: B::name, B::is_device, B::memory_tier, and
// allocate_bytes, deallocate_bytes, fill_zero, copy, synchronize.
template <class B>
concept backend_interface = named_policy<B> && requires(B& be, void* p, const void* q, std::size_t n) {
  typename std::bool_constant<B::is_device>;
  requires std::same_as<std::remove_cv_t<decltype(B::memory_tier)>, lwcl::tier>;
  { be.allocate_bytes(n) } -> std::same_as<void*>;
  be.deallocate_bytes(p, n);
  be.fill_zero(p, n);
  be.copy(p, q, n);
  be.synchronize();
};

// Requires: named_policy; P::is_device, a static constexpr bool; and P::type, the backend class the
// pipeline instantiates (a backend_interface, checked where it is complete: backend::cuda is only
// complete in CUDA translation units). The policy is a tag: it names the backend without creating
// one, so a bundle that selects CUDA can be built and described on a machine without a GPU.
template <class P>
concept backend_policy = named_policy<P> && requires {
  typename P::type;
  typename std::bool_constant<P::is_device>;
};

// ---- checked calls ----------------------------------------------------------------------------------

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

namespace detail {
inline void check_difficulty(std::span<const double> difficulty, std::size_t n, bool needed, std::string_view who) {
  if (!needed && difficulty.empty()) return;
  check(difficulty.size() == n, who, ": got ", difficulty.size(), " segment difficulties, expected one per segment (",
        n, ")", needed ? "" : " or none");
  for (std::size_t k = 0; k < n; ++k)
    check(std::isfinite(difficulty[k]), who, ": difficulty of segment ", k, " is ", difficulty[k],
          ", expected a finite value");
}
}  // namespace detail

// o.visiting_order(n, difficulty) with the difficulties and the returned permutation checked.
template <order_policy P>
std::vector<index_t> visiting_order(const P& o, index_t n, std::span<const double> difficulty) {
  check(n >= 0, P::name, ": ", n, " segments, expected a count >= 0");
  detail::check_difficulty(difficulty, static_cast<std::size_t>(n), P::needs_difficulty, P::name);
  std::vector<index_t> order = o.visiting_order(n, difficulty);
  check_permutation(order, n, P::name);
  return order;
}

// c.phases(stages) with every phase checked: indices 0, 1, ... in order, segments tiling the model.
template <curriculum_policy P>
std::vector<curriculum_phase> curriculum_phases(const P& c, const segment_stages& stages, index_t n_layers) {
  std::vector<curriculum_phase> phases = c.phases(stages);
  check(!phases.empty(), P::name, ": returned no phases, expected at least one");
  for (std::size_t i = 0; i < phases.size(); ++i) {
    check(phases[i].index == i, P::name, ": phase ", i, " carries index ", phases[i].index, ", expected ", i);
    check_tiling(phases[i].segments, n_layers, P::name);
  }
  return phases;
}

// c.visiting_order(phase, difficulty) with the difficulties and the returned permutation checked.
template <curriculum_policy P>
std::vector<index_t> visiting_order(const P& c, const curriculum_phase& phase, std::span<const double> difficulty) {
  const auto n = static_cast<index_t>(phase.segments.size());
  detail::check_difficulty(difficulty, phase.segments.size(), phase.needs_difficulty, P::name);
  std::vector<index_t> order = c.visiting_order(phase, difficulty);
  check_permutation(order, n, P::name);
  return order;
}

// c.student_fraction(phase, step), checked to be a share in [0, 1].
template <curriculum_policy P>
double student_fraction(const P& c, const curriculum_phase& phase, index_t step) {
  check(step >= 0, P::name, ": step ", step, ", expected a step >= 0");
  const double r = c.student_fraction(phase, step);
  check(r >= 0 && r <= 1, P::name, ": student-input share ", r, " at step ", step, " of phase ", phase.index,
        ", expected a value in [0, 1]");
  return r;
}

}  // namespace lwcl::policies
