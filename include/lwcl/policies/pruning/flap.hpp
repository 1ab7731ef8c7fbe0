#pragma once
// FLAP (An et al. 2024, "Fluctuation-based Adaptive Structured Pruning for Large Language Models"), two
// criteria on its fluctuation metric. A channel j entering an output projection W (o, or proj/down)
// matters as much as removing it would perturb the output beyond what a bias can absorb:
//   fluct_j = Var(X_j) * ||W[:, j]||_2^2      (Var: sample variance over the calibration tokens)
//
// flap, as published: each layer's fluctuations are standardised per structure, over the layer's H * D
// attention channels and over its F FFN channels, z = (fluct - mean) / std (population std over those
// channels; a zero std leaves them only centred). A query head scores the mean of its D channels' z, a
// KV group the mean over its query heads' channels, an FFN channel its own z. With the joint allocation
// (prune::allocation::joint) heads and channels of every layer are then ranked together, each weighted
// by the parameters it removes, which is FLAP's adaptive structure search; the uniform allocation gives
// its per-layer variant. square_head_channels = true squares each attention channel's fluctuation before
// standardising, as the authors' released code does (the paper does not).
//
// flap_pooled: sums of fluctuations (a head's D channels, a KV group's heads, an FFN channel's own),
// each structure type standardised once over all layers pooled. That map preserves order, so it decides
// what the raw sums decide.
//
// Both: the layer score is the unstandardised sum of the layer's head and FFN fluctuations, and
// channel_means gives each channel's calibration mean, which the removed channels leave behind as a
// bias: b' = b + W[:, removed] mean[removed].

#include <cmath>
#include <string_view>
#include <vector>

#include "lwcl/policies/pruning/concept.hpp"

namespace lwcl::policies::pruning {

namespace flap_detail {

// Calibration means of one layer's output-projection input channels.
struct layer_means {
  std::vector<double> attn;  // o input, H * D (head h at [h D, (h + 1) D))
  std::vector<double> mlp;   // proj / down input, F
};
inline std::vector<layer_means> channel_means(const prune::scoring_input& in, std::string_view who) {
  const prune::calibration_stats& st = in.statistics(who);
  std::vector<layer_means> out;
  for (const auto& ls : st.layers) out.push_back({ls.o_in.means(), ls.proj_in.means()});
  return out;
}

// fluct_j = Var(X_j) * sum_i W[i, j]^2 for every column j of W.
inline std::vector<double> fluctuations(const prune::matrix_view& w, const prune::channel_stats& x) {
  const std::vector<double> var = x.sample_variances();
  std::vector<double> f(var.size());
  auto square = [](double v) { return v * v; };
  for (index_t j = 0; j < static_cast<index_t>(f.size()); ++j)
    f[static_cast<std::size_t>(j)] = prune::column_block_sum(w, j, j + 1, square, &var);
  return f;
}

// (x - mean) / std over v (population std); only centred when the std is 0.
inline void standardise(std::vector<double>& v) {
  if (v.empty()) return;
  double sum = 0;
  for (double x : v) sum += x;
  const double mean = sum / static_cast<double>(v.size());
  double ss = 0;
  for (double x : v) ss += (x - mean) * (x - mean);
  const double sd = std::sqrt(ss / static_cast<double>(v.size()));
  for (double& x : v) x = sd > 0 ? (x - mean) / sd : x - mean;
}

}  // namespace flap_detail

struct flap {
  static constexpr std::string_view name = "flap";
  static constexpr bool needs_statistics = true;
  static constexpr bool needs_gradients = false;
  bool square_head_channels = false;

  using layer_means = flap_detail::layer_means;
  static std::vector<layer_means> channel_means(const prune::scoring_input& in) {
    return flap_detail::channel_means(in, name);
  }

