#pragma once
// Layer collapse (LaCo-style): merges runs of consecutive layers into one, theta_l + sum over the
// merged followers k of (theta_k - theta_l), keeping a merge only while the merged model's outputs on
// calibration data stay similar to the original's (mean cosine of the logits at or above a threshold).
// Walks from the top of the model down, as LaCo does; every merged layer must share one shape.

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "lwcl/model/transformer.hpp"
#include "lwcl/ops/common.hpp"
#include "lwcl/prune/surgery.hpp"

namespace lwcl::prune {

struct collapse_options {
  index_t merge = 2;          // followers merged into a layer per accepted step (LaCo's C - 1)
  double threshold = 0.9;     // minimum mean cosine similarity of the logits
  index_t interval = 1;       // after an accepted merge, the next candidate is this many layers lower
  index_t lowest = 0;         // layers below this are never merged into
  index_t target_layers = 1;  // stop once the model has this many layers

  void validate(index_t n_layers) const {
    check(merge >= 1, "layer_collapse: merge must be at least 1, got ", merge);
    check(interval >= 1, "layer_collapse: interval must be at least 1, got ", interval);
    check(std::isfinite(threshold) && threshold >= -1 && threshold <= 1, "layer_collapse: threshold ", threshold,
          " is outside [-1, 1]");
    check(lowest >= 0 && lowest < n_layers, "layer_collapse: lowest ", lowest, " is outside [0, ", n_layers, ")");
    check(target_layers >= 1 && target_layers <= n_layers, "layer_collapse: target_layers ", target_layers,
          " is outside [1, ", n_layers, "]");
  }
};

struct collapse_step {
  index_t layer, merged;  // layer index (in the model at that step) and how many followers were merged in
  double cosine;
  bool accepted;
};

namespace collapse_detail {

// Per-layer parameter vectors (in the layout's order) and everything outside the layers.
struct split_params {
  std::vector<std::vector<double>> layers;
  std::vector<double> all;
};

inline split_params split(const tensor_layout& layout, const std::vector<double>& p, index_t n_layers) {
  split_params s;
  s.all = p;
  s.layers.resize(static_cast<std::size_t>(n_layers));
  for (index_t l = 0; l < n_layers; ++l) {
    const std::string pre = model::layer_prefix(l);
    for (const auto& e : layout.entries())
      if (e.name.compare(0, pre.size(), pre) == 0)
        s.layers[static_cast<std::size_t>(l)].insert(s.layers[static_cast<std::size_t>(l)].end(), p.begin() + e.offset,
                                                     p.begin() + e.offset + e.shape.numel());
  }
  return s;
}

// A model of config `cfg` whose non-layer parameters come from `src_layout`/`src` and whose layer i
// takes the parameter vector layers[i].
template <class Backend>
std::unique_ptr<model::transformer<Backend>> assemble(Backend& be, const model::model_config& cfg, dtype t,
                                                      const tensor_layout& src_layout, const std::vector<double>& src,
                                                      const std::vector<std::vector<double>>& layers) {
  auto net = std::make_unique<model::transformer<Backend>>(be, cfg, t);
  const auto& layout = net->layout();
  std::vector<double> p(static_cast<std::size_t>(layout.numel()), 0.0);
  std::vector<std::size_t> used(layers.size(), 0);
  for (const auto& e : layout.entries()) {
    if (e.name.rfind("layers.", 0) == 0) {
      const auto l = static_cast<std::size_t>(std::stoll(e.name.substr(7, e.name.find('.', 7) - 7)));
      std::copy_n(layers[l].begin() + static_cast<std::ptrdiff_t>(used[l]), e.shape.numel(), p.begin() + e.offset);
      used[l] += static_cast<std::size_t>(e.shape.numel());
    } else {
      const auto& s = src_layout.find(e.name);
      std::copy_n(src.begin() + s.offset, e.shape.numel(), p.begin() + e.offset);
    }
  }
  detail::set_host_params(*net, p);
  return net;
}

template <class Backend>
std::vector<double> logits_host(model::transformer<Backend>& net, const std::vector<std::int32_t>& ids, index_t B, index_t T) {
  const tensor l = net.forward_logits(tensor(ids.data(), shape{B, T}));
  return ops::to_host_doubles(net.backend(), l, "layer_collapse");
}

// Mean over token positions of the cosine similarity of two (N, V) logit matrices.
inline double mean_cosine(const std::vector<double>& a, const std::vector<double>& b, index_t V) {
  const std::size_t n = a.size() / static_cast<std::size_t>(V);
  double total = 0;
  for (std::size_t r = 0; r < n; ++r) {
    double ab = 0, aa = 0, bb = 0;
    for (std::size_t j = r * static_cast<std::size_t>(V); j < (r + 1) * static_cast<std::size_t>(V); ++j) {
      ab += a[j] * b[j];
      aa += a[j] * a[j];
      bb += b[j] * b[j];
    }
    total += ab / std::sqrt(std::max(aa * bb, 1e-300));
  }
  return total / static_cast<double>(n);
}

}  // namespace collapse_detail

// The merged parameters of layers [l, l + merge]: theta_l + sum_k (theta_{l+k} - theta_l).
inline std::vector<double> merge_layers(const std::vector<std::vector<double>>& layers, index_t l, index_t merge) {
  std::vector<double> out = layers[static_cast<std::size_t>(l)];
  for (index_t k = 1; k <= merge; ++k) {
    const auto& f = layers[static_cast<std::size_t>(l + k)];
    check(f.size() == out.size(), "layer_collapse: layer ", l + k, " has ", f.size(), " parameters, layer ", l, " ",
          out.size(), "; merged layers must share one shape");
    for (std::size_t i = 0; i < out.size(); ++i) out[i] += f[i] - layers[static_cast<std::size_t>(l)][i];
  }
  return out;
}

// Collapses `net` on calibration ids (B x T, host memory); returns the merged model and, in `log`, every
// candidate tried.
template <class Backend>
std::unique_ptr<model::transformer<Backend>> layer_collapse(model::transformer<Backend>& net, const std::vector<std::int32_t>& ids,
                                                            index_t B, index_t T, const collapse_options& opt,
                                                            std::vector<collapse_step>* log = nullptr) {
  static_assert(!Backend::is_device, "layer_collapse works on host-backend models");
  auto cfg = net.config();
  opt.validate(cfg.n_layers());
  check(static_cast<index_t>(ids.size()) == B * T && B > 0 && T > 0, "layer_collapse: ", ids.size(),
        " calibration ids for a batch of ", B, " x ", T);
  for (const auto& L : cfg.layers)
    check(L.n_heads == cfg.layers[0].n_heads && L.n_kv_heads == cfg.layers[0].n_kv_heads && L.ffn == cfg.layers[0].ffn,
          "layer_collapse: the model's layers have different shapes; merging needs uniform layers");
  const auto reference = collapse_detail::logits_host(net, ids, B, T);
  const auto src = detail::host_params(net);
  auto layers = collapse_detail::split(net.layout(), src, cfg.n_layers()).layers;
  std::unique_ptr<model::transformer<Backend>> best;
  index_t l = cfg.n_layers() - 1 - opt.merge;
  while (l >= opt.lowest && static_cast<index_t>(layers.size()) > opt.target_layers) {
    const index_t m = std::min<index_t>(opt.merge, static_cast<index_t>(layers.size()) - opt.target_layers);
    if (l + m >= static_cast<index_t>(layers.size())) {
      l = static_cast<index_t>(layers.size()) - 1 - m;
      continue;
    }
    auto trial = layers;
    trial[static_cast<std::size_t>(l)] = merge_layers(layers, l, m);
    trial.erase(trial.begin() + l + 1, trial.begin() + l + 1 + m);
    auto tcfg = cfg;
    tcfg.layers.resize(trial.size());
    auto candidate = collapse_detail::assemble(net.backend(), tcfg, net.type(), net.layout(), src, trial);
    const double cos = collapse_detail::mean_cosine(collapse_detail::logits_host(*candidate, ids, B, T), reference, cfg.vocab);
    const bool ok = cos >= opt.threshold;
    if (log) log->push_back({l, m, cos, ok});
    if (ok) {
      layers = std::move(trial);
      best = std::move(candidate);
      l -= opt.interval;
    } else {
      l -= 1;
    }
  }
  if (!best) {  // nothing merged: an unchanged copy
    best = collapse_detail::assemble(net.backend(), cfg, net.type(), net.layout(), src, layers);
  }
  return best;
}

// The teacher layer each layer of the collapsed model starts from (the first of the run it merged), from
// layer_collapse's step log: accepted steps merge the next `merged` layers into `layer`. With
// model::boundaries_of_kept_layers it gives the collapsed model's layer map.
inline std::vector<index_t> kept_layers(const std::vector<collapse_step>& log, index_t n_layers) {
  std::vector<std::vector<index_t>> groups;
  for (index_t l = 0; l < n_layers; ++l) groups.push_back({l});
  for (const auto& st : log) {
    if (!st.accepted) continue;
    check(st.layer >= 0 && st.merged >= 1 && static_cast<std::size_t>(st.layer + st.merged) < groups.size(),
          "kept_layers: step merging ", st.merged, " layers into layer ", st.layer, " of ", groups.size());
    auto& g = groups[static_cast<std::size_t>(st.layer)];
    for (index_t k = 1; k <= st.merged; ++k) {
      const auto& f = groups[static_cast<std::size_t>(st.layer + k)];
      g.insert(g.end(), f.begin(), f.end());
    }
    groups.erase(groups.begin() + st.layer + 1, groups.begin() + st.layer + 1 + st.merged);
  }
  std::vector<index_t> kept;
  for (const auto& g : groups) kept.push_back(g.front());
  return kept;
}

}  // namespace lwcl::prune
