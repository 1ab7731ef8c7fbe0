#pragma once
// The host-backend instantiations every experiment program shares (teacher training, calibration and
// surgery, end-to-end KD, evaluation, checkpoints, and the comparison harness of a Wanda-sp student),
// declared extern here and compiled once, in host_instances.cpp, into the library every program links.
// Each program's unit then compiles only what is its own (its bundles' pipelines); docs/building.md has
// the measurement behind it. The library itself stays header-only: a program outside experiments/
// instantiates these as usual.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/data/loader.hpp"
#include "lwcl/distill/compare/comparison.hpp"
#include "lwcl/distill/e2e_kd.hpp"
#include "lwcl/eval/cumulative_error.hpp"
#include "lwcl/eval/perplexity.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/policies/curriculum/curriculum.hpp"
#include "lwcl/policies/curriculum/teacher_inputs.hpp"
#include "lwcl/policies/pruning/wanda_sp.hpp"
#include "lwcl/prune/local_gradients.hpp"
#include "lwcl/prune/stats.hpp"
#include "lwcl/prune/surgery.hpp"
#include "lwcl/train/lm_training.hpp"

#ifndef LWCL_HOST_INSTANCES_DEFINE
#define LWCL_HOST_INSTANCE extern template
#else
#define LWCL_HOST_INSTANCE template
#endif

LWCL_HOST_INSTANCE lwcl::train::lm_result lwcl::train::train_lm<lwcl::backend::cpu>(
    lwcl::backend::cpu&, const lwcl::train::lm_options&, const std::string&, const std::string&, const lwcl::train::lm_hooks&);
LWCL_HOST_INSTANCE lwcl::distill::e2e_result lwcl::distill::train_e2e_kd<lwcl::backend::cpu>(
    lwcl::model::transformer<lwcl::backend::cpu>&, lwcl::model::transformer<lwcl::backend::cpu>&,
    const lwcl::data::batch_loader&, lwcl::index_t, lwcl::index_t, const lwcl::distill::e2e_options&, lwcl::metrics_writer*);
LWCL_HOST_INSTANCE lwcl::eval::perplexity_result lwcl::eval::perplexity<lwcl::backend::cpu>(
    lwcl::model::transformer<lwcl::backend::cpu>&, const std::vector<std::int32_t>&, lwcl::index_t, lwcl::index_t, std::string);
LWCL_HOST_INSTANCE std::vector<double> lwcl::eval::cumulative_error<lwcl::backend::cpu>(
    lwcl::model::transformer<lwcl::backend::cpu>&, lwcl::model::transformer<lwcl::backend::cpu>&,
    const std::vector<lwcl::index_t>&, const std::vector<std::vector<std::int32_t>>&, lwcl::index_t, lwcl::index_t);
LWCL_HOST_INSTANCE lwcl::prune::calibration_stats lwcl::prune::collect_statistics<lwcl::backend::cpu>(
    const lwcl::model::transformer<lwcl::backend::cpu>&, const lwcl::data::batch_loader&, lwcl::index_t, lwcl::index_t,
    lwcl::index_t);
LWCL_HOST_INSTANCE lwcl::prune::scoring_input lwcl::prune::make_scoring_input<lwcl::backend::cpu>(
    const lwcl::model::transformer<lwcl::backend::cpu>&, std::optional<lwcl::prune::calibration_stats>);
LWCL_HOST_INSTANCE std::unique_ptr<lwcl::model::transformer<lwcl::backend::cpu>> lwcl::prune::apply_plan<lwcl::backend::cpu>(
    const lwcl::model::transformer<lwcl::backend::cpu>&, const lwcl::prune::prune_plan&, const lwcl::prune::bias_compensation*);
LWCL_HOST_INSTANCE lwcl::prune::local_gradients lwcl::prune::collect_local_gradients<lwcl::backend::cpu>(
    const lwcl::model::transformer<lwcl::backend::cpu>&, const lwcl::data::batch_loader&, lwcl::index_t, lwcl::index_t,
    lwcl::index_t);