  prune::group_scores score(const prune::scoring_input& in) const {
    const prune::calibration_stats& st = in.statistics(name);
    prune::group_scores out = prune::sized_scores(in.config, name);
    const index_t D = in.config.head_dim;
    for (index_t l = 0; l < in.config.n_layers(); ++l) {
      const auto& L = in.config.layers[static_cast<std::size_t>(l)];
      const auto& ls = st.layers[static_cast<std::size_t>(l)];
      const prune::block_matrices w = in.block(l);
      std::vector<double> zo = flap_detail::fluctuations(w.o_w, ls.o_in), zp = flap_detail::fluctuations(w.proj_w, ls.proj_in);
      auto& s = out.layers[static_cast<std::size_t>(l)];
      s.layer = 0;
      for (double f : zo) s.layer += f;
      for (double f : zp) s.layer += f;
      if (square_head_channels)
        for (double& f : zo) f *= f;
      flap_detail::standardise(zo);
      flap_detail::standardise(zp);
      for (index_t h = 0; h < L.n_heads; ++h) {
        double sum = 0;
        for (index_t j = h * D; j < (h + 1) * D; ++j) sum += zo[static_cast<std::size_t>(j)];
        s.heads[static_cast<std::size_t>(h)] = sum / static_cast<double>(D);
      }
      const index_t r = L.n_heads / L.n_kv_heads;
      for (index_t g = 0; g < L.n_kv_heads; ++g) {
        double sum = 0;
        for (index_t h = g * r; h < (g + 1) * r; ++h) sum += s.heads[static_cast<std::size_t>(h)];
        s.kv_groups[static_cast<std::size_t>(g)] = sum / static_cast<double>(r);
      }
      s.ffn = zp;
    }
    return out;
  }
};
static_assert(pruning_criterion<flap>);

struct flap_pooled {
  static constexpr std::string_view name = "flap_pooled";
  static constexpr bool needs_statistics = true;
  static constexpr bool needs_gradients = false;

  using layer_means = flap_detail::layer_means;
  static std::vector<layer_means> channel_means(const prune::scoring_input& in) {
    return flap_detail::channel_means(in, name);
  }

  prune::group_scores score(const prune::scoring_input& in) const {
    const prune::calibration_stats& st = in.statistics(name);
    prune::group_scores out = prune::sized_scores(in.config, name);
    const index_t D = in.config.head_dim;
    for (index_t l = 0; l < in.config.n_layers(); ++l) {
      const auto& L = in.config.layers[static_cast<std::size_t>(l)];
      const auto& ls = st.layers[static_cast<std::size_t>(l)];
      const prune::block_matrices w = in.block(l);
      const std::vector<double> fo = flap_detail::fluctuations(w.o_w, ls.o_in), fp = flap_detail::fluctuations(w.proj_w, ls.proj_in);
      auto& s = out.layers[static_cast<std::size_t>(l)];
      double layer = 0;
      for (index_t h = 0; h < L.n_heads; ++h) {
        double sum = 0;
        for (index_t j = h * D; j < (h + 1) * D; ++j) sum += fo[static_cast<std::size_t>(j)];
        s.heads[static_cast<std::size_t>(h)] = sum;
        layer += sum;
      }
      const index_t r = L.n_heads / L.n_kv_heads;
      for (index_t g = 0; g < L.n_kv_heads; ++g)
        for (index_t h = g * r; h < (g + 1) * r; ++h)
          s.kv_groups[static_cast<std::size_t>(g)] += s.heads[static_cast<std::size_t>(h)];
      s.ffn = fp;
      for (double f : fp) layer += f;
      s.layer = layer;
    }
    standardise_pooled(out, &prune::layer_scores::heads);
    standardise_pooled(out, &prune::layer_scores::kv_groups);
    standardise_pooled(out, &prune::layer_scores::ffn);
    return out;
  }

 private:
  // (x - mean) / std over the scores of one structure type across every layer.
  static void standardise_pooled(prune::group_scores& g, std::vector<double> prune::layer_scores::*field) {
    std::vector<double> all;
    for (const auto& s : g.layers) all.insert(all.end(), (s.*field).begin(), (s.*field).end());
    flap_detail::standardise(all);
    std::size_t i = 0;
    for (auto& s : g.layers)
      for (double& x : s.*field) x = all[i++];
  }
};
static_assert(pruning_criterion<flap_pooled>);

}  // namespace lwcl::policies::pruning
