#pragma once
// A pruning criterion chosen by name at run time, and a model cut by it: calibration statistics (and
// local gradients) gathered as the criterion needs them, its scores, an allocation (optionally searched
// for the group ratio that removes a given fraction of all parameters), and FLAP's bias compensation.
// experiments/prune and the programs that sweep criteria (paper_repro/pruning_methods) call it, so that
// a criterion is dispatched in one place.

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/data/loader.hpp"
#include "lwcl/policies/pruning/activation.hpp"
#include "lwcl/policies/pruning/block_influence.hpp"
#include "lwcl/policies/pruning/concept.hpp"
#include "lwcl/policies/pruning/flap.hpp"
#include "lwcl/policies/pruning/magnitude.hpp"
#include "lwcl/policies/pruning/random.hpp"
#include "lwcl/policies/pruning/taylor.hpp"
#include "lwcl/policies/pruning/wanda_sp.hpp"
#include "lwcl/prune/allocate.hpp"
#include "lwcl/prune/local_gradients.hpp"
#include "lwcl/prune/stats.hpp"
#include "lwcl/prune/surgery.hpp"

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

// FLAP's two criteria fold the calibration means of removed channels into the next biases.
inline bool compensates(const std::string& criterion) { return criterion == "flap" || criterion == "flap_pooled"; }

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

struct named_options {
  std::string criterion = "wanda_sp";
  prune::allocation alloc;       // its ratio: the fraction of the chosen groups removed
  double param_ratio = -1;       // >= 0: instead, the group ratio whose plan removes this fraction of all parameters
  bool bias_compensation = true;  // for flap and flap_pooled
  std::uint64_t seed = 0;        // the random criterion's
  index_t calib_batches = 8;     // of the loader, for statistics and gradients
  bool quiet = false;            // no line for param_ratio's search
};

template <class Net>
struct named_result {
  std::unique_ptr<Net> student;
  std::vector<index_t> kept;     // the teacher layers that remain, in order
  double group_ratio = 0;        // the allocation's ratio (param_ratio's search result)
  bool bias_compensation = false;
  double calib_seconds = 0;      // statistics and gradients
  index_t calib_tokens = 0;      // 0 for a criterion that reads the weights only
};

// `teacher` cut by the criterion `o.criterion`, with statistics from the first `o.calib_batches` batches
// of `loader`. Throws lwcl::error for an unknown criterion, an allocation the criterion does not allow
// (block_influence at width granularity), or a parameter fraction no ratio reaches.
template <class Net>
named_result<Net> prune_named(const Net& teacher, const data::batch_loader& loader, const named_options& o) {
  named_result<Net> r;
  const auto& cfg = teacher.config();
  const index_t B = loader.batch_size(), T = loader.seq_len();
  prune::allocation a = o.alloc;
  a.validate();
  timer clock;
  with_criterion(o.criterion, o.seed, [&](auto policy) {
    using P = decltype(policy);
    std::optional<prune::calibration_stats> stats;
    const bool wants_means = compensates(o.criterion) && o.bias_compensation;
    if (P::needs_statistics || wants_means) stats = prune::collect_statistics(teacher, loader, B, T, o.calib_batches);
    auto in = prune::make_scoring_input(teacher, stats);
    if constexpr (P::needs_gradients) in.gradients = prune::collect_local_gradients(teacher, loader, B, T, o.calib_batches);
    r.calib_seconds = clock.seconds();
    r.calib_tokens = stats || P::needs_gradients ? o.calib_batches * B * T : 0;
    const auto scores = policies::score_groups(policy, in);
    if (o.param_ratio >= 0) {
      check(o.param_ratio < 1, "prune_named: param_ratio ", o.param_ratio, " is not below 1");
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
        std::printf("prune: %s: group ratio %.3f removes the parameter fraction closest to %.3f\n", o.criterion.c_str(),
                    best, o.param_ratio);
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
  });
  return r;
}

}  // namespace lwcl::policies::pruning
