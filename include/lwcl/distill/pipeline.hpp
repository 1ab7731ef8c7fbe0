#pragma once
// distill::pipeline<policy_set>: layer-wise curriculum recovery of a pruned student, driven by a policy
// bundle (DESIGN.md sections 1, 4 and 6). The segmentation policy cuts the student into segments, the
// curriculum turns them into phases (order x input schedule x growth, optionally closed by end-to-end
// logit KD), the cache policy holds the boundary features, the loss policy is each segment's local loss.
// The run directory holds config.json, metrics.jsonl, checkpoints (a killed run resumes bitwise under
// step and token budgets), report.json (the result), student/ and the plots loss_curves.png, memory.png
// and cumulative_error.png.
//
// The parts, one job each, under distill/pipeline/: budget.hpp (what a run may spend), options.hpp,
// result.hpp (visit and run reports, report.json), student_features.hpp (feature versions and refresh),
// feature_feed.hpp (a visit's features in compute memory), schedule.hpp (the segmentation and curriculum
// as the run sees them), run_state.hpp (what one run holds while it runs), teacher_pass.hpp, resume.hpp
// (where a run starts, its checkpoints), final_kd.hpp (the closing KD stage), run.hpp (the visits).

#include <filesystem>
#include <functional>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "lwcl/data/loader.hpp"
#include "lwcl/distill/pipeline/budget.hpp"
#include "lwcl/distill/pipeline/options.hpp"
#include "lwcl/distill/pipeline/result.hpp"
#include "lwcl/distill/pipeline/run.hpp"
#include "lwcl/distill/pipeline/schedule.hpp"
#include "lwcl/distill/student_state.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/policies/concepts.hpp"
#include "lwcl/policies/policy_set.hpp"

namespace lwcl::distill {

template <class PolicySet, class Backend = typename PolicySet::backend_type>
class pipeline {
 public:
  using run_type = pipeline_run<Backend, typename PolicySet::cache_type, typename PolicySet::loss_type>;
  using net_type = model::transformer<Backend>;
  // Loads (or builds) the teacher; called for the teacher pass and the final KD stage only, and the
  // model is released after each, so it is never resident while segments train.
  using teacher_source = typename run_type::teacher_source;

  static_assert(policies::segmentation_policy<typename PolicySet::segmentation_type>);
  static_assert(policies::curriculum_policy<typename PolicySet::curriculum_type>);
  static_assert(policies::cache_policy<typename PolicySet::cache_type>);
  static_assert(PolicySet::loss_type::target == policies::loss_target::features,
                "pipeline: the loss slot is each segment's local loss on boundary features; pick mse, nmse, cosine "
                "or a weighted_sum of them (logit_kl belongs to the final KD stage)");
  static_assert(std::is_same_v<Backend, typename PolicySet::backend_type>,
                "pipeline<policy_set, Backend>: Backend must be the backend the bundle's backend slot names");

  pipeline(Backend& be, PolicySet policies, pipeline_options opt = {})
      : be_(be), pol_(std::move(policies)), opt_(std::move(opt)) {}

  const pipeline_options& options() const { return opt_; }
  const PolicySet& policies() const { return pol_; }

  // Recovers `student` (updated in place) towards the teacher. `boundaries` is the layer map: student
  // layer i replaces teacher layers [boundaries[i], boundaries[i + 1]), with boundaries[0] = 0 (both
  // read the same embeddings) and boundaries[L] the teacher's layer count (both feed the same final
  // norm and head); {0, 1, ..., L} after width pruning, prune::boundary_map after layer removal.
  // Training batches come from `loader`. Each call is a run of its own: the bundle as given, a fresh
  // run state.
  pipeline_result run(const teacher_source& load_teacher, student_state& student, const std::vector<index_t>& boundaries,
                      const data::batch_loader& loader, const std::filesystem::path& run_dir) const {
    validate_run(opt_, student, boundaries, loader);
    bundle_schedule<typename PolicySet::segmentation_type, typename PolicySet::curriculum_type> schedule(
        pol_.segmentation, pol_.curriculum);
    run_type r(be_, schedule, pol_.cache, pol_.loss, describe(pol_), opt_, student, boundaries, loader, run_dir);
    return r.execute(load_teacher);
  }

 private:
  Backend& be_;
  PolicySet pol_;
  pipeline_options opt_;
};

// pipeline<policy_set> for a bundle made by make_policies, with its backend object.
template <class PolicySet, class Backend>
pipeline<PolicySet, Backend> make_pipeline(Backend& be, PolicySet policies, pipeline_options opt = {}) {
  return pipeline<PolicySet, Backend>(be, std::move(policies), std::move(opt));
}

}  // namespace lwcl::distill
