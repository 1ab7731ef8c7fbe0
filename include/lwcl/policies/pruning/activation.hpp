#pragma once
// Activation-based criterion of Minitron (Muralidharan et al. 2024): a group matters as much as it is
// active on the calibration data.
//   query head h:  mean over tokens of ||att_h||_2, the L2 norm of the head's attention output
//   KV group g:    the sum of its query heads' scores
//   FFN channel j: mean over tokens of |X_j|, X the input of proj (down): gelu(fc) or silu(gate) * up
//   layer:         the mean over its groups, (sum of head scores + sum of FFN scores) / (H + F)

#include <string_view>

#include "lwcl/policies/pruning/concept.hpp"

namespace lwcl::policies::pruning {

struct activation {
  static constexpr std::string_view name = "activation";
  static constexpr bool needs_statistics = true;
  static constexpr bool needs_gradients = false;

  prune::group_scores score(const prune::scoring_input& in) const {
    const prune::calibration_stats& st = in.statistics(name);
    prune::group_scores out = prune::sized_scores(in.config, name);
    for (index_t l = 0; l < in.config.n_layers(); ++l) {
      const auto& L = in.config.layers[static_cast<std::size_t>(l)];
      const auto& ls = st.layers[static_cast<std::size_t>(l)];
      const index_t r = L.n_heads / L.n_kv_heads;
      auto& s = out.layers[static_cast<std::size_t>(l)];
      double total = 0;
      for (index_t h = 0; h < L.n_heads; ++h) {
        s.heads[static_cast<std::size_t>(h)] = ls.mean_head_norm(h);
        s.kv_groups[static_cast<std::size_t>(h / r)] += s.heads[static_cast<std::size_t>(h)];
        total += s.heads[static_cast<std::size_t>(h)];
      }
      for (index_t j = 0; j < L.ffn; ++j) {
        s.ffn[static_cast<std::size_t>(j)] = ls.proj_in.mean_abs(j);
        total += s.ffn[static_cast<std::size_t>(j)];
      }
      s.layer = total / static_cast<double>(L.n_heads + L.ffn);
    }
    return out;
  }
};
static_assert(pruning_criterion<activation>);

}  // namespace lwcl::policies::pruning
