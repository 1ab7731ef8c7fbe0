#pragma once
// A weight-entangled supernet over width x weight bits x activation bits for one pre-norm block, searched
// by differentiable architecture search with Gumbel-softmax (the joint width and mixed-precision search of
// experiments/nas_mp). Every candidate's weights are slices of the block's one set of weights:
//  - width: a candidate keeps the first K of the layer's KV groups in importance order (with all their
//    query heads) and the first F of its FFN channels. reorder_ffn() first puts the FFN channels in
//    importance order (a permutation: the block computes the same function), so a kept FFN set is a
//    prefix. Widths act as masks on the inputs of the o and mlp_out linears: with a candidate chosen
//    outright, the masked block is the smaller block exactly (a removed head or FFN channel contributes
//    nothing else).
//  - weight bits per linear, out of {4, 8, 32}: round-to-nearest, symmetric, in groups of `group` input
//    columns. With the group dividing the head dim, the width and every FFN candidate, a kept slice's
//    groups are the supernet's groups, so a candidate's quantised weight is a slice of the quantised
//    supernet weight: no candidate needs scales of its own.
//  - activation bits per linear site (qkv, o, mlp_in, mlp_out), out of {8, 32}: 8-bit asymmetric per
//    token (quant/act_quant.hpp).
// A choice among n options has logits a; each pass draws p = softmax((a + g) / tau) with Gumbel noise g
// and mixes: weights W' = sum_b p_b Q_b(W); site inputs x' = p_8 Q_8(m . x) + p_32 (m . x) with the width
// mask m_c = sum over width candidates j that keep channel c of p_j. Quantisers pass gradients straight
// through; d(loss)/d(p) comes from the weight gradients (<G, Q_b(W)>) and the hook's backward
// (<dx', Q_8(m.x)>, <dx', m.x>, and sum_tokens dx'_c x_c for m_c), then d(loss)/d(a) =
// (p . (dp - <p, dp>)) / tau. The expected latency sums a lookup table over the choices (each linear's
// shape from its width choice, bits from its own and its site's choices), and a hinge
// lambda * max(0, log(E / target)) pulls it under the target (or, two-sided, lambda * |log(E / target)|
// pulls it to the target from either side).

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/core/rng.hpp"
#include "lwcl/model/block.hpp"
#include "lwcl/model/config.hpp"
#include "lwcl/model/weights.hpp"
#include "lwcl/prune/plan.hpp"
#include "lwcl/quant/act_quant.hpp"
#include "lwcl/quant/fake_quant.hpp"
#include "lwcl/quant/format.hpp"

namespace lwcl::search {

// The candidates of every layer.
struct supernet_space {
  std::vector<index_t> kv_groups;         // KV groups kept (each with all its query heads), e.g. {6, 5, 4, 3}
  std::vector<index_t> ffn;               // FFN channels kept
  std::vector<int> weight_bits{4, 8, 32};  // 32: the f32 weight
  std::vector<int> act_bits{8, 32};        // 32: f32 activations
  index_t group = 32;                      // weight quantisation group (input columns)

