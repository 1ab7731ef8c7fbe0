#pragma once
// What a pruning criterion reads: the model's weights in double, the calibration statistics (channel
// moments, head norms, block cosines) and the local gradients, gathered in prune/stats.hpp and
// prune/local_gradients.hpp; and the helpers criteria score with. Plain data: no model, no backend.

#include <algorithm>
#include <cmath>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/model/config.hpp"
#include "lwcl/prune/plan.hpp"
#include "lwcl/tensor/arena.hpp"

namespace lwcl::prune {

// Running moments of one activation's channels over the tokens seen so far.
struct channel_stats {
  std::vector<double> sum, sum_sq, sum_abs;
  index_t count = 0;  // tokens

  channel_stats() = default;
  explicit channel_stats(index_t channels)
      : sum(static_cast<std::size_t>(channels), 0.0),
        sum_sq(static_cast<std::size_t>(channels), 0.0),
        sum_abs(static_cast<std::size_t>(channels), 0.0) {}

  index_t channels() const { return static_cast<index_t>(sum.size()); }
  // ||X_j||_2 over every token: the norm Wanda weighs a weight's magnitude with.
  double l2_norm(index_t j) const { return std::sqrt(sum_sq[at(j)]); }
  double mean(index_t j) const { return sum[at(j)] / static_cast<double>(count); }
  // Population variance E[x^2] - E[x]^2 (clamped at 0 against rounding).
  double variance(index_t j) const {
    const double m = mean(j);
    return std::max(0.0, sum_sq[at(j)] / static_cast<double>(count) - m * m);
  }
  // Sample variance, the population variance times N / (N - 1) (the population variance for N = 1).
  double sample_variance(index_t j) const {
    return count > 1 ? variance(j) * static_cast<double>(count) / static_cast<double>(count - 1) : variance(j);
  }
  double mean_abs(index_t j) const { return sum_abs[at(j)] / static_cast<double>(count); }

  std::vector<double> l2_norms() const { return each(&channel_stats::l2_norm); }
  std::vector<double> means() const { return each(&channel_stats::mean); }
  std::vector<double> variances() const { return each(&channel_stats::variance); }
  std::vector<double> sample_variances() const { return each(&channel_stats::sample_variance); }
  std::vector<double> mean_abs_values() const { return each(&channel_stats::mean_abs); }

 private:
  static std::size_t at(index_t j) { return static_cast<std::size_t>(j); }
  std::vector<double> each(double (channel_stats::*f)(index_t) const) const {
    std::vector<double> out(sum.size());
    for (index_t j = 0; j < channels(); ++j) out[at(j)] = (this->*f)(j);
    return out;
  }
};

// The statistics of one block. Head h of the attention output owns channels [h D, (h + 1) D) of o_in.
struct layer_stats {
  channel_stats attn_in;  // input of q, k and v (C): norm1(x) in a pre-norm block
  channel_stats o_in;     // input of the attention output projection (H * D)
  channel_stats mlp_in;   // input of fc, or of gate and up (C): norm2(x2) in a pre-norm block
  channel_stats proj_in;  // input of proj / down (F): gelu(fc) or silu(gate) * up
  std::vector<double> head_norm_sum;  // per query head: sum over tokens of ||att_h||_2 (H)
  double cosine_sum = 0;              // sum over tokens of cos(block input, block output)
  index_t tokens = 0;

  double mean_head_norm(index_t h) const {
    return head_norm_sum[static_cast<std::size_t>(h)] / static_cast<double>(tokens);
  }
  double mean_cosine() const { return cosine_sum / static_cast<double>(tokens); }
};

struct calibration_stats {
  model::model_config config;  // the model the statistics were gathered on
  index_t tokens = 0;
  std::vector<layer_stats> layers;

