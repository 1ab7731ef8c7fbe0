#pragma once
// A whole model quantised by one quantiser policy: every linear layer of every block (attention q, k, v,
// o; MLP fc or gate and up, proj or down) becomes a packed weight of one format, and its dequantised
// values are written back into the model, so that the model then computes what the packed one does.
// Embeddings, norms, biases and the LM head stay f32, as in GPTQ's own evaluation.
//
// With calibration batches the model is walked block by block, as GPTQ does: each calibration batch's
// hidden state enters block l as the output of blocks 0 .. l - 1 already quantised; one forward of block
// l (still f32) gathers the Hessian of each linear input (q, k and v share one, gate and up share one);
// every linear layer of the block is quantised; a second forward with the quantised block gives the
// next block its inputs. The calibration hidden states live in host memory (batches x B x T x d_model
// floats); one block's activations for one batch live on the backend. Without calibration batches a
// quantiser that needs none (round-to-nearest) is applied to every weight directly.
//
// Reported per layer: the quantiser's loss and, with calibration, the relative output error on the
// calibration inputs, tr(D S D^T) / tr(W S W^T) with D = W - Q and S = sum x x^T.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/core/progress.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/model/block.hpp"
#include "lwcl/model/config.hpp"
#include "lwcl/model/weights.hpp"
#include "lwcl/quant/format.hpp"
#include "lwcl/quant/gptq.hpp"
#include "lwcl/quant/packed.hpp"
#include "lwcl/quant/quantiser.hpp"

namespace lwcl::quant {

struct quantized_layer {
  std::string name;  // the parameter, e.g. "layers.3.attn.q.weight"
  index_t rows = 0, cols = 0;
  double loss = 0.0;  // the quantiser's own objective (GPTQ's); 0 for round-to-nearest
  double relative_output_error = std::numeric_limits<double>::quiet_NaN();  // NaN without calibration
  double seconds = 0.0;
};

struct quantized_model {
  weight_format format;
  std::string quantiser;
  std::vector<quantized_layer> layers;  // in the order quantised: block by block, inputs first
  std::vector<packed_weight> weights;   // weights[i] is layers[i]'s packed weight
  index_t calibration_tokens = 0;
  double seconds = 0.0;

