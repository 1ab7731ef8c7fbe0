#pragma once
// How a layer-wise run plans its visits (budget.hpp holds the rules, this applies them to a run): where
// a visit stands among all of them, the FLOPs and measured pace of a segment step, a phase's steps shared
// by difficulty, a visit's warm-up, and under a seconds budget its deadline and the length its
// learning-rate schedule is planned for from its first step.

#include <algorithm>
#include <cstddef>
#include <vector>

#include "lwcl/distill/pipeline/budget.hpp"
#include "lwcl/distill/pipeline/options.hpp"
#include "lwcl/distill/pipeline/run_state.hpp"
#include "lwcl/policies/segmentation/segment.hpp"
#include "lwcl/prune/plan.hpp"

namespace lwcl::distill {

// Visits over all phases.
template <class B, class C, class L>
index_t visits_total(const run_state<B, C, L>& s) {
  index_t n = 0;
  for (const auto& ph : s.phases) n += static_cast<index_t>(ph.segments.size());
  return n;
}

// The run-wide index of phase `phase`'s visit at position `pos`.
template <class B, class C, class L>
index_t global_visit(const run_state<B, C, L>& s, std::size_t phase, index_t pos) {
  index_t g = 0;
  for (std::size_t p = 0; p < phase; ++p) g += static_cast<index_t>(s.phases[p].segments.size());
  return g + pos;
}

// The FLOPs of one training step of the segment [first, last): forward and backward, 3 x forward.
template <class B, class C, class L>
double step_flops(const run_state<B, C, L>& s, index_t first, index_t last) {
  return 3 * static_cast<double>(s.B * s.T) * prune::layers_flops_per_token(s.st.config, first, last, s.T);
}

// The seconds a step of [first, last) took at the finished visits' pace (seconds per FLOP over all their
// steps); 0 before any visit took a step.
template <class B, class C, class L>
double visits_seconds_per_step(const run_state<B, C, L>& s, index_t first, index_t last) {
  double seconds = 0, flops = 0;
  for (const auto& v : s.res.visits) {
    if (v.steps <= 0) continue;
    seconds += v.seconds;
    flops += static_cast<double>(v.steps) * step_flops(s, v.first, v.last);
  }
  return flops > 0 && seconds > 0 ? seconds / flops * step_flops(s, first, last) : 0.0;
}

// The same, or before any visit at the teacher pass's pace per FLOP; 0 when nothing was measured (a
// resumed run whose cache held every feature).
template <class B, class C, class L>
double seconds_per_step(const run_state<B, C, L>& s, index_t first, index_t last) {
  if (const double v = visits_seconds_per_step(s, first, last); v > 0) return v;
  const double flops = s.teacher_pass_flops, seconds = s.res.teacher_pass_seconds;
  return flops > 0 && seconds > 0 ? seconds / flops * step_flops(s, first, last) : 0.0;
}

// The difficulties of a phase's segments in visiting order.
inline std::vector<double> in_visiting_order(const std::vector<index_t>& order, const std::vector<double>& difficulty) {
  std::vector<double> out;
  for (const index_t k : order) out.push_back(difficulty[static_cast<std::size_t>(k)]);
  return out;
}

// Under budget_share::difficulty and a steps budget: the steps planned for phase p's visits shared again
// in proportion to their segments' difficulties, each at least min_visit_steps.
template <class B, class C, class L>
void share_phase_steps(run_state<B, C, L>& s, std::size_t p, const std::vector<index_t>& order,
                       const std::vector<double>& difficulty) {
  const auto g0 = static_cast<std::size_t>(global_visit(s, p, 0));
  long total = 0;
  for (std::size_t i = 0; i < order.size(); ++i) total += s.plan.visit_steps[g0 + i];
  const auto steps = share_steps(total, share_weights(budget_share::difficulty, in_visiting_order(order, difficulty)),
                                 s.opt.min_visit_steps);
  for (std::size_t i = 0; i < order.size(); ++i) s.plan.visit_steps[g0 + i] = steps[i];
}

// Whether the student feature at boundary x (not the input of the visit at `pos`) can be read again
// from visit `pos` of phase p on: by a visit of this phase starting at x with student inputs before any
// visit (this one included) trains a segment starting below x, which makes it stale; or by a later
// phase that reads student inputs at x, unless a phase before it trains below x. `reads_student[q]`:
// whether phase q's visits read student inputs at all.
template <class B, class C, class L>
bool read_again(const run_state<B, C, L>& s, const std::vector<bool>& reads_student, std::size_t p, index_t pos,
                const std::vector<index_t>& order, index_t x) {
  for (std::size_t i = static_cast<std::size_t>(pos); i < order.size(); ++i) {
    const auto& sg = s.phases[p].segments[static_cast<std::size_t>(order[i])];
    if (sg.first == x && reads_student[p] && i > static_cast<std::size_t>(pos)) return true;
    if (sg.first < x) return false;
  }
  for (std::size_t q = p + 1; q < s.phases.size(); ++q) {
    bool below = false;
    for (const auto& sg : s.phases[q].segments) {
      if (sg.first == x && reads_student[q]) return true;
      below = below || sg.first < x;
    }
    if (below) return false;
  }
  return false;
}

// Before visit `pos` of phase p (whose input boundary is `input`): the student features nothing will
// read again released, so that the cache holds only what the rest of the run needs.
template <class B, class C, class L>
void release_dead_features(run_state<B, C, L>& s, const std::vector<bool>& reads_student, std::size_t p, index_t pos,
                           const std::vector<index_t>& order, index_t input) {
  for (index_t x = 1; x < s.st.config.n_layers(); ++x)
    if (x != input && s.sf->holds(x) && !read_again(s, reads_student, p, pos, order, x)) s.sf->release(x);
}

// The warm-up of a visit whose schedule spans `steps` steps: warmup_steps, at most half of them.
inline long warmup_of(const pipeline_options& opt, long steps) { return std::min(opt.warmup_steps, steps / 2); }

// Under a seconds budget, when a visit starts (at step s0 of `planned` at most): its deadline, its share
// of the layer-wise time left (`layerwise_seconds` in all); and the steps its schedule is planned for,
// from the pace measured so far (refitted after its first steps by the visit).
struct visit_time {
  double deadline = 0;
  long lr_steps = 0;
};

template <class B, class C, class L>
visit_time plan_visit_time(const run_state<B, C, L>& s, double layerwise_seconds, std::size_t p, index_t pos,
                           const std::vector<index_t>& order, const std::vector<double>& difficulty,
                           const policies::segment& sg, long s0, long planned) {
  std::vector<double> weights(order.size() - static_cast<std::size_t>(pos), 1.0);
  if (s.opt.share == budget_share::difficulty && !difficulty.empty()) {
    const auto all = share_weights(s.opt.share, in_visiting_order(order, difficulty));
    weights.assign(all.begin() + pos, all.end());
  }
  const long later = static_cast<long>(visits_total(s)) - static_cast<long>(global_visit(s, p, 0)) -
                     static_cast<long>(order.size());
  visit_time t;
  t.deadline = s.elapsed() + std::max(0.0, layerwise_seconds - s.elapsed()) * visit_time_share(weights, later);
  t.lr_steps = s0 + steps_for_seconds(t.deadline - s.elapsed(), seconds_per_step(s, sg.first, sg.last),
                                      s.opt.min_visit_steps, planned - s0);
  return t;
}

}  // namespace lwcl::distill
