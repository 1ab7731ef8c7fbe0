#pragma once
// FLAP's fluctuation criterion (An et al. 2024): a channel j entering an output projection W (o, or
// proj/down) matters as much as removing it would perturb the output beyond what a bias can absorb,
//   fluct_j = Var(X_j) * ||W[:, j]||_2^2      (Var: population variance over the calibration tokens)
// query head h: sum of fluct_j over its D o-input channels; KV group: sum over its query heads; FFN
// channel j: fluct_j of proj-input channel j. Scores of one structure type differ in scale from layer
// to layer, so each type is standardised over every layer's scores of that type,
//   score = (fluct - mean) / std     (population std; a zero std leaves the scores only centred),
// and a global ranking can compare layers. The layer score is the unstandardised sum of its heads' and
// FFN channels' fluctuations. channel_means gives each channel's calibration mean, which the removed
// channels leave behind as a bias: b' = b + W[:, removed] mean[removed].

#include <cmath>
#include <string_view>
#include <vector>

#include "lwcl/policies/pruning/concept.hpp"

namespace lwcl::policies::pruning {

struct flap {
  static constexpr std::string_view name = "flap";
  static constexpr bool needs_statistics = true;
  static constexpr bool needs_gradients = false;

  // Calibration means of one layer's output-projection input channels.
  struct layer_means {
    std::vector<double> attn;  // o input, H * D (head h at [h D, (h + 1) D))
    std::vector<double> mlp;   // proj / down input, F
  };
  static std::vector<layer_means> channel_means(const prune::scoring_input& in) {
    const prune::calibration_stats& st = in.statistics(name);
    std::vector<layer_means> out;
    for (const auto& ls : st.layers) out.push_back({ls.o_in.means(), ls.proj_in.means()});
    return out;
  }

  prune::group_scores score(const prune::scoring_input& in) const {
    const prune::calibration_stats& st = in.statistics(name);
    auto square = [](double w) { return w * w; };
    prune::group_scores out = prune::sized_scores(in.config, name);
    const index_t D = in.config.head_dim;
    for (index_t l = 0; l < in.config.n_layers(); ++l) {
      const auto& L = in.config.layers[static_cast<std::size_t>(l)];
      const auto& ls = st.layers[static_cast<std::size_t>(l)];
      const std::vector<double> var_o = ls.o_in.variances(), var_proj = ls.proj_in.variances();
      const index_t r = L.n_heads / L.n_kv_heads;
      const prune::block_matrices w = in.block(l);
      auto& s = out.layers[static_cast<std::size_t>(l)];
      double layer = 0;
      for (index_t h = 0; h < L.n_heads; ++h) {
        s.heads[static_cast<std::size_t>(h)] = prune::column_block_sum(w.o_w, h * D, (h + 1) * D, square, &var_o);
        layer += s.heads[static_cast<std::size_t>(h)];
      }
      for (index_t g = 0; g < L.n_kv_heads; ++g)
        for (index_t h = g * r; h < (g + 1) * r; ++h)
          s.kv_groups[static_cast<std::size_t>(g)] += s.heads[static_cast<std::size_t>(h)];
      for (index_t j = 0; j < L.ffn; ++j) {
        s.ffn[static_cast<std::size_t>(j)] = prune::column_block_sum(w.proj_w, j, j + 1, square, &var_proj);
        layer += s.ffn[static_cast<std::size_t>(j)];
      }
      s.layer = layer;
    }
    standardise(out, &prune::layer_scores::heads);
    standardise(out, &prune::layer_scores::kv_groups);
    standardise(out, &prune::layer_scores::ffn);
    return out;
  }

 private:
  // (x - mean) / std over the scores of one structure type across every layer.
  static void standardise(prune::group_scores& g, std::vector<double> prune::layer_scores::*field) {
    double n = 0, sum = 0;
    for (const auto& s : g.layers)
      for (double x : s.*field) {
        sum += x;
        n += 1;
      }
    if (n == 0) return;
    const double mean = sum / n;
    double ss = 0;
    for (const auto& s : g.layers)
      for (double x : s.*field) ss += (x - mean) * (x - mean);
    const double sd = std::sqrt(ss / n);
    for (auto& s : g.layers)
      for (double& x : s.*field) x = sd > 0 ? (x - mean) / sd : x - mean;
  }
};
static_assert(pruning_criterion<flap>);

}  // namespace lwcl::policies::pruning