  // Bytes of the packed linear weights (codes, scales, zero points) and of the f32 weights they replace.
  std::size_t packed_bytes() const {
    std::size_t n = 0;
    for (const auto& w : weights) n += w.bytes();
    return n;
  }
  std::size_t replaced_f32_bytes() const {
    std::size_t n = 0;
    for (const auto& l : layers) n += static_cast<std::size_t>(l.rows * l.cols) * sizeof(float);
    return n;
  }
  // The mean of the layers' relative output errors (NaN without calibration).
  double mean_relative_output_error() const {
    double s = 0;
    for (const auto& l : layers) s += l.relative_output_error;
    return layers.empty() ? 0.0 : s / static_cast<double>(layers.size());
  }
};

namespace model_detail {

// The linear layers of a block that read one input: the input's index in the block's four (attention
// input, attention output, MLP input, MLP hidden) and the weights' names under the layer prefix.
struct stage {
  int input;
  std::vector<std::pair<std::string, tensor model::block_weights::*>> linears;
};

inline std::vector<stage> stages_of(const model::block_shape& sh) {
  std::vector<stage> s;
  s.push_back({0, {{"attn.q.weight", &model::block_weights::q_w},
                   {"attn.k.weight", &model::block_weights::k_w},
                   {"attn.v.weight", &model::block_weights::v_w}}});
  s.push_back({1, {{"attn.o.weight", &model::block_weights::o_w}}});
  if (sh.tr.gated_mlp) {
    s.push_back({2, {{"mlp.gate.weight", &model::block_weights::fc_w}, {"mlp.up.weight", &model::block_weights::up_w}}});
    s.push_back({3, {{"mlp.down.weight", &model::block_weights::proj_w}}});
  } else {
    s.push_back({2, {{"mlp.fc.weight", &model::block_weights::fc_w}}});
    s.push_back({3, {{"mlp.proj.weight", &model::block_weights::proj_w}}});
  }
  return s;
}

// The block's four linear inputs after block_forward (pre-norm: the normed inputs; post-norm: the
// block input and the normed attention residual), as prune::calibration_pass reads them.
template <class Backend>
const tensor& input_of(const model::block_shape& sh, const model::block_acts<Backend>& a, const tensor& x, int i) {
  switch (i) {
    case 0: return sh.tr.post_norm ? x : a.h1;
    case 1: return a.att;
    case 2: return sh.tr.post_norm ? a.x2 : a.h2;
    default: return sh.tr.gated_mlp ? a.s : a.g;
  }
}

}  // namespace model_detail

// The format of each block linear by parameter name; std::nullopt keeps that linear f32 (mixed precision).
using format_fn = std::function<std::optional<weight_format>(const std::string& name)>;

// quantize_model (the uniform overload below) with each linear in its own format (format_of); out.format
// is the first quantised layer's.
template <class Backend, quantiser Q>
quantized_model quantize_model(model::weights<Backend>& net, const Q& q, const format_fn& format_of,
                               const std::vector<std::vector<std::int32_t>>& calibration, index_t B, index_t T,
                               bool show_progress = true, const std::string& label = "mixed") {
  const auto& cfg = net.config();
  check(net.type() == dtype::f32, "quantize_model: the model holds ", dtype_name(net.type()),
        " weights (expected f32: the quantisers read f32 weights)");
  if constexpr (Q::needs_calibration)
    check(!calibration.empty(), "quantize_model: ", Q::name, " needs calibration batches (none given)");
  const bool calibrated = !calibration.empty();
  if (calibrated) {
    check(B > 0 && T > 0, "quantize_model: calibration batch ", B, " x ", T, " must be positive");
    check(T <= cfg.max_seq, "quantize_model: calibration sequences of ", T, " tokens exceed the model's max_seq ", cfg.max_seq);
    for (std::size_t b = 0; b < calibration.size(); ++b) {
      check(calibration[b].size() == static_cast<std::size_t>(B * T), "quantize_model: calibration batch ", b, " holds ",
            calibration[b].size(), " token ids, expected ", B, " x ", T);
      for (const auto id : calibration[b])
        check(id >= 0 && id < cfg.vocab, "quantize_model: calibration batch ", b, " holds token id ", id,
              " outside the vocabulary of ", cfg.vocab);
    }
  }
  // Every layer's format is checked before any work, so a bad group size fails at once.
  for (index_t l = 0; l < cfg.n_layers(); ++l) {
    const auto sh = model::shape_of_layer(cfg, l);
    const auto w = model::bind_block(net.layout(), model::layer_prefix(l), net.params().data, net.type());
    for (const auto& st : model_detail::stages_of(sh))
      for (const auto& [name, field] : st.linears) {
        const tensor& t = w.*field;
        if (const auto f = format_of(model::layer_prefix(l) + name)) f->check_for(t.shape[0], t.shape[1], model::layer_prefix(l) + name);
      }
  }

  Backend& be = net.backend();
  quantized_model out;
  out.quantiser = std::string(Q::name);
  bool first_format = true;
  timer clock;
  const index_t C = cfg.d_model, n_layers = cfg.n_layers();
  index_t total = 0;
  for (index_t l = 0; l < n_layers; ++l)
    for (const auto& st : model_detail::stages_of(model::shape_of_layer(cfg, l))) total += static_cast<index_t>(st.linears.size());
  std::unique_ptr<progress> bar;
  if (show_progress) bar = std::make_unique<progress>("quantize " + out.quantiser + " " + label, total);

  // The hidden state of every calibration batch at the current block's input, in host memory.
  std::vector<std::vector<float>> hidden;
  buffer<Backend> tok, xb, yb;
  if (calibrated) {
    const auto per = static_cast<std::size_t>(B * T);
    tok = buffer<Backend>(be, per * sizeof(std::int32_t));
    xb = buffer<Backend>(be, per * static_cast<std::size_t>(C) * sizeof(float));
    yb = buffer<Backend>(be, per * static_cast<std::size_t>(C) * sizeof(float));
    const tensor x(xb.data(), dtype::f32, {B, T, C});
    for (const auto& ids : calibration) {
      be.from_host(tok.data(), ids.data(), tok.bytes());
      net.embed_inputs(tensor(tok.data(), dtype::i32, {B, T}), x);
      hidden.emplace_back(per * static_cast<std::size_t>(C));
      be.to_host(hidden.back().data(), xb.data(), xb.bytes());
    }
    out.calibration_tokens = static_cast<index_t>(calibration.size()) * B * T;
  }
  const tensor x(xb.data(), dtype::f32, {B, T, C}), y(yb.data(), dtype::f32, {B, T, C});

  index_t done = 0;
  for (index_t l = 0; l < n_layers; ++l) {
    const auto sh = model::shape_of_layer(cfg, l);
    const std::string prefix = model::layer_prefix(l);
    const auto w = model::bind_block(net.layout(), prefix, net.params().data, net.type());
    const auto stages = model_detail::stages_of(sh);
    std::unique_ptr<model::block_acts<Backend>> acts;
    std::vector<hessian> H;
    if (calibrated) {
      acts = std::make_unique<model::block_acts<Backend>>(be, sh, B, T, net.type());
      for (const auto& st : stages) H.emplace_back(model_detail::input_of(sh, *acts, x, st.input).shape.last());
      std::vector<float> host;
      for (const auto& h : hidden) {
        be.from_host(xb.data(), h.data(), xb.bytes());
        model::block_forward(be, sh, w, *acts, x, y);
        for (std::size_t s = 0; s < stages.size(); ++s) {
          const tensor& in = model_detail::input_of(sh, *acts, x, stages[s].input);
          host.resize(static_cast<std::size_t>(in.shape.numel()));
          be.to_host(host.data(), in.data, host.size() * sizeof(float));
          H[s].add(host.data(), in.shape.numel() / in.shape.last());
        }
      }
    }
    for (std::size_t s = 0; s < stages.size(); ++s)
      for (const auto& [name, field] : stages[s].linears) {
        timer t;
        const tensor& wt = w.*field;
        const index_t rows = wt.shape[0], cols = wt.shape[1];
        const auto fo = format_of(prefix + name);
        if (!fo) {
          if (bar) bar->update(++done, prefix + name + " kept f32");
          continue;
        }
        const weight_format& f = *fo;
        if (first_format) out.format = f;
        first_format = false;
        std::vector<float> W(static_cast<std::size_t>(rows * cols));
        be.to_host(W.data(), wt.data, W.size() * sizeof(float));
        quantized_layer rep;
        rep.name = prefix + name;
        rep.rows = rows;
        rep.cols = cols;
        quantized r = q.quantize(W.data(), rows, cols, calibrated ? &H[s] : nullptr, f, rep.name);
        const std::vector<float> Q_ = dequantize(r.weight);
        for (const float v : Q_) check(std::isfinite(v), "quantize_model: ", rep.name, " dequantises to ", v, " (expected finite)");
        rep.loss = r.loss;
        if (calibrated) rep.relative_output_error = H[s].relative_output_error(W.data(), Q_.data(), rows);
        be.from_host(wt.data, Q_.data(), Q_.size() * sizeof(float));
        rep.seconds = t.seconds();
        out.layers.push_back(std::move(rep));
        out.weights.push_back(std::move(r.weight));
        if (bar) {
          char note[96];
          std::snprintf(note, sizeof note, "%s rel. err %.2e", out.layers.back().name.c_str(),
                        out.layers.back().relative_output_error);
          bar->update(++done, note);
        }
      }
    if (calibrated && l + 1 < n_layers)  // the next block's inputs, through the quantised block
      for (auto& h : hidden) {
        be.from_host(xb.data(), h.data(), xb.bytes());
        model::block_forward(be, sh, w, *acts, x, y);
        be.to_host(h.data(), yb.data(), yb.bytes());
      }
  }
  out.seconds = clock.seconds();
  return out;
}

// Quantises every block linear of `net` (f32) with `q` to format `f`, in place; `calibration` holds
// batches of B * T token ids (row-major (B, T)), and may be empty for a quantiser that needs none.
// Progress goes to stderr when `show_progress`.
template <class Backend, quantiser Q>
quantized_model quantize_model(model::weights<Backend>& net, const Q& q, const weight_format& f,
                               const std::vector<std::vector<std::int32_t>>& calibration, index_t B, index_t T,
                               bool show_progress = true) {
  return quantize_model(net, q, format_fn([f](const std::string&) { return std::optional<weight_format>(f); }), calibration, B,
                        T, show_progress, f.describe());
}

}  // namespace lwcl::quant
