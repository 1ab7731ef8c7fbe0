#pragma once
// Block influence of ShortGPT (Men et al. 2024), a criterion for removing whole layers: a block that
// barely turns its input changes the model little,
//   layer score = 1 - mean over tokens of cos(x_in, x_out)
// with x_in, x_out the block's input and output hidden states. It says nothing about a block's heads or
// FFN channels: each of them carries the layer's score (so every criterion's scores have one shape), and
// the scores are marked layers_only, so an allocation at any granularity but layers is refused.

#include <algorithm>
#include <string_view>

#include "lwcl/policies/pruning/concept.hpp"

namespace lwcl::policies::pruning {

struct block_influence {
  static constexpr std::string_view name = "block_influence";
  static constexpr bool needs_statistics = true;
  static constexpr bool needs_gradients = false;

  prune::group_scores score(const prune::scoring_input& in) const {
    const prune::calibration_stats& st = in.statistics(name);
    prune::group_scores out = prune::sized_scores(in.config, name);
    out.layers_only = true;
    for (std::size_t l = 0; l < out.layers.size(); ++l) {
      auto& s = out.layers[l];
      s.layer = 1.0 - st.layers[l].mean_cosine();
      for (auto* v : {&s.heads, &s.kv_groups, &s.ffn}) std::fill(v->begin(), v->end(), s.layer);
    }
    return out;
  }
};
static_assert(pruning_criterion<block_influence>);

}  // namespace lwcl::policies::pruning