  // Refuses a space that `cfg` cannot hold, naming what is wrong.
  void validate(const model::model_config& cfg) const {
    check(!cfg.traits().post_norm, "supernet_space: the supernet hooks pre-norm blocks (gpt2, llama, qwen2), not ",
          model::family_name(cfg.fam));
    check(!kv_groups.empty() && !ffn.empty() && !weight_bits.empty() && !act_bits.empty(),
          "supernet_space: every choice needs at least one candidate");
    for (int b : weight_bits)
      check(b == 4 || b == 8 || b == 32, "supernet_space: weight bits ", b, " (expected 4, 8 or 32)");
    for (int b : act_bits) check(b == 8 || b == 32, "supernet_space: activation bits ", b, " (expected 8 or 32)");
    const bool quantised = std::any_of(weight_bits.begin(), weight_bits.end(), [](int b) { return b < 32; });
    if (quantised) {
      check(group > 0 && group % 32 == 0, "supernet_space: group ", group,
            " is not a multiple of 32 (the packed int4/int8 formats store whole 32-column tiles)");
      check(cfg.d_model % group == 0 && cfg.head_dim % group == 0, "supernet_space: group ", group,
            " must divide the width ", cfg.d_model, " and the head dim ", cfg.head_dim,
            " (so that a kept head's columns are whole groups)");
      for (index_t f : ffn)
        check(f % group == 0, "supernet_space: FFN candidate ", f, " is not a multiple of the group ", group);
    }
    for (std::size_t l = 0; l < cfg.layers.size(); ++l) {
      const auto& L = cfg.layers[l];
      for (index_t k : kv_groups)
        check(k >= 1 && k <= L.n_kv_heads, "supernet_space: ", k, " KV groups in layer ", l, ", which has ", L.n_kv_heads);
      for (index_t f : ffn) check(f >= 1 && f <= L.ffn, "supernet_space: FFN width ", f, " in layer ", l, ", which has ", L.ffn);
    }
  }
};

inline constexpr std::array<model::linear_site, 4> all_sites = {model::linear_site::qkv, model::linear_site::o,
                                                                 model::linear_site::mlp_in, model::linear_site::mlp_out};
inline std::string_view site_name(model::linear_site s) {
  switch (s) {
    case model::linear_site::qkv: return "qkv";
    case model::linear_site::o: return "o";
    case model::linear_site::mlp_in: return "mlp_in";
    case model::linear_site::mlp_out: return "mlp_out";
  }
  return "?";
}

// The block linears of a layer (names under its prefix), the site each reads, and whether its shape
// follows the attention width (else the FFN width): rows follow it for q, k, v, fc, gate, up; columns
// for o, proj, down.
struct supernet_linear {
  std::string name;
  model::linear_site site;
  bool attention;
  bool width_in_cols;
};
inline std::vector<supernet_linear> supernet_linears(const model::model_config& cfg) {
  using model::linear_site;
  std::vector<supernet_linear> v = {{"attn.q.weight", linear_site::qkv, true, false},
                                    {"attn.k.weight", linear_site::qkv, true, false},
                                    {"attn.v.weight", linear_site::qkv, true, false},
                                    {"attn.o.weight", linear_site::o, true, true}};
  if (cfg.traits().gated_mlp) {
    v.push_back({"mlp.gate.weight", linear_site::mlp_in, false, false});
    v.push_back({"mlp.up.weight", linear_site::mlp_in, false, false});
    v.push_back({"mlp.down.weight", linear_site::mlp_out, false, true});
  } else {
    v.push_back({"mlp.fc.weight", linear_site::mlp_in, false, false});
    v.push_back({"mlp.proj.weight", linear_site::mlp_out, false, true});
  }
  return v;
}

// One layer's architecture, chosen outright.
struct layer_choice {
  index_t kv_groups = 0, ffn = 0;
  std::map<std::string, int> weight_bits;  // by linear name under the layer prefix
  std::map<model::linear_site, int> act_bits;
};

// The chosen subnet's 8-bit activation sites at inference: a hook (transformer::set_infer_hook) that
// quantises the inputs of the (layer, site) pairs it holds per token, as the supernet's forward did with
// the site chosen outright (the exported model's perplexity is taken through it). Inference only.
struct act8_hook : model::linear_input_hook {
  std::set<std::pair<index_t, model::linear_site>> sites;
  void forward(index_t layer, model::linear_site site, const tensor& x) override {
    if (!sites.count({layer, site})) return;
    const index_t K = x.shape[x.shape.rank() - 1];
    quant::fake_quantize_tokens(x.ptr<float>("act8_hook"), x.numel() / K, K, "act8_hook");
  }
  void backward(index_t, model::linear_site, const tensor&) override {
    fail("act8_hook: the exported subnet's 8-bit activations are for inference (no backward pass)");
  }
};

// One categorical choice relaxed by Gumbel-softmax, with its own Adam state.
struct gumbel_choice {
  std::vector<double> logit, p, dp, m, v;
  std::optional<index_t> fixed;  // a candidate chosen outright: p is one-hot and the logits do not move

  explicit gumbel_choice(std::size_t n = 1) : logit(n, 0.0), p(n, 1.0 / static_cast<double>(n)), dp(n, 0.0), m(n, 0.0), v(n, 0.0) {}
  std::size_t size() const { return logit.size(); }

