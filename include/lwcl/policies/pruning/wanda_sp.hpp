#pragma once
// Wanda-sp, the structured form of Wanda (weights and activations): Wanda (Sun et al. 2023) scores a
// weight |W_ij| * ||X_j||_2, with X_j input channel j of the weight's linear layer over every calibration
// token; An et al. 2024 (the FLAP paper, which introduces Wanda-sp) score a structure by the column of
// the output projection it feeds:
//   query head h: sum over columns [h D, (h + 1) D) of o and every row i of |o_ij| * ||X_j||, X = o input
//   KV group g:   the sum of its query heads' scores
//   FFN channel j: sum over the rows of column j of proj (down), |proj_ij| * ||X_j||, X = proj input
//   layer:        the sum of its heads' and FFN channels' scores
// Used with the uniform allocation (the same fraction per layer), as published.
//
// wanda_sp_in_out adds the input projections' rows to each group: q rows [h D, (h + 1) D) weighed by
// the q/k/v input norms for a head; k and v rows for a KV group (plus its heads); fc (gate) and up row j
// weighed by the MLP input norms for an FFN channel; and every linear weight of the block for the layer.
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
      const std::vector<double> n_o = ls.o_in.l2_norms(), n_proj = ls.proj_in.l2_norms();
      const index_t r = L.n_heads / L.n_kv_heads;
      const prune::block_matrices w = in.block(l);
      auto& s = out.layers[static_cast<std::size_t>(l)];
      double layer = 0;
      for (index_t h = 0; h < L.n_heads; ++h) {
        s.heads[static_cast<std::size_t>(h)] = prune::column_block_sum(w.o_w, h * D, (h + 1) * D, mag, &n_o);
        layer += s.heads[static_cast<std::size_t>(h)];
      }
      for (index_t g = 0; g < L.n_kv_heads; ++g)
        for (index_t h = g * r; h < (g + 1) * r; ++h)
          s.kv_groups[static_cast<std::size_t>(g)] += s.heads[static_cast<std::size_t>(h)];
      for (index_t j = 0; j < L.ffn; ++j) {
        s.ffn[static_cast<std::size_t>(j)] = prune::column_block_sum(w.proj_w, j, j + 1, mag, &n_proj);
        layer += s.ffn[static_cast<std::size_t>(j)];
      }
      s.layer = layer;
    }
    return out;
  }
};
static_assert(pruning_criterion<wanda_sp>);

struct wanda_sp_in_out {
  static constexpr std::string_view name = "wanda_sp_in_out";
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
static_assert(pruning_criterion<wanda_sp_in_out>);

}  // namespace lwcl::policies::pruning
