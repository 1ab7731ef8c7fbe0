#pragma once
// Wanda-sp, the structured form of Wanda (weights and activations; Sun et al. 2023, An et al. 2024):
// a weight matters as much as |W_ij| * ||X_j||_2, where X_j is input channel j of the weight's linear
// layer over every calibration token, and a group scores the sum over its weights:
//   query head h: rows [h D, (h + 1) D) of q, weighed by the q/k/v input norms, and columns
//                 [h D, (h + 1) D) of o, weighed by the norms of those o-input channels
//   KV group g:   rows [g D, (g + 1) D) of k and v (q/k/v input norms) plus its query heads' scores
//   FFN channel j: row j of fc (gate) and up, weighed by the MLP input norms, and column j of proj
//                 (down), weighed by the norm of proj-input channel j
//   layer:        the sum over every linear weight of the block (q, k, v, o, fc/gate, up, proj/down)
// Biases have no input channel and are left out.

#include <cmath>
#include <string_view>

#include "lwcl/policies/pruning/concept.hpp"

namespace lwcl::policies::pruning {

struct wanda_sp {
  static constexpr std::string_view name = "wanda_sp";
  static constexpr bool needs_statistics = true;
  static constexpr bool needs_gradients = false;

  prune::group_scores score(const prune::scoring_input& in) const {
    const prune::calibration_stats& st = in.statistics(name);
    auto mag = [](double w) { return std::abs(w); };
    prune::group_scores out = prune::sized_scores(in.config, name);
    const index_t D = in.config.head_dim;
    for (index_t l = 0; l < in.config.n_layers(); ++l) {
      const auto& L = in.config.layers[static_cast<std::size_t>(l)];
      const auto& ls = st.layers[static_cast<std::size_t>(l)];
      const std::vector<double> n_attn = ls.attn_in.l2_norms(), n_o = ls.o_in.l2_norms(), n_mlp = ls.mlp_in.l2_norms(),
                                n_proj = ls.proj_in.l2_norms();
      const index_t r = L.n_heads / L.n_kv_heads;
      const prune::block_matrices w = in.block(l);
      auto& s = out.layers[static_cast<std::size_t>(l)];
      double layer = 0;
      for (index_t h = 0; h < L.n_heads; ++h) {
        s.heads[static_cast<std::size_t>(h)] = prune::row_block_sum(w.q_w, h * D, (h + 1) * D, mag, &n_attn) +
                                               prune::column_block_sum(w.o_w, h * D, (h + 1) * D, mag, &n_o);
        layer += s.heads[static_cast<std::size_t>(h)];
      }
      for (index_t g = 0; g < L.n_kv_heads; ++g) {
        const double kv = prune::row_block_sum(w.k_w, g * D, (g + 1) * D, mag, &n_attn) +
                          prune::row_block_sum(w.v_w, g * D, (g + 1) * D, mag, &n_attn);
        layer += kv;
        double sum = kv;
        for (index_t h = g * r; h < (g + 1) * r; ++h) sum += s.heads[static_cast<std::size_t>(h)];
        s.kv_groups[static_cast<std::size_t>(g)] = sum;
      }
      for (index_t j = 0; j < L.ffn; ++j) {
        s.ffn[static_cast<std::size_t>(j)] = prune::row_block_sum(w.fc_w, j, j + 1, mag, &n_mlp) +
                                             prune::row_block_sum(w.up_w, j, j + 1, mag, &n_mlp) +
                                             prune::column_block_sum(w.proj_w, j, j + 1, mag, &n_proj);
        layer += s.ffn[static_cast<std::size_t>(j)];
      }
      s.layer = layer;
    }
    return out;
  }
};
static_assert(pruning_criterion<wanda_sp>);

}  // namespace lwcl::policies::pruning
