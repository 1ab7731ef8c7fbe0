#pragma once
// The curriculum policy kind and its three axes (order, input schedule, growth), and the checked calls
// through which the pipeline asks a curriculum for its phases, visiting orders and student shares.

#include <cmath>
#include <concepts>
#include <cstddef>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/policies/curriculum/phase.hpp"
#include "lwcl/policies/named.hpp"
#include "lwcl/policies/segmentation/segment.hpp"

namespace lwcl::policies {

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

// The segment visits c makes over `stages`: one per segment of every phase.
template <curriculum_policy P>
index_t visit_count(const P& c, const segment_stages& stages, index_t n_layers) {
  index_t n = 0;
  for (const auto& ph : curriculum_phases(c, stages, n_layers)) n += static_cast<index_t>(ph.segments.size());
  return n;
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