  // Throws unless these statistics hold tokens and were gathered on a model of cfg's shape; `who`
  // names the caller in the message.
  void expect_fits(const model::model_config& cfg, std::string_view who) const;
};

namespace stats_detail {

// Whether two configs describe models of one shape (family, widths, every layer's heads, KV heads, FFN).
inline bool same_shape(const model::model_config& a, const model::model_config& b) {
  bool same = a.fam == b.fam && a.d_model == b.d_model && a.head_dim == b.head_dim && a.layers.size() == b.layers.size();
  for (std::size_t l = 0; same && l < a.layers.size(); ++l)
    same = a.layers[l].n_heads == b.layers[l].n_heads && a.layers[l].n_kv_heads == b.layers[l].n_kv_heads &&
           a.layers[l].ffn == b.layers[l].ffn;
  return same;
}

inline std::string describe_shape(const model::model_config& c) {
  std::ostringstream os;
  os << model::family_name(c.fam) << " d_model " << c.d_model << ", head_dim " << c.head_dim << ", layers (heads/kv/ffn)";
  for (const auto& L : c.layers) os << ' ' << L.n_heads << '/' << L.n_kv_heads << '/' << L.ffn;
  return os.str();
}

}  // namespace stats_detail

inline void calibration_stats::expect_fits(const model::model_config& cfg, std::string_view who) const {
  check(tokens > 0 && !layers.empty(), who, ": the calibration statistics hold no tokens (gather them with collect_statistics)");
  check(stats_detail::same_shape(config, cfg) && layers.size() == cfg.layers.size(), who,
        ": the calibration statistics were gathered on a model of shape [", stats_detail::describe_shape(config),
        "], expected one of shape [", stats_detail::describe_shape(cfg), "]");
}

// Mean over calibration batches of d(local loss of block l) / d(block l's parameters), for every
// block, laid out like the model's parameters (non-block entries stay zero).
struct local_gradients {
  model::model_config config;
  tensor_layout layout;
  std::vector<double> grad;
  index_t tokens = 0;
};

// ---- what a criterion reads -----------------------------------------------------------------------

// A read-only row-major matrix inside scoring_input::params; a 1-D parameter is (n, 1); an absent
// parameter is empty.
struct matrix_view {
  const double* data = nullptr;
  index_t rows = 0, cols = 0;

  bool empty() const { return data == nullptr; }
  double operator()(index_t r, index_t c) const { return data[r * cols + c]; }
};

// One block's linear layers and biases (for gated MLPs fc = gate, up = up, proj = down), as in
// model::block_weights.
struct block_matrices {
  matrix_view q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b, fc_w, fc_b, up_w, proj_w, proj_b;
};

struct scoring_input {
  model::model_config config;
  tensor_layout layout;
  std::vector<double> params;               // every parameter in double, laid out by `layout`
  std::optional<calibration_stats> stats;  // absent for criteria that read weights only
  std::optional<local_gradients> gradients;  // for criteria with needs_gradients (Taylor)

