#pragma once
// Magnitude pruning criterion: a group is as important as its weights are large, with no data.
// magnitude<1> scores by the L1 norm sum |w|, magnitude<2> by the L2 norm sqrt(sum w^2), over a group's
// weights:
//   query head h: rows [h D, (h + 1) D) of q (and of the q bias) and columns [h D, (h + 1) D) of o
//   KV group g:   rows [g D, (g + 1) D) of k and v (and their biases) and every weight of its query
//                 heads h in [g r, (g + 1) r), r = H / KVH
//   FFN channel j: row j of fc (gate) and up, entry j of the fc bias, column j of proj (down)
//   layer:        every parameter of the block, norms and biases included

#include <cmath>
#include <string_view>

#include "lwcl/policies/pruning/concept.hpp"

namespace lwcl::policies::pruning {

template <int Order>
struct magnitude {
  static_assert(Order == 1 || Order == 2, "magnitude<Order>: Order is the norm's order, 1 (L1) or 2 (L2)");
  static constexpr std::string_view name = Order == 1 ? "magnitude_l1" : "magnitude_l2";
  static constexpr bool needs_statistics = false;
  static constexpr bool needs_gradients = false;

  prune::group_scores score(const prune::scoring_input& in) const {
    // Groups are summed as |w|^Order and rooted at the end, so a KV group's L2 norm covers its heads'
    // weights exactly once.
    auto power = [](double w) { return Order == 1 ? std::abs(w) : w * w; };
    auto root = [](double s) { return Order == 1 ? s : std::sqrt(s); };
    prune::group_scores out = prune::sized_scores(in.config, name);
    const index_t D = in.config.head_dim;
    for (index_t l = 0; l < in.config.n_layers(); ++l) {
      const auto& L = in.config.layers[static_cast<std::size_t>(l)];
      const index_t r = L.n_heads / L.n_kv_heads;
      const prune::block_matrices w = in.block(l);
      auto& s = out.layers[static_cast<std::size_t>(l)];
      for (index_t h = 0; h < L.n_heads; ++h)
        s.heads[static_cast<std::size_t>(h)] = prune::row_block_sum(w.q_w, h * D, (h + 1) * D, power) +
                                               prune::row_block_sum(w.q_b, h * D, (h + 1) * D, power) +
                                               prune::column_block_sum(w.o_w, h * D, (h + 1) * D, power);
      for (index_t g = 0; g < L.n_kv_heads; ++g) {
        double sum = prune::row_block_sum(w.k_w, g * D, (g + 1) * D, power) +
                     prune::row_block_sum(w.k_b, g * D, (g + 1) * D, power) +
                     prune::row_block_sum(w.v_w, g * D, (g + 1) * D, power) +
                     prune::row_block_sum(w.v_b, g * D, (g + 1) * D, power);
        for (index_t h = g * r; h < (g + 1) * r; ++h) sum += s.heads[static_cast<std::size_t>(h)];
        s.kv_groups[static_cast<std::size_t>(g)] = root(sum);
      }
      for (auto& h : s.heads) h = root(h);
      for (index_t j = 0; j < L.ffn; ++j)
        s.ffn[static_cast<std::size_t>(j)] =
            root(prune::row_block_sum(w.fc_w, j, j + 1, power) + prune::row_block_sum(w.fc_b, j, j + 1, power) +
                 prune::row_block_sum(w.up_w, j, j + 1, power) + prune::column_block_sum(w.proj_w, j, j + 1, power));
      double all = 0;
      for (const auto& p : in.layer_params(l)) all += prune::row_block_sum(p, 0, p.rows, power);
      s.layer = root(all);
    }
    return out;
  }
};
using magnitude_l1 = magnitude<1>;
using magnitude_l2 = magnitude<2>;
static_assert(pruning_criterion<magnitude_l1>);
static_assert(pruning_criterion<magnitude_l2>);

}  // namespace lwcl::policies::pruning
