#pragma once
// Allocation: turns a criterion's group scores into a prune_plan. Uniform removes the same fraction of
// groups from every layer; global ranks the groups of all layers together, each structure type on its
// own (adaptive widths); joint ranks KV groups and FFN channels of all layers in one list, each weighted
// by the parameters its removal takes (FLAP's adaptive structure search). Guards keep at least one KV
// group (with its query heads) and one FFN channel in every layer. Whole layers are removed by their
// layer scores.
// Every ranking goes through one ranker: std::stable_sort on the host, or the backend's
// rank_descending (a stable device radix sort on backend::cuda) when allocate is given such a backend;
// both order by descending score with ties by ascending index, so the plans are identical.

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "lwcl/ops/fused.hpp"
#include "lwcl/prune/plan.hpp"

namespace lwcl::prune {

enum class head_mode {
  kv_groups,    // remove whole KV groups (a KV head with all its query heads); MHA: single heads
  query_heads,  // keep every KV group, remove the same number of query heads inside each
};

struct allocation {
  granularity gran = granularity::heads_and_ffn;
  double ratio = 0.5;  // fraction of the chosen groups removed: KV groups or query heads, FFN channels, layers
  bool global = false;
  // With global and heads_and_ffn: KV groups and FFN channels in one ranking, weighted by parameter cost;
  // ratio is then the fraction of their parameters removed.
  bool joint = false;
  head_mode heads = head_mode::kv_groups;