  // The parameter `name` (e.g. "layers.0.attn.q.weight"); empty when the model has none.
  matrix_view param(const std::string& name) const {
    if (!layout.contains(name)) return {};
    const auto& e = layout.find(name);
    const index_t rows = e.shape[0], cols = e.shape.rank() >= 2 ? e.shape.numel() / rows : 1;
    return {params.data() + e.offset, rows, cols};
  }
  block_matrices block(index_t layer) const {
    const std::string p = model::layer_prefix(layer);
    const bool gated = config.traits().gated_mlp;
    return {param(p + "attn.q.weight"), param(p + "attn.q.bias"), param(p + "attn.k.weight"), param(p + "attn.k.bias"),
            param(p + "attn.v.weight"), param(p + "attn.v.bias"), param(p + "attn.o.weight"), param(p + "attn.o.bias"),
            param(p + (gated ? "mlp.gate.weight" : "mlp.fc.weight")),   param(p + "mlp.fc.bias"),
            param(p + "mlp.up.weight"), param(p + (gated ? "mlp.down.weight" : "mlp.proj.weight")), param(p + "mlp.proj.bias")};
  }
  // Every parameter of the block (norms and biases included).
  std::vector<matrix_view> layer_params(index_t layer) const {
    const std::string p = model::layer_prefix(layer);
    std::vector<matrix_view> out;
    for (const auto& e : layout.entries())
      if (e.name.compare(0, p.size(), p) == 0) out.push_back(param(e.name));
    return out;
  }
  // The statistics, checked against the model; `criterion` names the reader in the error.
  const calibration_stats& statistics(std::string_view criterion) const {
    check(stats.has_value(), "pruning criterion ", criterion,
          " needs calibration statistics; the scoring input has none (pass collect_statistics' result to "
          "make_scoring_input)");
    stats->expect_fits(config, std::string("pruning criterion ") + std::string(criterion));
    return *stats;
  }
  // The local gradients, checked against the model; `criterion` names the reader in the error.
  const local_gradients& local_gradients_for(std::string_view criterion) const {
    check(gradients.has_value(), "pruning criterion ", criterion,
          " needs gradients of a local loss; the scoring input has none (set scoring_input::gradients from "
          "collect_local_gradients)");
    check(stats_detail::same_shape(gradients->config, config) && gradients->grad.size() == params.size(), "pruning criterion ",
          criterion, ": the gradients were taken on a model of shape [", stats_detail::describe_shape(gradients->config),
          "], expected one of shape [", stats_detail::describe_shape(config), "]");
    return *gradients;
  }
};

// ---- helpers for criteria -----------------------------------------------------------------------

// sum over rows [r0, r1) and every column c of f(W(r, c)) * scale[c] (scale null: 1). An empty W sums to 0.
template <class F>
double row_block_sum(const matrix_view& w, index_t r0, index_t r1, F f, const std::vector<double>* scale = nullptr) {
  if (w.empty()) return 0.0;
  double s = 0;
  for (index_t r = r0; r < r1; ++r)
    for (index_t c = 0; c < w.cols; ++c) s += f(w(r, c)) * (scale ? (*scale)[static_cast<std::size_t>(c)] : 1.0);
  return s;
}

// sum over every row r and columns [c0, c1) of f(W(r, c)) * scale[c] (scale null: 1). An empty W sums to 0.
template <class F>
double column_block_sum(const matrix_view& w, index_t c0, index_t c1, F f, const std::vector<double>* scale = nullptr) {
  if (w.empty()) return 0.0;
  double s = 0;
  for (index_t r = 0; r < w.rows; ++r)
    for (index_t c = c0; c < c1; ++c) s += f(w(r, c)) * (scale ? (*scale)[static_cast<std::size_t>(c)] : 1.0);
  return s;
}

// Zero scores of the right sizes for every layer of cfg: H heads, KVH KV groups, F FFN channels.
inline group_scores sized_scores(const model::model_config& cfg, std::string_view criterion) {
  group_scores g;
  g.criterion = std::string(criterion);
  for (const auto& L : cfg.layers) {
    layer_scores s;
    s.heads.assign(static_cast<std::size_t>(L.n_heads), 0.0);
    s.kv_groups.assign(static_cast<std::size_t>(L.n_kv_heads), 0.0);
    s.ffn.assign(static_cast<std::size_t>(L.ffn), 0.0);
    g.layers.push_back(std::move(s));
  }
  return g;
}

// Throws unless `scores` has one entry per layer of cfg with H, KVH and F finite scores.
inline void expect_scores_fit(const model::model_config& cfg, const group_scores& scores) {
  check(scores.layers.size() == cfg.layers.size(), "group_scores (", scores.criterion, "): ", scores.layers.size(),
        " layers, the model has ", cfg.layers.size());
  for (std::size_t l = 0; l < cfg.layers.size(); ++l) {
    const auto& L = cfg.layers[l];
    const auto& s = scores.layers[l];
    check(static_cast<index_t>(s.heads.size()) == L.n_heads && static_cast<index_t>(s.kv_groups.size()) == L.n_kv_heads &&
              static_cast<index_t>(s.ffn.size()) == L.ffn,
          "group_scores (", scores.criterion, "): layer ", l, " has ", s.heads.size(), " head, ", s.kv_groups.size(),
          " KV-group and ", s.ffn.size(), " FFN scores, expected ", L.n_heads, ", ", L.n_kv_heads, " and ", L.ffn);
    auto finite = [&](const std::vector<double>& v, const char* what) {
      for (std::size_t i = 0; i < v.size(); ++i)
        check(std::isfinite(v[i]), "group_scores (", scores.criterion, "): layer ", l, " ", what, " ", i, " is ", v[i]);
    };
    finite(s.heads, "head");
    finite(s.kv_groups, "KV group");
    finite(s.ffn, "FFN channel");
    check(std::isfinite(s.layer), "group_scores (", scores.criterion, "): layer ", l, " score is ", s.layer);
  }
}

}  // namespace lwcl::prune
