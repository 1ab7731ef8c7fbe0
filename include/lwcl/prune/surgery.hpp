#pragma once
// Structured pruning surgery: builds the physically smaller dense model that a prune_plan describes
// (fewer query heads, KV groups, FFN channels and layers; a real parameter and FLOP reduction, not a
// mask) by copying the kept rows and columns. Optionally folds the removed output-projection input
// channels' calibration means into the output biases (FLAP's bias compensation).

#include <memory>
#include <string>
#include <vector>

#include "lwcl/model/encoder.hpp"
#include "lwcl/model/host_params.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/prune/plan.hpp"

namespace lwcl::prune {

// Calibration means of the output projections' input channels, per layer: attention (H * D, the o
// projection's input) and MLP (F, the proj/down input). Removed channels contribute W[:, j] * mean_j
// to the compensated bias.
struct bias_compensation {
  std::vector<std::vector<double>> attn_mean, mlp_mean;
};

namespace detail {
using model::host_params;
using model::set_host_params;
}  // namespace detail

namespace detail {
// A model of the same kind as `net` (decoder or encoder, with the encoder's token types) shaped by `cfg`.
template <class Backend>
std::unique_ptr<model::transformer<Backend>> same_kind(const model::transformer<Backend>& net, model::model_config cfg) {
  return std::make_unique<model::transformer<Backend>>(net.backend(), std::move(cfg), net.type());
}
template <class Backend>
std::unique_ptr<model::encoder<Backend>> same_kind(const model::encoder<Backend>& net, model::model_config cfg) {
  return std::make_unique<model::encoder<Backend>>(net.backend(), model::encoder_config{std::move(cfg), net.type_vocab()},
                                                   net.type());
}
}  // namespace detail

// Returns the pruned model (a transformer or an encoder, as `net`), on the same backend and in the same
// dtype as `net`; everything outside the layers (embeddings, the encoder's embedding LayerNorm, the
// final norm and head) is copied whole. With `comp`, the output biases absorb the removed channels'
// mean contribution; families without output biases (llama, qwen2) then get them
// (model_config::output_bias).
template <class Net>
std::unique_ptr<Net> apply_plan(const Net& net, const prune_plan& plan, const bias_compensation* comp = nullptr) {
  const auto& cfg = net.config();
  auto out_cfg = pruned_config(cfg, plan);
  if (comp) {
    check(comp->attn_mean.size() == cfg.layers.size() && comp->mlp_mean.size() == cfg.layers.size(),
          "apply_plan: bias compensation has means for ", comp->attn_mean.size(), "/", comp->mlp_mean.size(),
          " layers, the model has ", cfg.layers.size());
    out_cfg.output_bias = true;
  }
  auto out = detail::same_kind(net, out_cfg);
  const auto& src_layout = net.layout();
  const auto& dst_layout = out->layout();
  const auto src = detail::host_params(net);
  std::vector<double> dst(static_cast<std::size_t>(dst_layout.numel()), 0.0);

  auto copy_whole = [&](const std::string& from, const std::string& to) {
    const auto& a = src_layout.find(from);
    const auto& b = dst_layout.find(to);
    check(a.shape == b.shape, "apply_plan: '", from, "' has shape ", a.shape.str(), ", '", to, "' ", b.shape.str());
    std::copy_n(src.begin() + a.offset, a.shape.numel(), dst.begin() + b.offset);
  };
  // Rows of a (rows, cols) matrix or entries of a vector, in blocks of `block` rows.
  auto copy_rows = [&](const std::string& from, const std::string& to, const std::vector<index_t>& keep, index_t block) {
    const auto& a = src_layout.find(from);
    const auto& b = dst_layout.find(to);
    const index_t cols = a.shape.rank() == 2 ? a.shape[1] : 1;
    index_t r = 0;
    for (index_t k : keep)
      for (index_t i = 0; i < block; ++i, ++r)
        std::copy_n(src.begin() + a.offset + (k * block + i) * cols, cols, dst.begin() + b.offset + r * cols);
  };
  auto copy_cols = [&](const std::string& from, const std::string& to, const std::vector<index_t>& keep, index_t block) {
    const auto& a = src_layout.find(from);
    const auto& b = dst_layout.find(to);
    const index_t rows = a.shape[0], in = a.shape[1], out_cols = b.shape[1];
    for (index_t row = 0; row < rows; ++row) {
      index_t c = 0;
      for (index_t k : keep)
        for (index_t i = 0; i < block; ++i, ++c) dst[static_cast<std::size_t>(b.offset + row * out_cols + c)] = src[static_cast<std::size_t>(a.offset + row * in + k * block + i)];
    }
  };
  // bias += W[:, j] * mean_j over the input channels j not kept (blocks of `block` channels).
  auto compensate = [&](const std::string& weight, const std::string& bias, const std::vector<index_t>& keep, index_t block,
                        const std::vector<double>& mean) {
    const auto& w = src_layout.find(weight);
    const auto& b = dst_layout.find(bias);
    const index_t rows = w.shape[0], in = w.shape[1];
    check(static_cast<index_t>(mean.size()) == in, "apply_plan: bias compensation for '", weight, "' has ", mean.size(),
          " channel means, expected ", in);
    std::vector<char> kept(static_cast<std::size_t>(in), 0);
    for (index_t k : keep)
      for (index_t i = 0; i < block; ++i) kept[static_cast<std::size_t>(k * block + i)] = 1;
    for (index_t row = 0; row < rows; ++row) {
      double add = 0;
      for (index_t j = 0; j < in; ++j)
        if (!kept[static_cast<std::size_t>(j)]) add += src[static_cast<std::size_t>(w.offset + row * in + j)] * mean[static_cast<std::size_t>(j)];
      dst[static_cast<std::size_t>(b.offset + row)] += add;
    }
  };

  for (const auto& e : dst_layout.entries())
    if (e.name.rfind("layers.", 0) != 0) copy_whole(e.name, e.name);
  const index_t D = cfg.head_dim;
  index_t to = 0;
  for (std::size_t l = 0; l < plan.layers.size(); ++l) {
    const auto& lp = plan.layers[l];
    if (lp.removed) continue;
    const std::string s = model::layer_prefix(static_cast<index_t>(l)), d = model::layer_prefix(to++);
    const bool gated = cfg.traits().gated_mlp;
    for (const char* n : {"norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"})
      if (src_layout.contains(s + n)) copy_whole(s + n, d + n);
    copy_rows(s + "attn.q.weight", d + "attn.q.weight", lp.heads, D);
    copy_rows(s + "attn.k.weight", d + "attn.k.weight", lp.kv_heads, D);
    copy_rows(s + "attn.v.weight", d + "attn.v.weight", lp.kv_heads, D);
    if (src_layout.contains(s + "attn.q.bias")) {
      copy_rows(s + "attn.q.bias", d + "attn.q.bias", lp.heads, D);
      copy_rows(s + "attn.k.bias", d + "attn.k.bias", lp.kv_heads, D);
      copy_rows(s + "attn.v.bias", d + "attn.v.bias", lp.kv_heads, D);
    }
    copy_cols(s + "attn.o.weight", d + "attn.o.weight", lp.heads, D);
    const std::string fc = gated ? "mlp.gate" : "mlp.fc", proj = gated ? "mlp.down" : "mlp.proj";
    copy_rows(s + fc + ".weight", d + fc + ".weight", lp.ffn, 1);
    if (gated) copy_rows(s + "mlp.up.weight", d + "mlp.up.weight", lp.ffn, 1);
    if (src_layout.contains(s + fc + ".bias")) copy_rows(s + fc + ".bias", d + fc + ".bias", lp.ffn, 1);
    copy_cols(s + proj + ".weight", d + proj + ".weight", lp.ffn, 1);
    for (const std::string& b : {std::string("attn.o.bias"), proj + ".bias"})
      if (src_layout.contains(s + b)) copy_whole(s + b, d + b);
    if (comp) {
      compensate(s + "attn.o.weight", d + "attn.o.bias", lp.heads, D, comp->attn_mean[l]);
      compensate(s + proj + ".weight", d + proj + ".bias", lp.ffn, 1, comp->mlp_mean[l]);
    }
  }
  detail::set_host_params(*out, dst);
  return out;
}

// The teacher with the plan's removed groups masked instead of cut: the o-projection columns of
// removed query heads, the proj/down columns of removed FFN channels, and (for removed layers) both
// output projections and their biases set to zero. Its logits equal those of apply_plan's model.
template <class Backend>
void mask_plan(model::transformer<Backend>& net, const prune_plan& plan) {
  const auto& cfg = net.config();
  validate_plan(cfg, plan);
  const auto& layout = net.layout();
  auto p = detail::host_params(net);
  const bool gated = cfg.traits().gated_mlp;
  const index_t D = cfg.head_dim;
  for (std::size_t l = 0; l < plan.layers.size(); ++l) {
    const auto& lp = plan.layers[l];
    const std::string s = model::layer_prefix(static_cast<index_t>(l)), proj = gated ? "mlp.down" : "mlp.proj";
    const auto& L = cfg.layers[l];
    auto zero_cols = [&](const std::string& name, index_t n_groups, index_t block, const std::vector<index_t>& keep) {
      const auto& e = layout.find(name);
      const index_t rows = e.shape[0], in = e.shape[1];
      for (index_t g = 0; g < n_groups; ++g) {
        if (!lp.removed && std::binary_search(keep.begin(), keep.end(), g)) continue;
        for (index_t row = 0; row < rows; ++row)
          for (index_t i = 0; i < block; ++i) p[static_cast<std::size_t>(e.offset + row * in + g * block + i)] = 0;
      }
    };
    zero_cols(s + "attn.o.weight", L.n_heads, D, lp.heads);
    zero_cols(s + proj + ".weight", L.ffn, 1, lp.ffn);
    if (lp.removed)
      for (const std::string& b : {std::string("attn.o.bias"), proj + ".bias"})
        if (layout.contains(s + b)) {
          const auto& e = layout.find(s + b);
          std::fill_n(p.begin() + e.offset, e.shape.numel(), 0.0);
        }
  }
  detail::set_host_params(net, p);
}

}  // namespace lwcl::prune
