#pragma once
// A model pruned in one call, for programs that prune with a fixed criterion (the study harness, the
// MiniLM study): by width with a criterion and a uniform allocation, or by depth with block influence.
// Both go through prune_with (prune.hpp); a criterion chosen by name at run time through by_name.hpp's
// prune_named.

#include <memory>
#include <utility>
#include <vector>

#include "lwcl/core/config.hpp"
#include "lwcl/data/loader.hpp"
#include "lwcl/policies/pruning/block_influence.hpp"
#include "lwcl/policies/pruning/concept.hpp"
#include "lwcl/policies/pruning/prune.hpp"

namespace lwcl::policies::pruning {

// `criterion` scores (from calibration statistics on the first `calib_batches` batches of `calib`
// where it reads them), `ratio` of every layer's KV groups and FFN channels removed (uniform
// allocation, no bias compensation), physically cut. `Net` is a model::transformer or a model::encoder.
template <class Net, pruning_criterion Criterion>
std::unique_ptr<Net> prune_uniform(const Net& teacher, const data::batch_loader& calib, const Criterion& criterion,
                                   double ratio, index_t calib_batches) {
  prune_options o;
  o.alloc.ratio = ratio;
  o.calib_batches = calib_batches;
  o.bias_compensation = false;
  return prune_with(criterion, teacher, calib, o).student;
}

// Block influence (1 - the cosine between a layer's input and output, on the first `calib_batches`
// batches of `calib`) removes `fraction` of the teacher's layers; `kept` receives the teacher layers
// that remain.
template <class Net>
std::unique_ptr<Net> prune_depth(const Net& teacher, const data::batch_loader& calib, double fraction,
                                 index_t calib_batches, std::vector<index_t>& kept) {
  prune_options o;
  o.alloc.gran = prune::granularity::layers;
  o.alloc.ratio = fraction;
  o.calib_batches = calib_batches;
  auto r = prune_with(block_influence{}, teacher, calib, o);
  kept = std::move(r.kept);
  return std::move(r.student);
}

}  // namespace lwcl::policies::pruning