  // p = softmax((logit + g) / tau), g Gumbel noise from `rng` at indices [base, base + n) (noise false:
  // g = 0); one-hot when fixed. Clears dp.
  void sample(const philox_stream& rng, std::uint64_t base, double tau, bool noise) {
    std::fill(dp.begin(), dp.end(), 0.0);
    if (fixed) {
      std::fill(p.begin(), p.end(), 0.0);
      p[static_cast<std::size_t>(*fixed)] = 1.0;
      return;
    }
    double mx = -1e300;
    for (std::size_t i = 0; i < size(); ++i) {
      double g = 0;
      if (noise) {
        const double u = std::clamp(static_cast<double>(rng.uniform(base + i)), 1e-9, 1.0 - 1e-9);
        g = -std::log(-std::log(u));
      }
      p[i] = (logit[i] + g) / tau;
      mx = std::max(mx, p[i]);
    }
    double s = 0;
    for (double& x : p) s += (x = std::exp(x - mx));
    for (double& x : p) x /= s;
  }
  // d(loss)/d(logit) from dp at the last sample, at temperature tau.
  std::vector<double> logit_grad(double tau) const {
    std::vector<double> g(size(), 0.0);
    if (fixed) return g;
    double dot = 0;
    for (std::size_t i = 0; i < size(); ++i) dot += p[i] * dp[i];
    for (std::size_t i = 0; i < size(); ++i) g[i] = p[i] * (dp[i] - dot) / tau;
    return g;
  }
  void adam_step(const std::vector<double>& g, double lr, long t, double b1 = 0.9, double b2 = 0.999) {
    if (fixed) return;
    for (std::size_t i = 0; i < size(); ++i) {
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      const double mh = m[i] / (1 - std::pow(b1, static_cast<double>(t))), vh = v[i] / (1 - std::pow(b2, static_cast<double>(t)));
      logit[i] -= lr * mh / (std::sqrt(vh) + 1e-8);
    }
  }
  index_t argmax() const {
    if (fixed) return *fixed;
    return static_cast<index_t>(std::max_element(logit.begin(), logit.end()) - logit.begin());
  }
};

// Importance of a layer's FFN channels from its weights: ||row j of fc (and gate, up)|| x ||column j of
// proj (down)||, and of its KV groups: the Frobenius norms of the group's v rows times its query heads'
// o columns. Host f32 parameters in `layout` order.
inline std::vector<double> ffn_importance(const model::model_config& cfg, const tensor_layout& layout, const std::vector<float>& w,
                                          index_t layer) {
  const std::string p = model::layer_prefix(layer);
  const index_t F = cfg.layers[static_cast<std::size_t>(layer)].ffn, C = cfg.d_model;
  const bool gated = cfg.traits().gated_mlp;
  std::vector<double> in(static_cast<std::size_t>(F), 0.0), out(static_cast<std::size_t>(F), 0.0);
  for (const char* n : gated ? std::vector<const char*>{"mlp.gate.weight", "mlp.up.weight"} : std::vector<const char*>{"mlp.fc.weight"}) {
    const auto& e = layout.find(p + n);
    for (index_t j = 0; j < F; ++j)
      for (index_t c = 0; c < C; ++c) in[static_cast<std::size_t>(j)] += std::pow(w[static_cast<std::size_t>(e.offset + j * C + c)], 2);
  }
  const auto& d = layout.find(p + (gated ? "mlp.down.weight" : "mlp.proj.weight"));
  for (index_t c = 0; c < C; ++c)
    for (index_t j = 0; j < F; ++j) out[static_cast<std::size_t>(j)] += std::pow(w[static_cast<std::size_t>(d.offset + c * F + j)], 2);
  std::vector<double> s(static_cast<std::size_t>(F));
  for (std::size_t j = 0; j < s.size(); ++j) s[j] = std::sqrt(in[j] * out[j]);
  return s;
}
inline std::vector<double> kv_group_importance(const model::model_config& cfg, const tensor_layout& layout,
                                               const std::vector<float>& w, index_t layer) {
  const std::string p = model::layer_prefix(layer);
  const auto& L = cfg.layers[static_cast<std::size_t>(layer)];
  const index_t C = cfg.d_model, D = cfg.head_dim, HD = L.n_heads * D, r = L.n_heads / L.n_kv_heads;
  const auto& v = layout.find(p + "attn.v.weight");
  const auto& o = layout.find(p + "attn.o.weight");
  std::vector<double> s(static_cast<std::size_t>(L.n_kv_heads));
  for (index_t g = 0; g < L.n_kv_heads; ++g) {
    double nv = 0, no = 0;
    for (index_t i = g * D * C; i < (g + 1) * D * C; ++i) nv += std::pow(w[static_cast<std::size_t>(v.offset + i)], 2);
    for (index_t c = 0; c < C; ++c)
      for (index_t j = g * r * D; j < (g + 1) * r * D; ++j) no += std::pow(w[static_cast<std::size_t>(o.offset + c * HD + j)], 2);
    s[static_cast<std::size_t>(g)] = std::sqrt(nv * no);
  }
  return s;
}

// Permutes layer `layer`'s FFN channels into descending importance in place (rows of fc / gate / up and
// fc's bias, columns of proj / down): the block computes the same function, and a kept FFN set becomes a
// prefix. Returns the order (new channel i was old channel order[i]).
inline std::vector<index_t> reorder_ffn(const model::model_config& cfg, const tensor_layout& layout, std::vector<float>& w,
                                        index_t layer) {
  const auto imp = ffn_importance(cfg, layout, w, layer);
  std::vector<index_t> order(imp.size());
  std::iota(order.begin(), order.end(), index_t{0});
  std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) { return imp[static_cast<std::size_t>(a)] > imp[static_cast<std::size_t>(b)]; });
  const std::string p = model::layer_prefix(layer);
  const index_t F = static_cast<index_t>(order.size()), C = cfg.d_model;
  auto rows = [&](const std::string& name, index_t cols) {
    if (!layout.contains(name)) return;
    const auto& e = layout.find(name);
    std::vector<float> old(w.begin() + e.offset, w.begin() + e.offset + F * cols);
    for (index_t i = 0; i < F; ++i)
      std::copy_n(old.begin() + order[static_cast<std::size_t>(i)] * cols, cols, w.begin() + e.offset + i * cols);
  };
  const bool gated = cfg.traits().gated_mlp;
  rows(p + (gated ? "mlp.gate.weight" : "mlp.fc.weight"), C);
  if (gated) rows(p + "mlp.up.weight", C);
  else rows(p + "mlp.fc.bias", 1);
  const auto& d = layout.find(p + (gated ? "mlp.down.weight" : "mlp.proj.weight"));
  std::vector<float> old(w.begin() + d.offset, w.begin() + d.offset + C * F);
  for (index_t c = 0; c < C; ++c)
    for (index_t i = 0; i < F; ++i)
      w[static_cast<std::size_t>(d.offset + c * F + i)] = old[static_cast<std::size_t>(c * F + order[static_cast<std::size_t>(i)])];
  return order;
}

