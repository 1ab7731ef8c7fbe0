#pragma once
// The host-backend instantiations every experiment program shares (teacher training, calibration and
// surgery, end-to-end KD, evaluation, checkpoints, the layer-wise run over each host cache tier, and the
// comparison harness of a Wanda-sp student), declared extern here and compiled once, in
// host_instances.cpp, into the library every program links. Each program's unit then compiles only what
// is its own (a bundle_schedule and a pipeline::run per bundle); docs/building.md has
// the measurement behind it. The library itself stays header-only: a program outside experiments/
// instantiates these as usual.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/codec/exponent_codec.hpp"
#include "lwcl/codec/gauss_codec.hpp"
#include "lwcl/codec/zstd_codec.hpp"
#include "lwcl/data/loader.hpp"
#include "studies/comparison.hpp"
#include "lwcl/distill/e2e_kd.hpp"
#include "lwcl/eval/cumulative_error.hpp"
#include "lwcl/eval/held_out.hpp"
#include "lwcl/eval/perplexity.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/policies/cache/compressed.hpp"
#include "lwcl/policies/cache/disk.hpp"
#include "lwcl/policies/cache/host.hpp"
#include "lwcl/policies/loss/nmse.hpp"
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
LWCL_HOST_INSTANCE lwcl::eval::perplexity_result lwcl::eval::perplexity<lwcl::backend::cpu>(
    lwcl::model::transformer<lwcl::backend::cpu>&, const lwcl::eval::held_out_sample&);
LWCL_HOST_INSTANCE std::vector<double> lwcl::eval::cumulative_error<lwcl::backend::cpu>(
    const lwcl::model::weights<lwcl::backend::cpu>&, const lwcl::model::weights<lwcl::backend::cpu>&,
    const std::vector<lwcl::index_t>&, const std::vector<std::vector<std::int32_t>>&, lwcl::index_t, lwcl::index_t);
LWCL_HOST_INSTANCE lwcl::prune::calibration_stats lwcl::prune::collect_statistics<lwcl::backend::cpu>(
    const lwcl::model::weights<lwcl::backend::cpu>&, const lwcl::data::batch_loader&, lwcl::index_t, lwcl::index_t,
    lwcl::index_t);
LWCL_HOST_INSTANCE lwcl::prune::scoring_input lwcl::prune::make_scoring_input<lwcl::backend::cpu>(
    const lwcl::model::weights<lwcl::backend::cpu>&, std::optional<lwcl::prune::calibration_stats>);
LWCL_HOST_INSTANCE std::unique_ptr<lwcl::model::transformer<lwcl::backend::cpu>>
lwcl::prune::apply_plan<lwcl::model::transformer<lwcl::backend::cpu>>(const lwcl::model::transformer<lwcl::backend::cpu>&,
                                                                   const lwcl::prune::prune_plan&,
                                                                   const lwcl::prune::bias_compensation*);
LWCL_HOST_INSTANCE lwcl::prune::local_gradients lwcl::prune::collect_local_gradients<lwcl::backend::cpu>(
    const lwcl::model::transformer<lwcl::backend::cpu>&, const lwcl::data::batch_loader&, lwcl::index_t, lwcl::index_t,
    lwcl::index_t);
LWCL_HOST_INSTANCE void lwcl::checkpoint::save_hf<lwcl::backend::cpu>(const lwcl::model::transformer<lwcl::backend::cpu>&,
                                                                       const std::string&,
                                                                       const lwcl::checkpoint::hf_save_options&);
LWCL_HOST_INSTANCE void lwcl::checkpoint::load_hf_weights<lwcl::backend::cpu>(lwcl::model::transformer<lwcl::backend::cpu>&,
                                                                               const std::string&);

LWCL_HOST_INSTANCE std::unique_ptr<lwcl::model::transformer<lwcl::backend::cpu>> lwcl::checkpoint::load_hf<lwcl::backend::cpu>(
    lwcl::backend::cpu&, const std::string&, lwcl::dtype);