  void validate() const {
    check(std::isfinite(ratio) && ratio >= 0 && ratio < 1, "prune allocation: ratio ", ratio,
          " is outside [0, 1) (the fraction of groups to remove)");
    check(!(global && heads == head_mode::query_heads), "prune allocation: a global ranking removes whole KV groups; "
          "query_heads mode needs the uniform allocation");
    check(!joint || (global && gran == granularity::heads_and_ffn), "prune allocation: the joint ranking of heads and "
          "FFN channels needs the global allocation and granularity heads_and_ffn, got ", global ? "global" : "uniform",
          " and ", granularity_name(gran));
  }
};

// Parameters a layer loses with one of its KV groups (its query heads included) and with one FFN
// channel, as layer_parameters counts them (weights and biases).
struct group_costs {
  index_t kv_group = 0, ffn_channel = 0;
};
inline group_costs group_costs_of(const model::model_config& cfg, const model::layer_config& L) {
  const index_t r = L.n_heads / L.n_kv_heads;
  const index_t whole = layer_parameters(cfg, L);
  return {whole - layer_parameters(cfg, {L.n_heads - r, L.n_kv_heads - 1, L.ffn}),
          whole - layer_parameters(cfg, {L.n_heads, L.n_kv_heads, L.ffn - 1})};
}

namespace detail {

// The host ranker: order[0, n) = the indices of keys[0, n) by descending key, equal keys (-0.0 and
// +0.0 included) by ascending index. A ranker is any callable rank(order, keys, n) with this contract.
struct host_rank {
  void operator()(index_t* order, const double* keys, index_t n) const {
    std::iota(order, order + n, index_t{0});
    std::stable_sort(order, order + n, [keys](index_t a, index_t b) { return keys[a] > keys[b]; });
  }
};

// Indices of the `keep` highest scores, ascending; ties keep the lower index.
template <class Rank>
std::vector<index_t> top_k(const Rank& rank, const std::vector<double>& s, index_t keep) {
  std::vector<index_t> idx(s.size());
  rank(idx.data(), s.data(), static_cast<index_t>(s.size()));
  idx.resize(static_cast<std::size_t>(keep));
  std::sort(idx.begin(), idx.end());
  return idx;
}

inline index_t removed_count(double ratio, index_t n) { return static_cast<index_t>(std::llround(ratio * static_cast<double>(n))); }

inline void expect_scores(const std::vector<double>& s, index_t n, std::size_t layer, const char* what) {
  check(static_cast<index_t>(s.size()) == n, "prune allocation: layer ", layer, " has ", s.size(), " ", what,
        " scores, expected ", n);
  for (double v : s) check(std::isfinite(v), "prune allocation: layer ", layer, " has a non-finite ", what, " score");
}

// Every query head of the kept KV groups.
inline std::vector<index_t> heads_of_groups(const std::vector<index_t>& groups, index_t r) {
  std::vector<index_t> h;
  for (index_t g : groups)
    for (index_t i = 0; i < r; ++i) h.push_back(g * r + i);
  return h;
}

// allocate() with the rankings done by `rank` (see host_rank).
// The joint ranking (FLAP's rule): every layer's KV groups, then every layer's FFN channels, ranked by
// descending score; walking down the ranking, the cumulative parameter cost is nearest (1 - ratio) of
// the total at some rank i, and the groups ranked above i are kept (the authors keep the scores strictly
// above the score at i). Then every layer left without a KV group or an FFN channel gets back its best.
template <class Rank>
prune_plan allocate_joint(const Rank& rank, const model::model_config& cfg, const group_scores& scores, double ratio) {
  prune_plan plan = keep_all(cfg);
  if (ratio == 0) return plan;
  struct item {
    std::size_t layer;
    index_t idx;
    bool head;
    double cost;
  };
  std::vector<item> all;
  std::vector<double> key;
  const std::size_t L = cfg.layers.size();
  for (int head = 1; head >= 0; --head)
    for (std::size_t l = 0; l < L; ++l) {
      const auto cost = group_costs_of(cfg, cfg.layers[l]);
      const auto& s = head ? scores.layers[l].kv_groups : scores.layers[l].ffn;
      for (std::size_t i = 0; i < s.size(); ++i) {
        check(std::isfinite(s[i]), "prune allocation: layer ", l, " has a non-finite ", head ? "KV-group" : "FFN-channel",
              " score");
        all.push_back({l, static_cast<index_t>(i), head == 1, static_cast<double>(head ? cost.kv_group : cost.ffn_channel)});
        key.push_back(s[i]);
      }
    }
  std::vector<index_t> order(all.size());
  rank(order.data(), key.data(), static_cast<index_t>(all.size()));
  double total = 0;
  for (const auto& it : all) total += it.cost;
  const double target = (1 - ratio) * total;
  double cum = 0, best_gap = std::numeric_limits<double>::infinity();
  std::size_t cut = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    cum += all[static_cast<std::size_t>(order[i])].cost;
    if (const double gap = std::abs(cum - target); gap < best_gap) {
      best_gap = gap;
      cut = i;
    }
  }
  std::vector<std::vector<index_t>> kv(L), ffn(L);
  for (std::size_t i = 0; i < cut; ++i) {
    const item& it = all[static_cast<std::size_t>(order[i])];
    (it.head ? kv : ffn)[it.layer].push_back(it.idx);
  }
  for (std::size_t l = 0; l < L; ++l) {  // guards: the layer's best of each, first in the ranking
    for (int head = 1; head >= 0; --head) {
      auto& kept = head ? kv[l] : ffn[l];
      if (!kept.empty()) continue;
      for (const index_t o : order) {
        const item& it = all[static_cast<std::size_t>(o)];
        if (it.layer == l && it.head == (head == 1)) {
          kept.push_back(it.idx);
          break;
        }
      }
    }
    std::sort(kv[l].begin(), kv[l].end());
    std::sort(ffn[l].begin(), ffn[l].end());
    plan.layers[l].kv_heads = kv[l];
    plan.layers[l].heads = heads_of_groups(kv[l], cfg.layers[l].n_heads / cfg.layers[l].n_kv_heads);
    plan.layers[l].ffn = ffn[l];
  }
  return plan;
}

template <class Rank>
prune_plan allocate_ranked(const Rank& rank, const model::model_config& cfg, const group_scores& scores,
                           const allocation& a) {
  a.validate();
  check(scores.layers.size() == cfg.layers.size(), "prune allocation: scores cover ", scores.layers.size(),
        " layers, the model has ", cfg.layers.size());
  check(!scores.layers_only || a.gran == granularity::layers, "prune allocation: ", scores.criterion,
        " scores whole layers only (each head and FFN channel carries its layer's score); use granularity layers, not ",
        granularity_name(a.gran));
  prune_plan plan = keep_all(cfg);
  const bool do_heads = a.gran == granularity::heads || a.gran == granularity::heads_and_ffn;
  const bool do_ffn = a.gran == granularity::ffn || a.gran == granularity::heads_and_ffn;
  const std::size_t L = cfg.layers.size();

  if (a.gran == granularity::layers) {
    std::vector<double> s(L);
    for (std::size_t l = 0; l < L; ++l) {
      check(std::isfinite(scores.layers[l].layer), "prune allocation: layer ", l, " has a non-finite layer score");
      s[l] = scores.layers[l].layer;
    }
    const index_t remove = removed_count(a.ratio, static_cast<index_t>(L));
    check(remove < static_cast<index_t>(L), "prune allocation: ratio ", a.ratio, " would remove all ", L, " layers");
    const auto keep = top_k(rank, s, static_cast<index_t>(L) - remove);
    for (std::size_t l = 0; l < L; ++l) plan.layers[l].removed = !std::binary_search(keep.begin(), keep.end(), static_cast<index_t>(l));
    return plan;
  }

  for (std::size_t l = 0; l < L; ++l) {
    const auto& c = cfg.layers[l];
    if (do_heads) {
      if (a.heads == head_mode::query_heads) expect_scores(scores.layers[l].heads, c.n_heads, l, "query-head");
      else expect_scores(scores.layers[l].kv_groups, c.n_kv_heads, l, "KV-group");
    }
    if (do_ffn) expect_scores(scores.layers[l].ffn, c.ffn, l, "FFN-channel");
  }

  if (!a.global) {
    for (std::size_t l = 0; l < L; ++l) {
      const auto& c = cfg.layers[l];
      auto& lp = plan.layers[l];
      const index_t r = c.n_heads / c.n_kv_heads;
      if (do_heads && a.heads == head_mode::kv_groups) {
        const index_t remove = removed_count(a.ratio, c.n_kv_heads);
        check(remove < c.n_kv_heads, "prune allocation: ratio ", a.ratio, " would leave layer ", l, " with no KV group (it has ",
              c.n_kv_heads, "); lower the ratio or remove whole layers");
        lp.kv_heads = top_k(rank, scores.layers[l].kv_groups, c.n_kv_heads - remove);
        lp.heads = heads_of_groups(lp.kv_heads, r);
      } else if (do_heads) {
        const index_t remove = removed_count(a.ratio, r);
        check(remove < r, "prune allocation: ratio ", a.ratio, " would leave layer ", l,
              "'s KV groups with no query heads (each has ", r, ")");
        lp.heads.clear();
        for (index_t g = 0; g < c.n_kv_heads; ++g) {
          const std::vector<double> sg(scores.layers[l].heads.begin() + g * r, scores.layers[l].heads.begin() + (g + 1) * r);
          for (index_t h : top_k(rank, sg, r - remove)) lp.heads.push_back(g * r + h);
        }
      }
      if (do_ffn) {
        const index_t remove = removed_count(a.ratio, c.ffn);
        check(remove < c.ffn, "prune allocation: ratio ", a.ratio, " would leave layer ", l, " with no FFN channel");
        lp.ffn = top_k(rank, scores.layers[l].ffn, c.ffn - remove);
      }
    }
    return plan;
  }

  if (a.joint) return allocate_joint(rank, cfg, scores, a.ratio);

  // Global: pool each structure type over the layers and remove the lowest-scored fraction, skipping a
  // group whose removal would empty its layer.
  auto global_keep = [&](auto&& scores_of, auto&& count_of) {
    struct item {
      double s;
      std::size_t layer;
      index_t idx;
    };
    std::vector<item> all;
    index_t total = 0;
    for (std::size_t l = 0; l < L; ++l) {
      const auto& s = scores_of(l);
      for (std::size_t i = 0; i < s.size(); ++i) all.push_back({s[i], l, static_cast<index_t>(i)});
      total += count_of(l);
    }
    // Ascending by score, ties in pooling order: a stable descending ranking of the negated scores
    // (finite, so negation reverses every comparison and keeps every tie).
    std::vector<double> neg(all.size());
    for (std::size_t i = 0; i < all.size(); ++i) neg[i] = -all[i].s;
    std::vector<index_t> order(all.size());
    rank(order.data(), neg.data(), static_cast<index_t>(all.size()));
    std::vector<std::vector<char>> kept(L);
    std::vector<index_t> left(L);
    for (std::size_t l = 0; l < L; ++l) {
      kept[l].assign(static_cast<std::size_t>(count_of(l)), 1);
      left[l] = count_of(l);
    }
    index_t remove = removed_count(a.ratio, total);
    for (const index_t o : order) {
      const item& it = all[static_cast<std::size_t>(o)];
      if (remove == 0) break;
      if (left[it.layer] <= 1) continue;  // guard: one group stays in every layer
      kept[it.layer][static_cast<std::size_t>(it.idx)] = 0;
      --left[it.layer];
      --remove;
    }
    std::vector<std::vector<index_t>> out(L);
    for (std::size_t l = 0; l < L; ++l)
      for (std::size_t i = 0; i < kept[l].size(); ++i)
        if (kept[l][i]) out[l].push_back(static_cast<index_t>(i));
    return out;
  };
  if (do_heads) {
    const auto keep = global_keep([&](std::size_t l) -> const std::vector<double>& { return scores.layers[l].kv_groups; },
                                  [&](std::size_t l) { return cfg.layers[l].n_kv_heads; });
    for (std::size_t l = 0; l < L; ++l) {
      plan.layers[l].kv_heads = keep[l];
      plan.layers[l].heads = heads_of_groups(keep[l], cfg.layers[l].n_heads / cfg.layers[l].n_kv_heads);
    }
  }
  if (do_ffn) {
    const auto keep = global_keep([&](std::size_t l) -> const std::vector<double>& { return scores.layers[l].ffn; },
                                  [&](std::size_t l) { return cfg.layers[l].ffn; });
    for (std::size_t l = 0; l < L; ++l) plan.layers[l].ffn = keep[l];
  }
  return plan;
}

}  // namespace detail

// Ranks on the host.
inline prune_plan allocate(const model::model_config& cfg, const group_scores& scores, const allocation& a) {
  return detail::allocate_ranked(detail::host_rank{}, cfg, scores, a);
}

// Ranks with be.rank_descending when the backend declares device_ranking (ops/fused.hpp; backend::cuda), on the host otherwise; the
// plan is the same either way.
template <class Backend>
prune_plan allocate(Backend& be, const model::model_config& cfg, const group_scores& scores, const allocation& a) {
  if constexpr (ops::offers_device_ranking<Backend>) {
    const auto rank = [&be](index_t* order, const double* keys, index_t n) { be.rank_descending(order, keys, n); };
    return detail::allocate_ranked(rank, cfg, scores, a);
  } else {
    return allocate(cfg, scores, a);
  }
}

}  // namespace lwcl::prune