LWCL_HOST_INSTANCE void lwcl::checkpoint::save_hf<lwcl::backend::cpu>(const lwcl::model::transformer<lwcl::backend::cpu>&,
                                                                       const std::string&);
LWCL_HOST_INSTANCE void lwcl::checkpoint::load_hf_weights<lwcl::backend::cpu>(lwcl::model::transformer<lwcl::backend::cpu>&,
                                                                               const std::string&);

LWCL_HOST_INSTANCE std::unique_ptr<lwcl::model::transformer<lwcl::backend::cpu>> lwcl::checkpoint::load_hf<lwcl::backend::cpu>(
    lwcl::backend::cpu&, const std::string&, lwcl::dtype);
LWCL_HOST_INSTANCE lwcl::train::cached_lm lwcl::train::ensure_lm<lwcl::backend::cpu>(lwcl::backend::cpu&, const std::string&,
                                                                                    const std::string&, const std::string&);
LWCL_HOST_INSTANCE void lwcl::model::block_forward<lwcl::backend::cpu>(lwcl::backend::cpu&, const lwcl::model::block_shape&,
                                                                        const lwcl::model::block_weights&,
                                                                        lwcl::model::block_acts<lwcl::backend::cpu>&,
                                                                        const lwcl::tensor&, const lwcl::tensor&);
LWCL_HOST_INSTANCE void lwcl::model::block_backward<lwcl::backend::cpu>(
    lwcl::backend::cpu&, const lwcl::model::block_shape&, const lwcl::model::block_weights&, lwcl::model::block_weights&,
    lwcl::model::block_acts<lwcl::backend::cpu>&, lwcl::model::block_acts<lwcl::backend::cpu>&, const lwcl::tensor&,
    const lwcl::tensor&, const lwcl::tensor&);
LWCL_HOST_INSTANCE void lwcl::optim::adamw_step<lwcl::backend::cpu>(lwcl::backend::cpu&, const lwcl::tensor&,
                                                                      const lwcl::tensor&, const lwcl::tensor&,
                                                                      const lwcl::tensor&, const lwcl::optim::adamw_config&,
                                                                      long, double, const lwcl::tensor&);
LWCL_HOST_INSTANCE double lwcl::optim::clip_grad_norm<lwcl::backend::cpu>(lwcl::backend::cpu&, const lwcl::tensor&, double);
LWCL_HOST_INSTANCE class lwcl::distill::compare::comparison<lwcl::backend::cpu, lwcl::policies::pruning::wanda_sp>;

namespace lwcl::experiments {
// The bundles the programs share: the default (two_stage<>, uniform<1>, the host cache, nmse) and the
// baseline without a curriculum (teacher inputs front to back), both of a Wanda-sp student.
using default_bundle = decltype(make_policies(slot<key::pruning>(policies::pruning::wanda_sp{})));
using no_curriculum_bundle = decltype(make_policies(
    slot<key::pruning>(policies::pruning::wanda_sp{}),
    slot<key::curriculum>(policies::curriculum::curriculum<policies::curriculum::front_to_back,
                                                           policies::curriculum::teacher_inputs>{})));
}  // namespace lwcl::experiments
LWCL_HOST_INSTANCE class lwcl::distill::pipeline_run<lwcl::experiments::default_bundle, lwcl::backend::cpu>;
LWCL_HOST_INSTANCE class lwcl::distill::pipeline_run<lwcl::experiments::no_curriculum_bundle, lwcl::backend::cpu>;

#undef LWCL_HOST_INSTANCE

namespace lwcl::experiments {
// The comparison every program in experiments/ runs: recoveries of one Wanda-sp student on the host.
using comparison = distill::compare::comparison<backend::cpu, policies::pruning::wanda_sp>;
}  // namespace lwcl::experiments
