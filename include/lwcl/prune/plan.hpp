#pragma once
// What structured pruning decides and how big the result is. Criteria score structural groups
// (group_scores); an allocation turns scores into a prune_plan (which query heads, KV groups, FFN
// channels and layers survive); surgery (prune/surgery.hpp) applies the plan. Parameter and FLOP counts
// per token let a program report real reductions.

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/model/config.hpp"

namespace lwcl::prune {

enum class granularity { heads, ffn, heads_and_ffn, layers };

inline std::string_view granularity_name(granularity g) {
  switch (g) {
    case granularity::heads: return "heads";
    case granularity::ffn: return "ffn";
    case granularity::heads_and_ffn: return "heads_and_ffn";
    case granularity::layers: return "layers";
  }
  return "?";
}
inline granularity parse_granularity(std::string_view s) {
  for (auto g : {granularity::heads, granularity::ffn, granularity::heads_and_ffn, granularity::layers})
    if (granularity_name(g) == s) return g;
  fail("prune: granularity '", s, "' is unknown (expected heads, ffn, heads_and_ffn or layers)");
}

// Importance of every structural group of one layer (higher = more important, kept first).
// heads: one score per query head (H). kv_groups: one per KV head together with its query heads (KVH).
// ffn: one per FFN channel (F). layer: the whole block.
struct layer_scores {
  std::vector<double> heads, kv_groups, ffn;
  double layer = 0;
};
struct group_scores {
  std::string criterion;
  std::vector<layer_scores> layers;
  // The criterion scores whole layers only (every group of a layer carries the layer's score), so an
  // allocation refuses any granularity but layers.
  bool layers_only = false;
};

// Which groups of one layer survive. Query heads are listed by their original index; under GQA the
// query heads of one KV group are [g * r, (g + 1) * r) with r = n_heads / n_kv_heads, and a plan keeps
// the same number of query heads in every kept KV group (so the pruned layer is again a valid GQA layer).
struct layer_plan {
  bool removed = false;
  std::vector<index_t> kv_heads;  // kept KV heads, ascending
  std::vector<index_t> heads;     // kept query heads, ascending, grouped by kept KV head
  std::vector<index_t> ffn;       // kept FFN channels, ascending
};
struct prune_plan {
  std::vector<layer_plan> layers;
};

// The plan that keeps everything.
inline prune_plan keep_all(const model::model_config& cfg) {
  prune_plan p;
  for (const auto& L : cfg.layers) {
    layer_plan lp;
    lp.kv_heads.resize(static_cast<std::size_t>(L.n_kv_heads));
    std::iota(lp.kv_heads.begin(), lp.kv_heads.end(), index_t{0});
    lp.heads.resize(static_cast<std::size_t>(L.n_heads));
    std::iota(lp.heads.begin(), lp.heads.end(), index_t{0});
    lp.ffn.resize(static_cast<std::size_t>(L.ffn));
    std::iota(lp.ffn.begin(), lp.ffn.end(), index_t{0});
    p.layers.push_back(std::move(lp));
  }
  return p;
}

// Checks that `plan` fits `cfg`: indices in range, ascending and unique; every kept query head belongs
// to a kept KV group; each kept KV group keeps the same number (>= 1) of query heads; a kept layer keeps
// at least one KV group and one FFN channel; at least one layer is kept.
inline void validate_plan(const model::model_config& cfg, const prune_plan& plan) {
  check(plan.layers.size() == cfg.layers.size(), "prune_plan: has ", plan.layers.size(), " layers, the model ",
        cfg.layers.size());
  index_t kept_layers = 0;
  for (std::size_t l = 0; l < plan.layers.size(); ++l) {
    const auto& lp = plan.layers[l];
    const auto& L = cfg.layers[l];
    if (lp.removed) continue;
    ++kept_layers;
    auto ascending = [&](const std::vector<index_t>& v, index_t n, const char* what) {
      check(!v.empty(), "prune_plan: layer ", l, " keeps no ", what, " (remove the layer instead)");
      for (std::size_t i = 0; i < v.size(); ++i) {
        check(v[i] >= 0 && v[i] < n, "prune_plan: layer ", l, " keeps ", what, " ", v[i], ", outside [0, ", n, ")");
        check(i == 0 || v[i - 1] < v[i], "prune_plan: layer ", l, "'s kept ", what, " are not ascending and unique");
      }
    };
    ascending(lp.kv_heads, L.n_kv_heads, "KV heads");
    ascending(lp.heads, L.n_heads, "query heads");
    ascending(lp.ffn, L.ffn, "FFN channels");
    const index_t r = L.n_heads / L.n_kv_heads;
    std::vector<index_t> per_group(static_cast<std::size_t>(L.n_kv_heads), 0);
    for (index_t h : lp.heads) {
      const index_t g = h / r;
      check(std::binary_search(lp.kv_heads.begin(), lp.kv_heads.end(), g), "prune_plan: layer ", l, " keeps query head ",
            h, " but not its KV head ", g);
      ++per_group[static_cast<std::size_t>(g)];
    }
    for (index_t g : lp.kv_heads)
      check(per_group[static_cast<std::size_t>(g)] == per_group[static_cast<std::size_t>(lp.kv_heads.front())],
            "prune_plan: layer ", l, " keeps ", per_group[static_cast<std::size_t>(g)], " query heads of KV head ", g, " but ",
            per_group[static_cast<std::size_t>(lp.kv_heads.front())], " of KV head ", lp.kv_heads.front(),
            "; every kept KV group must keep the same number");
    check(per_group[static_cast<std::size_t>(lp.kv_heads.front())] >= 1, "prune_plan: layer ", l,
          " keeps a KV head without query heads");
  }
  check(kept_layers >= 1, "prune_plan: removes every layer");
}

// The config of the model the plan produces.
inline model::model_config pruned_config(const model::model_config& cfg, const prune_plan& plan) {
  validate_plan(cfg, plan);
  model::model_config out = cfg;
  out.layers.clear();
  for (std::size_t l = 0; l < plan.layers.size(); ++l) {
    const auto& lp = plan.layers[l];
    if (lp.removed) continue;
    out.layers.push_back(model::layer_config{static_cast<index_t>(lp.heads.size()), static_cast<index_t>(lp.kv_heads.size()),
                                             static_cast<index_t>(lp.ffn.size())});
  }
  return out;
}

// Parameters of one layer and of the whole model (embeddings and head included; a tied head counts once).
inline index_t layer_parameters(const model::model_config& cfg, const model::layer_config& L) {
  const auto tr = cfg.traits();
  const index_t C = cfg.d_model, D = cfg.head_dim, q = L.n_heads * D, kv = L.n_kv_heads * D;
  index_t n = (tr.rms_norm ? 2 : 4) * C;  // two norms
  n += C * (q + 2 * kv) + q * C;          // q, k, v, o
  if (tr.qkv_bias) n += q + 2 * kv;
  if (tr.out_bias) n += C;  // attention output bias
  if (tr.gated_mlp)
    n += 3 * C * L.ffn + (tr.out_bias ? C : 0);
  else
    n += 2 * C * L.ffn + (tr.out_bias ? L.ffn + C : 0);
  return n;
}
inline index_t model_parameters(const model::model_config& cfg) {
  const auto tr = cfg.traits();
  index_t n = cfg.vocab * cfg.d_model + (tr.rope ? 0 : cfg.max_seq * cfg.d_model) + (tr.rms_norm ? 1 : 2) * cfg.d_model;
  if (!cfg.tie_embeddings) n += cfg.vocab * cfg.d_model;
  for (const auto& L : cfg.layers) n += layer_parameters(cfg, L);
  return n;
}

// Forward FLOPs per token at context length `seq` (2 per multiply-add): every matrix product of the
// blocks and the LM head, plus attention's scores and weighted sum averaged over causal positions
// ((seq + 1) / 2 keys per query; `seq` keys for a bidirectional encoder). Norms, activations and
// softmax are left out: they are O(width), not O(width^2).
// Forward FLOPs per token of block l alone (its projections, attention's scores and weighted sum, its
// FFN), as flops_per_token counts them.
inline double layer_flops_per_token(const model::model_config& cfg, index_t l, index_t seq) {
  const double C = static_cast<double>(cfg.d_model), D = static_cast<double>(cfg.head_dim);
  const double keys = cfg.traits().causal ? (static_cast<double>(seq) + 1) / 2 : static_cast<double>(seq);
  const auto& L = cfg.layers[static_cast<std::size_t>(l)];
  const double q = static_cast<double>(L.n_heads) * D, kv = static_cast<double>(L.n_kv_heads) * D;
  double f = 2 * C * (q + 2 * kv) + 2 * q * C;
  f += 2 * 2 * keys * q;  // scores and weighted sum over every query head
  f += (cfg.traits().gated_mlp ? 3 : 2) * 2 * C * static_cast<double>(L.ffn);
  return f;
}
// Blocks [first, last) together.
inline double layers_flops_per_token(const model::model_config& cfg, index_t first, index_t last, index_t seq) {
  double f = 0;
  for (index_t l = first; l < last; ++l) f += layer_flops_per_token(cfg, l, seq);
  return f;
}
inline double flops_per_token(const model::model_config& cfg, index_t seq) {
  return 2 * static_cast<double>(cfg.d_model) * static_cast<double>(cfg.vocab) +
         layers_flops_per_token(cfg, 0, cfg.n_layers(), seq);
}

}  // namespace lwcl::prune