LWCL_HOST_INSTANCE lwcl::train::cached_lm lwcl::train::ensure_lm<lwcl::backend::cpu>(lwcl::backend::cpu&, const std::string&,
                                                                                    const std::string&, const std::string&);
LWCL_HOST_INSTANCE void lwcl::model::block_forward<lwcl::backend::cpu>(lwcl::backend::cpu&, const lwcl::model::block_shape&,
                                                                        const lwcl::model::block_weights&,
                                                                        lwcl::model::block_acts<lwcl::backend::cpu>&,
                                                                        const lwcl::tensor&, const lwcl::tensor&,
                                                                        lwcl::model::linear_input_hook*, lwcl::index_t);
LWCL_HOST_INSTANCE void lwcl::model::block_backward<lwcl::backend::cpu>(
    lwcl::backend::cpu&, const lwcl::model::block_shape&, const lwcl::model::block_weights&, lwcl::model::block_weights&,
    lwcl::model::block_acts<lwcl::backend::cpu>&, lwcl::model::block_acts<lwcl::backend::cpu>&, const lwcl::tensor&,
    const lwcl::tensor&, const lwcl::tensor&, lwcl::model::linear_input_hook*, lwcl::index_t);
LWCL_HOST_INSTANCE void lwcl::optim::adamw_step<lwcl::backend::cpu>(lwcl::backend::cpu&, const lwcl::tensor&,
                                                                      const lwcl::tensor&, const lwcl::tensor&,
                                                                      const lwcl::tensor&, const lwcl::optim::adamw_config&,
                                                                      long, double, const lwcl::tensor&);
LWCL_HOST_INSTANCE double lwcl::optim::clip_grad_norm<lwcl::backend::cpu>(lwcl::backend::cpu&, const lwcl::tensor&, double);
LWCL_HOST_INSTANCE class lwcl::studies::comparison<lwcl::backend::cpu, lwcl::policies::pruning::wanda_sp>;

// The layer-wise run of every bundle on the host with the nmse loss, one per host cache tier: a program
// sweeping curricula or segmentations (or the cache tiers) compiles none of it, only a small
// bundle_schedule per bundle.
LWCL_HOST_INSTANCE class lwcl::distill::pipeline_run<lwcl::backend::cpu, lwcl::policies::cache::host,
                                                      lwcl::policies::loss::nmse>;
LWCL_HOST_INSTANCE class lwcl::distill::pipeline_run<lwcl::backend::cpu, lwcl::policies::cache::disk,
                                                      lwcl::policies::loss::nmse>;
LWCL_HOST_INSTANCE class lwcl::distill::pipeline_run<
    lwcl::backend::cpu, lwcl::policies::cache::compressed<lwcl::policies::cache::host, lwcl::codec::exponent_codec>,
    lwcl::policies::loss::nmse>;
LWCL_HOST_INSTANCE class lwcl::distill::pipeline_run<
    lwcl::backend::cpu, lwcl::policies::cache::compressed<lwcl::policies::cache::host, lwcl::codec::zstd_codec>,
    lwcl::policies::loss::nmse>;
LWCL_HOST_INSTANCE class lwcl::distill::pipeline_run<
    lwcl::backend::cpu, lwcl::policies::cache::compressed<lwcl::policies::cache::host, lwcl::codec::gauss_codec>,
    lwcl::policies::loss::nmse>;
LWCL_HOST_INSTANCE class lwcl::distill::pipeline_run<
    lwcl::backend::cpu, lwcl::policies::cache::compressed<lwcl::policies::cache::disk, lwcl::codec::exponent_codec>,
    lwcl::policies::loss::nmse>;

#undef LWCL_HOST_INSTANCE

namespace lwcl::experiments {
// The comparison every program in experiments/ runs: recoveries of one Wanda-sp student on the host.
using comparison = studies::comparison<backend::cpu, policies::pruning::wanda_sp>;
}  // namespace lwcl::experiments
