#pragma once
// A model cut by a pruning criterion, in one function every path goes through: the bundle's pruning slot
// (distill::compress), a criterion chosen by name at run time (by_name.hpp's prune_named) and the fixed
// cuts of uniform.hpp. Calibration statistics and local gradients are gathered as the criterion needs
// them; its scores go to an allocation (optionally searched for the group ratio that removes a given
// fraction of all parameters); FLAP's criteria fold the removed channels' means into the next biases.

#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/data/loader.hpp"
#include "lwcl/model/layer_map.hpp"
#include "lwcl/policies/pruning/concept.hpp"
#include "lwcl/policies/pruning/flap.hpp"
#include "lwcl/prune/allocate.hpp"
#include "lwcl/prune/local_gradients.hpp"
#include "lwcl/prune/stats.hpp"
#include "lwcl/prune/surgery.hpp"

namespace lwcl::policies::pruning {

struct prune_options {
  prune::allocation alloc;        // its ratio: the fraction of the chosen groups removed
  double param_ratio = -1;        // >= 0: instead, the group ratio whose plan removes this fraction of all parameters
  bool bias_compensation = true;  // for flap and flap_pooled
  index_t calib_batches = 8;      // of the loader, for statistics and gradients
  bool quiet = false;             // no line for param_ratio's search
};

template <class Net>
struct pruned_model {
  std::unique_ptr<Net> student;
  std::vector<index_t> kept;  // the teacher layers that remain, in order
  index_t teacher_layers = 0;
  double group_ratio = 0;  // the allocation's ratio (param_ratio's search result)
  bool bias_compensation = false;
  double calib_seconds = 0;  // statistics and gradients
  index_t calib_tokens = 0;  // 0 for a criterion that reads the weights only
  // The layer map for recovery: student layer i replaces teacher layers [b[i], b[i + 1]).
  std::vector<index_t> boundaries() const { return model::boundaries_of_kept_layers(kept, teacher_layers); }
};

// Whether a criterion folds the calibration means of removed channels into the next biases (FLAP's two).
inline bool compensates(std::string_view criterion) { return criterion == "flap" || criterion == "flap_pooled"; }

// `teacher` (a model::transformer or model::encoder) cut by `criterion`, with statistics from the first
// `o.calib_batches` batches of `calib`. Throws lwcl::error for an allocation the criterion does not allow
// (block_influence at width granularity) or a parameter fraction no ratio reaches.
template <pruning_criterion P, class Net>
pruned_model<Net> prune_with(const P& criterion, const Net& teacher, const data::batch_loader& calib,
                             const prune_options& o) {
  pruned_model<Net> r;
  const auto& cfg = teacher.config();
  r.teacher_layers = cfg.n_layers();
  const index_t B = calib.batch_size(), T = calib.seq_len();
  prune::allocation a = o.alloc;
  a.validate();
  timer clock;
  std::optional<prune::calibration_stats> stats;
  const bool wants_means = compensates(P::name) && o.bias_compensation;
  if (P::needs_statistics || wants_means) stats = prune::collect_statistics(teacher, calib, B, T, o.calib_batches);
  auto in = prune::make_scoring_input(teacher, stats);
  if constexpr (P::needs_gradients) {
    if constexpr (requires { prune::collect_local_gradients(teacher, calib, B, T, o.calib_batches); })
      in.gradients = prune::collect_local_gradients(teacher, calib, B, T, o.calib_batches);
    else
      fail("prune: ", P::name, " reads local gradients of the LM loss, which a ", model::family_name(cfg.fam),
           " encoder has no head for; pick a criterion that reads weights or activations");
  }
  r.calib_seconds = clock.seconds();
  r.calib_tokens = stats || P::needs_gradients ? o.calib_batches * B * T : 0;
  const auto scores = score_groups(criterion, in);
  if (o.param_ratio >= 0) {
    check(o.param_ratio < 1, "prune: param_ratio ", o.param_ratio, " is not below 1");
    // The group ratio whose plan removes the fraction of parameters closest to param_ratio.
    const double total = static_cast<double>(prune::model_parameters(cfg));
    double best = -1, best_gap = 2;
    for (int step = 0; step < 200; ++step) {
      a.ratio = step / 200.0;
      prune::prune_plan trial;
      try {
        trial = prune::allocate(teacher.backend(), cfg, scores, a);
      } catch (const lwcl::error&) {
        if (step == 0) throw;  // not a ratio too high: the criterion and the allocation do not go together
        break;                 // higher ratios empty a layer
      }
      const double removed = 1.0 - static_cast<double>(prune::model_parameters(prune::pruned_config(cfg, trial))) / total;
      if (std::abs(removed - o.param_ratio) < best_gap) {
        best_gap = std::abs(removed - o.param_ratio);
        best = a.ratio;
      }
    }
    a.ratio = best;
    if (!o.quiet)
      std::printf("prune: %s: group ratio %.3f removes the parameter fraction closest to %.3f\n",
                  std::string(P::name).c_str(), best, o.param_ratio);
  }
  r.group_ratio = a.ratio;
  const auto plan = prune::allocate(teacher.backend(), cfg, scores, a);
  for (index_t l = 0; l < cfg.n_layers(); ++l)
    if (!plan.layers[static_cast<std::size_t>(l)].removed) r.kept.push_back(l);
  if (wants_means) {
    prune::bias_compensation comp;
    for (const auto& m : flap::channel_means(in)) {
      comp.attn_mean.push_back(m.attn);
      comp.mlp_mean.push_back(m.mlp);
    }
    r.student = prune::apply_plan(teacher, plan, &comp);
    r.bias_compensation = true;
  } else {
    r.student = prune::apply_plan(teacher, plan);
  }
  return r;
}

}  // namespace lwcl::policies::pruning
