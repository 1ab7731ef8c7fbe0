#pragma once
// A model pruned in one call, for programs that prune with a fixed criterion (the study harness, the
// MiniLM study): by width with a criterion and a uniform allocation, or by depth with block influence.
// A criterion chosen by name at run time goes through by_name.hpp's prune_named instead.

#include <memory>
#include <vector>

#include "lwcl/core/config.hpp"
#include "lwcl/data/loader.hpp"
#include "lwcl/policies/pruning/block_influence.hpp"
#include "lwcl/policies/pruning/concept.hpp"
#include "lwcl/prune/allocate.hpp"
#include "lwcl/prune/stats.hpp"
#include "lwcl/prune/surgery.hpp"

namespace lwcl::policies::pruning {

// `criterion` scores from calibration statistics on the first `calib_batches` batches of `calib`,
// `ratio` of every layer's KV groups and FFN channels removed (uniform allocation), physically cut.
// `Net` is a model::transformer or a model::encoder.
template <class Net, pruning_criterion Criterion>
std::unique_ptr<Net> prune_uniform(const Net& teacher, const data::batch_loader& calib, const Criterion& criterion,
                                   double ratio, index_t calib_batches) {
  const auto stats = prune::collect_statistics(teacher, calib, calib.batch_size(), calib.seq_len(), calib_batches);
  const auto scores = score_groups(criterion, prune::make_scoring_input(teacher, stats));
  prune::allocation alloc;
  alloc.ratio = ratio;
  return prune::apply_plan(teacher, prune::allocate(teacher.backend(), teacher.config(), scores, alloc));
}

// Block influence (1 - the cosine between a layer's input and output, on the first `calib_batches`
// batches of `calib`) removes `fraction` of the teacher's layers; `kept` receives the teacher layers
// that remain.
template <class Net>
std::unique_ptr<Net> prune_depth(const Net& teacher, const data::batch_loader& calib, double fraction,
                                 index_t calib_batches, std::vector<index_t>& kept) {
  const auto stats = prune::collect_statistics(teacher, calib, calib.batch_size(), calib.seq_len(), calib_batches);
  const auto scores = score_groups(block_influence{}, prune::make_scoring_input(teacher, stats));
  prune::allocation alloc;
  alloc.gran = prune::granularity::layers;
  alloc.ratio = fraction;
  const auto plan = prune::allocate(teacher.backend(), teacher.config(), scores, alloc);
  kept.clear();
  for (index_t l = 0; l < teacher.config().n_layers(); ++l)
    if (!plan.layers[static_cast<std::size_t>(l)].removed) kept.push_back(l);
  return prune::apply_plan(teacher, plan);
}

}  // namespace lwcl::policies::pruning