// The table the expected latency reads: seconds of one linear of (rows, cols) at (weight bits, act bits).
using linear_latency = std::function<double(index_t rows, index_t cols, int weight_bits, int act_bits)>;

// The supernet of one layer: its choices, the weight mixture (a segment_trainer weight transform), the
// hook on its linear inputs, the architecture gradients and the expected latency.
class supernet_layer final : public model::linear_input_hook {
 public:
  // `w` / `layout`: the segment's host f32 parameters (they must hold layer `layer`), used to rank the
  // KV groups (the FFN channels are assumed reordered by reorder_ffn).
  supernet_layer(const model::model_config& cfg, const supernet_space& space, index_t layer, const tensor_layout& layout,
                 const std::vector<float>& w)
      : cfg_(cfg), space_(space), layer_(layer), linears_(supernet_linears(cfg)) {
    space.validate(cfg);
    check(layer >= 0 && layer < cfg.n_layers(), "supernet_layer: layer ", layer, " of ", cfg.n_layers());
    const auto& L = cfg.layers[static_cast<std::size_t>(layer)];
    const auto imp = kv_group_importance(cfg, layout, w, layer);
    std::vector<index_t> order(imp.size());
    std::iota(order.begin(), order.end(), index_t{0});
    std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) { return imp[static_cast<std::size_t>(a)] > imp[static_cast<std::size_t>(b)]; });
    group_rank_.assign(static_cast<std::size_t>(L.n_kv_heads), 0);
    for (std::size_t i = 0; i < order.size(); ++i) group_rank_[static_cast<std::size_t>(order[i])] = static_cast<index_t>(i);
    width_attn_ = gumbel_choice(space.kv_groups.size());
    width_ffn_ = gumbel_choice(space.ffn.size());
    for (const auto& lin : linears_) {
      wbits_.emplace(lin.name, gumbel_choice(space.weight_bits.size()));
      check(layout.contains(model::layer_prefix(layer) + lin.name), "supernet_layer: the parameters lack '",
            model::layer_prefix(layer) + lin.name, "'");
    }
    for (auto s : all_sites) abits_.emplace(s, gumbel_choice(space.act_bits.size()));
  }

  index_t layer() const { return layer_; }
  const supernet_space& space() const { return space_; }

  // Draws this pass's probabilities (Gumbel noise from `rng` when `noise`), and forms the masks.
  void sample(const philox_stream& rng, double tau, bool noise = true) {
    tau_ = tau;
    std::uint64_t base = 0;
    auto draw = [&](gumbel_choice& c) {
      c.sample(rng, base, tau, noise);
      base += c.size();
    };
    draw(width_attn_);
    draw(width_ffn_);
    for (auto& [n, c] : wbits_) draw(c);
    for (auto& [s, c] : abits_) draw(c);
    const auto& L = cfg_.layers[static_cast<std::size_t>(layer_)];
    const index_t D = cfg_.head_dim, r = L.n_heads / L.n_kv_heads;
    mask_o_.assign(static_cast<std::size_t>(L.n_heads * D), 0.0f);
    for (index_t c = 0; c < L.n_heads * D; ++c) {
      const index_t rank = group_rank_[static_cast<std::size_t>(c / D / r)];
      double m = 0;
      for (std::size_t j = 0; j < space_.kv_groups.size(); ++j)
        if (rank < space_.kv_groups[j]) m += width_attn_.p[j];
      mask_o_[static_cast<std::size_t>(c)] = static_cast<float>(m);
    }
    mask_ffn_.assign(static_cast<std::size_t>(L.ffn), 0.0f);
    for (index_t c = 0; c < L.ffn; ++c) {
      double m = 0;
      for (std::size_t j = 0; j < space_.ffn.size(); ++j)
        if (c < space_.ffn[j]) m += width_ffn_.p[j];
      mask_ffn_[static_cast<std::size_t>(c)] = static_cast<float>(m);
    }
  }

  // Chooses outright (the test's and an evaluation's subnet); clear_fixed() returns to searching.
  void fix(const layer_choice& c) {
    width_attn_.fixed = index_of(space_.kv_groups, c.kv_groups, "KV groups");
    width_ffn_.fixed = index_of(space_.ffn, c.ffn, "FFN width");
    for (auto& [n, g] : wbits_) {
      const auto it = c.weight_bits.find(n);
      check(it != c.weight_bits.end(), "supernet_layer: the choice has no weight bits for '", n, "'");
      g.fixed = index_of(space_.weight_bits, it->second, "weight bits");
    }
    for (auto& [s, g] : abits_) {
      const auto it = c.act_bits.find(s);
      check(it != c.act_bits.end(), "supernet_layer: the choice has no activation bits for site ", site_name(s));
      g.fixed = index_of(space_.act_bits, it->second, "activation bits");
    }
  }
  void clear_fixed() {
    width_attn_.fixed.reset();
    width_ffn_.fixed.reset();
    for (auto& [n, g] : wbits_) g.fixed.reset();
    for (auto& [s, g] : abits_) g.fixed.reset();
  }

  // The most probable candidate of every choice.
  layer_choice chosen() const {
    layer_choice c;
    c.kv_groups = space_.kv_groups[static_cast<std::size_t>(width_attn_.argmax())];
    c.ffn = space_.ffn[static_cast<std::size_t>(width_ffn_.argmax())];
    for (const auto& [n, g] : wbits_) c.weight_bits[n] = space_.weight_bits[static_cast<std::size_t>(g.argmax())];
    for (const auto& [s, g] : abits_) c.act_bits[s] = space_.act_bits[static_cast<std::size_t>(g.argmax())];
    return c;
  }

  // The weight transform: every linear of the layer becomes sum_b p_b Q_b(W) (Q_32 = W), keeping the
  // Q_b(W) for the gradients. `layout` indexes master / effective.
  void mix_weights(const tensor_layout& layout, const std::vector<float>& master, std::vector<float>& effective) {
    quantised_.clear();
    const std::string pre = model::layer_prefix(layer_);
    for (const auto& lin : linears_) {
      const auto& e = layout.find(pre + lin.name);
      const auto& g = wbits_.at(lin.name);
      const auto n = static_cast<std::size_t>(e.shape.numel());
      float* eff = effective.data() + e.offset;
      std::fill(eff, eff + n, 0.0f);
      auto& qs = quantised_[lin.name];
      qs.resize(space_.weight_bits.size());
      for (std::size_t b = 0; b < space_.weight_bits.size(); ++b) {
        const int bits = space_.weight_bits[b];
        if (bits == 32) {
          qs[b].clear();
          if (g.p[b] != 0.0)
            for (std::size_t i = 0; i < n; ++i) eff[i] += static_cast<float>(g.p[b]) * master[static_cast<std::size_t>(e.offset) + i];
          continue;
        }
        qs[b].assign(master.begin() + e.offset, master.begin() + e.offset + static_cast<std::ptrdiff_t>(n));
        quant::weight_format f;
        f.bits = bits;
        f.group = space_.group;
        quant::fake_quantize(qs[b].data(), e.shape[0], e.shape[1], f, pre + lin.name);
        if (g.p[b] != 0.0)
          for (std::size_t i = 0; i < n; ++i) eff[i] += static_cast<float>(g.p[b]) * qs[b][i];
      }
    }
  }

  // After the backward pass: d(loss)/d(p) of the weight-bit choices from the weight gradients `grads`
  // (layout order) at the mixed weights. The master weights take the gradients unchanged (straight
  // through: sum_b p_b = 1).
  void weight_grads(const tensor_layout& layout, const float* grads, const std::vector<float>& master) {
    const std::string pre = model::layer_prefix(layer_);
    for (const auto& lin : linears_) {
      const auto& e = layout.find(pre + lin.name);
      auto& g = wbits_.at(lin.name);
      const auto n = static_cast<std::size_t>(e.shape.numel());
      const auto& qs = quantised_.at(lin.name);
      for (std::size_t b = 0; b < space_.weight_bits.size(); ++b) {
        const float* q = space_.weight_bits[b] == 32 ? master.data() + e.offset : qs[b].data();
        double s = 0;
        for (std::size_t i = 0; i < n; ++i) s += static_cast<double>(grads[static_cast<std::size_t>(e.offset) + i]) * q[i];
        g.dp[b] += s;
      }
    }
  }

  // The expected seconds of the layer's linears under this pass's probabilities; with `lambda`, adds
  // the gradient of lambda * max(0, log(E / target)) to the choices' dp (two_sided: of
  // lambda * |log(E / target)|, which also pushes a layer under its target back up towards it) and
  // returns E.
  double expected_latency(const linear_latency& table, double target = 0, double lambda = 0, bool two_sided = false) {
    const auto& L = cfg_.layers[static_cast<std::size_t>(layer_)];
    const index_t C = cfg_.d_model, D = cfg_.head_dim, r = L.n_heads / L.n_kv_heads;
    // E = sum_lin sum_j pw_j sum_b pb_b sum_a pa_a T(shape(j), b, a)
    struct term {
      const supernet_linear* lin;
      std::size_t j, b, a;
      double t;
    };
    std::vector<term> terms;
    double E = 0;
    for (const auto& lin : linears_) {
      const auto& wc = lin.attention ? width_attn_ : width_ffn_;
      const auto& bc = wbits_.at(lin.name);
      const auto& ac = abits_.at(lin.site);
      for (std::size_t j = 0; j < wc.size(); ++j) {
        index_t width = 0;
        if (lin.attention) {
          const index_t k = space_.kv_groups[j];
          const bool kv = lin.name == "attn.k.weight" || lin.name == "attn.v.weight";
          width = kv ? k * D : k * r * D;
        } else {
          width = space_.ffn[j];
        }
        const index_t rows = lin.width_in_cols ? C : width, cols = lin.width_in_cols ? width : C;
        for (std::size_t b = 0; b < bc.size(); ++b)
          for (std::size_t a = 0; a < ac.size(); ++a) {
            const double t = table(rows, cols, space_.weight_bits[b], space_.act_bits[a]);
            E += wc.p[j] * bc.p[b] * ac.p[a] * t;
            terms.push_back({&lin, j, b, a, t});
          }
      }
    }
    if (lambda > 0 && target > 0 && (E > target || (two_sided && E < target))) {
      const double k = (E > target ? lambda : -lambda) / E;
      for (const auto& t : terms) {
        auto& wc = t.lin->attention ? width_attn_ : width_ffn_;
        auto& bc = wbits_.at(t.lin->name);
        auto& ac = abits_.at(t.lin->site);
        wc.dp[t.j] += k * bc.p[t.b] * ac.p[t.a] * t.t;
        bc.dp[t.b] += k * wc.p[t.j] * ac.p[t.a] * t.t;
        ac.dp[t.a] += k * wc.p[t.j] * bc.p[t.b] * t.t;
      }
    }
    return E;
  }

  // d(loss)/d(logits) of every choice in one vector (width attention, width FFN, weight bits by linear
  // name, activation bits by site), and the logits in the same order (for tests and a record).
  std::vector<double> logit_grads() const {
    std::vector<double> g;
    for_each([&](const gumbel_choice& c) {
      const auto v = c.logit_grad(tau_);
      g.insert(g.end(), v.begin(), v.end());
    });
    return g;
  }
  std::vector<double*> logits() {
    std::vector<double*> v;
    for_each_mut([&](gumbel_choice& c) {
      for (double& x : c.logit) v.push_back(&x);
    });
    return v;
  }
  // One Adam step on the logits from this pass's dp.
  void update_logits(double lr) {
    ++arch_steps_;
    for_each_mut([&](gumbel_choice& c) { c.adam_step(c.logit_grad(tau_), lr, arch_steps_); });
  }

  // The probabilities of every choice at this pass, for a record.
  std::map<std::string, std::vector<double>> probabilities() const {
    std::map<std::string, std::vector<double>> m;
    m["kv_groups"] = width_attn_.p;
    m["ffn"] = width_ffn_.p;
    for (const auto& [n, g] : wbits_) m["weight_bits " + n] = g.p;
    for (const auto& [s, g] : abits_) m["act_bits " + std::string(site_name(s))] = g.p;
    return m;
  }

  // The hook: masks (o, mlp_out) and mixes 8-bit and f32 activations, keeping what the backward needs.
  void forward(index_t layer, model::linear_site site, const tensor& x) override {
    if (layer != layer_) return;
    const index_t K = x.shape[x.shape.rank() - 1], M = x.numel() / K;
    float* v = x.ptr<float>("supernet_layer");
    auto& st = saved_[site];
    st.u.assign(v, v + x.numel());
    const std::vector<float>* mask = site == model::linear_site::o ? &mask_o_ : site == model::linear_site::mlp_out ? &mask_ffn_ : nullptr;
    if (mask)
      check(static_cast<index_t>(mask->size()) == K, "supernet_layer: site ", site_name(site), " reads ", K, " channels, the mask has ",
            mask->size());
    if (mask)
      for (index_t t = 0; t < M; ++t)
        for (index_t c = 0; c < K; ++c) v[t * K + c] *= (*mask)[static_cast<std::size_t>(c)];
    const auto& ac = abits_.at(site);
    st.q8.clear();
    for (std::size_t a = 0; a < ac.size(); ++a)
      if (space_.act_bits[a] == 8) {
        st.q8.assign(v, v + x.numel());
        quant::fake_quantize_tokens(st.q8.data(), M, K, "supernet_layer");
      }
    if (st.q8.empty()) return;
    double p8 = 0, p32 = 0;
    for (std::size_t a = 0; a < ac.size(); ++a) (space_.act_bits[a] == 8 ? p8 : p32) += ac.p[a];
    for (index_t i = 0; i < x.numel(); ++i)
      v[i] = static_cast<float>(p8 * st.q8[static_cast<std::size_t>(i)] + p32 * v[i]);
  }
  void backward(index_t layer, model::linear_site site, const tensor& dx) override {
    if (layer != layer_) return;
    const index_t K = dx.shape[dx.shape.rank() - 1], M = dx.numel() / K;
    float* g = dx.ptr<float>("supernet_layer");
    const auto& st = saved_.at(site);
    const std::vector<float>* mask = site == model::linear_site::o ? &mask_o_ : site == model::linear_site::mlp_out ? &mask_ffn_ : nullptr;
    auto& ac = abits_.at(site);
    // d p_a: <dx', Q_a(m . u)>.
    for (std::size_t a = 0; a < ac.size(); ++a) {
      double s = 0;
      if (space_.act_bits[a] == 8) {
        for (index_t i = 0; i < dx.numel(); ++i) s += static_cast<double>(g[i]) * st.q8[static_cast<std::size_t>(i)];
      } else {
        for (index_t t = 0; t < M; ++t)
          for (index_t c = 0; c < K; ++c)
            s += static_cast<double>(g[t * K + c]) * st.u[static_cast<std::size_t>(t * K + c)] *
                 (mask ? (*mask)[static_cast<std::size_t>(c)] : 1.0f);
      }
      ac.dp[a] += s;
    }
    if (!mask) return;  // straight through the quantiser: d(m . u) = dx'
    // d m_c = sum_t dx'_tc u_tc; d p_j = sum over the channels candidate j keeps; du = dx' . m.
    std::vector<double> dm(static_cast<std::size_t>(K), 0.0);
    for (index_t t = 0; t < M; ++t)
      for (index_t c = 0; c < K; ++c) {
        dm[static_cast<std::size_t>(c)] += static_cast<double>(g[t * K + c]) * st.u[static_cast<std::size_t>(t * K + c)];
        g[t * K + c] *= (*mask)[static_cast<std::size_t>(c)];
      }
    if (site == model::linear_site::o) {
      const auto& L = cfg_.layers[static_cast<std::size_t>(layer_)];
      const index_t D = cfg_.head_dim, r = L.n_heads / L.n_kv_heads;
      for (index_t c = 0; c < K; ++c) {
        const index_t rank = group_rank_[static_cast<std::size_t>(c / D / r)];
        for (std::size_t j = 0; j < space_.kv_groups.size(); ++j)
          if (rank < space_.kv_groups[j]) width_attn_.dp[j] += dm[static_cast<std::size_t>(c)];
      }
    } else {
      for (index_t c = 0; c < K; ++c)
        for (std::size_t j = 0; j < space_.ffn.size(); ++j)
          if (c < space_.ffn[j]) width_ffn_.dp[j] += dm[static_cast<std::size_t>(c)];
    }
  }

  // The plan of the chosen subnet's layer: the top `c.kv_groups` KV groups by rank (ascending, with all
  // their query heads) and the first c.ffn FFN channels.
  prune::layer_plan plan_of(const layer_choice& c) const {
    const auto& L = cfg_.layers[static_cast<std::size_t>(layer_)];
    const index_t r = L.n_heads / L.n_kv_heads;
    prune::layer_plan p;
    for (index_t g = 0; g < L.n_kv_heads; ++g)
      if (group_rank_[static_cast<std::size_t>(g)] < c.kv_groups) {
        p.kv_heads.push_back(g);
        for (index_t h = g * r; h < (g + 1) * r; ++h) p.heads.push_back(h);
      }
    p.ffn.resize(static_cast<std::size_t>(c.ffn));
    std::iota(p.ffn.begin(), p.ffn.end(), index_t{0});
    return p;
  }

  // Host bytes the hook keeps for a backward pass.
  std::size_t saved_bytes() const {
    std::size_t n = 0;
    for (const auto& [s, st] : saved_) n += (st.u.capacity() + st.q8.capacity()) * sizeof(float);
    for (const auto& [name, qs] : quantised_)
      for (const auto& q : qs) n += q.capacity() * sizeof(float);
    return n;
  }

 private:
  template <class T>
  static index_t index_of(const std::vector<T>& v, T x, const char* what) {
    const auto it = std::find(v.begin(), v.end(), x);
    check(it != v.end(), "supernet_layer: ", what, " ", x, " is not a candidate of the space");
    return static_cast<index_t>(it - v.begin());
  }
  template <class F>
  void for_each(F&& f) const {
    f(width_attn_);
    f(width_ffn_);
    for (const auto& [n, c] : wbits_) f(c);
    for (const auto& [s, c] : abits_) f(c);
  }
  template <class F>
  void for_each_mut(F&& f) {
    f(width_attn_);
    f(width_ffn_);
    for (auto& [n, c] : wbits_) f(c);
    for (auto& [s, c] : abits_) f(c);
  }

  struct saved {
    std::vector<float> u, q8;
  };
  model::model_config cfg_;
  supernet_space space_;
  index_t layer_;
  std::vector<supernet_linear> linears_;
  std::vector<index_t> group_rank_;  // rank of each KV group by importance (0: most important)
  gumbel_choice width_attn_, width_ffn_;
  std::map<std::string, gumbel_choice> wbits_;
  std::map<model::linear_site, gumbel_choice> abits_;
  std::vector<float> mask_o_, mask_ffn_;
  std::map<model::linear_site, saved> saved_;
  std::map<std::string, std::vector<std::vector<float>>> quantised_;
  double tau_ = 1.0;
  long arch_steps_ = 0;
};

}  // namespace lwcl::search
