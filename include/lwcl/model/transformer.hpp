#pragma once
// A decoder language model built from model::block: token (+ learned position) embedding, the blocks,
// a final norm and an LM head (tied to the token embedding for gpt2). Parameters and their gradients
// each live in one flat buffer laid out by tensor_layout, so an optimiser steps over a single range.
// Forward returns the mean next-token cross-entropy; backward fills the gradient buffer.

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "lwcl/core/rng.hpp"
#include "lwcl/model/block_stack.hpp"
#include "lwcl/model/weights.hpp"
#include "lwcl/ops/cross_entropy.hpp"
#include "lwcl/ops/elementwise.hpp"
#include "lwcl/ops/embedding.hpp"

namespace lwcl::model {

// The parameter layout of a whole model: "wte", "wpe" (learned positions), "layers.<i>.<block param>",
// "norm_f.weight"/"norm_f.bias", and "lm_head.weight" when the head is not tied.
inline tensor_layout model_layout(const model_config& cfg) {
  const auto tr = cfg.traits();
  tensor_layout layout;
  layout.add("wte", {cfg.vocab, cfg.d_model});
  if (!tr.rope) layout.add("wpe", {cfg.max_seq, cfg.d_model});
  add_stack_params(layout, cfg, 0, cfg.n_layers());
  layout.add("norm_f.weight", {cfg.d_model});
  if (!tr.rms_norm) layout.add("norm_f.bias", {cfg.d_model});
  if (!cfg.tie_embeddings) layout.add("lm_head.weight", {cfg.vocab, cfg.d_model});
  return layout;
}

// Tag of the frozen constructors: a model for forward passes only (a teacher), built without a
// gradient buffer or saved activations (weights::freeze()).
struct frozen_t {};
inline constexpr frozen_t frozen{};

template <class Backend>
class transformer : public weights<Backend> {
  using base = weights<Backend>;
  using base::be_, base::type_, base::layout_, base::params_, base::grads_, base::stack_, base::bytes_of;

 public:
  using base::param, base::grad;

  transformer(Backend& be, model_config cfg, dtype t = dtype::f32)
      : base(be, cfg, (cfg.validate(), model_layout(cfg)), t), cfg_(std::move(cfg)) {
    check(!cfg_.traits().post_norm, "transformer: family ", family_name(cfg_.fam),
          " is an encoder; the language-model transformer supports gpt2, llama and qwen2");
  }

  transformer(Backend& be, model_config cfg, dtype t, frozen_t)
      : base(be, cfg, (cfg.validate(), model_layout(cfg)), t, true), cfg_(std::move(cfg)) {
    check(!cfg_.traits().post_norm, "transformer: family ", family_name(cfg_.fam),
          " is an encoder; the language-model transformer supports gpt2, llama and qwen2");
  }

  const model_config& config() const override { return cfg_; }
  void init(std::uint64_t seed) { this->init_from(cfg_, seed, "transformer"); }

  void embed_inputs(const tensor& tokens, const tensor& x) const override {
    check(tokens.shape.rank() == 2 && tokens.type == dtype::i32, "transformer::embed_inputs: tokens is ",
          dtype_name(tokens.type), " ", tokens.shape.str(), ", expected i32 (B, T)");
    check(tokens.shape[1] <= cfg_.max_seq, "transformer::embed_inputs: sequence length ", tokens.shape[1],
          " exceeds max_seq ", cfg_.max_seq);
    ops::embedding_forward(be_, x, tokens, param("wte"), has("wpe") ? param("wpe") : tensor());
  }

  // Runs the model on `tokens` (i32, (B, T), backend memory) up to the logits, saving what backward
  // needs; returns the logits (B, T, vocab), valid until the next forward.
  tensor forward_logits(const tensor& tokens) {
    check(tokens.shape.rank() == 2, "transformer::forward: tokens has shape ", tokens.shape.str(), ", expected (B, T)");
    const index_t B = tokens.shape[0], T = tokens.shape[1];
    check(T <= cfg_.max_seq, "transformer::forward: sequence length ", T, " exceeds max_seq ", cfg_.max_seq);
    ensure_acts(B, T);
    auto& a = *acts_;
    ops::embedding_forward(be_, a.x0, tokens, param("wte"), has("wpe") ? param("wpe") : tensor());
    this->stack("transformer::forward_logits").forward(a.x0, a.xL);
    final_norm(a.xL, a.hf, a.nf_mean, a.nf_rstd);
    ops::linear_forward(be_, a.logits, a.hf, head(), tensor());
    tokens_ = tokens;
    targets_ = tensor();  // backward needs the targets of forward(tokens, targets)
    return a.logits;
  }

  // Mean next-token cross-entropy of `targets` (i32, (B, T); < 0 ignored) given `tokens` (i32, (B, T)),
  // both in backend memory. Saves what backward needs.
  double forward(const tensor& tokens, const tensor& targets) {
    ops::expect_shape("transformer::forward", "targets", targets, tokens.shape);
    forward_logits(tokens);
    auto& a = *acts_;
    const index_t N = a.B * a.T;
    targets_ = targets;
    return ops::cross_entropy(be_, tensor(), a.row_loss, a.logits.reshaped({N, cfg_.vocab}), targets.reshaped({N}));
  }

  // Accumulates d(loss)/d(params) * loss_scale into the gradient buffer (call zero_grad first).
  void backward(double loss_scale = 1.0) {
    check(acts_ != nullptr && targets_.data != nullptr, "transformer::backward called before forward(tokens, targets)");
    auto& a = *acts_;
    const index_t N = a.B * a.T;
    be_.fill_zero(a.dlogits.data, a.dlogits.bytes());
    ops::cross_entropy(be_, a.dlogits.reshaped({N, cfg_.vocab}), a.row_loss, a.logits.reshaped({N, cfg_.vocab}),
                       targets_.reshaped({N}), loss_scale);
    backward_from_dlogits();
  }

  // Accumulates the gradients for a loss whose gradient with respect to the logits of the last
  // forward_logits is `dlogits` (B, T, vocab), e.g. a distillation loss against a teacher's logits.
  // With `dhidden` (B, T, d_model), the loss also depends on last_hidden() directly (a hidden-state
  // distillation term) and dhidden is its gradient there; an empty dlogits means the logits take no part.
  void backward_logits(const tensor& dlogits, const tensor& dhidden = tensor()) {
    check(acts_ != nullptr && tokens_.data != nullptr, "transformer::backward_logits called before forward_logits");
    check(dlogits.data != nullptr || dhidden.data != nullptr,
          "transformer::backward_logits: neither dlogits nor dhidden given, expected at least one");
    if (dlogits.data) {
      ops::expect_shape("transformer::backward_logits", "dlogits", dlogits, acts_->logits.shape);
      ops::copy(be_, acts_->dlogits, dlogits);
    } else {
      be_.fill_zero(acts_->dlogits.data, acts_->dlogits.bytes());
    }
    if (dhidden.data) ops::expect_shape("transformer::backward_logits", "dhidden", dhidden, acts_->xL.shape);
    backward_from_dlogits(dhidden);
  }

  // The hidden state leaving the last block (before the final norm) of the last forward: the feature at
  // the model's last boundary, h_L. Valid until the next forward.
  tensor last_hidden() const {
    check(acts_ != nullptr, "transformer::last_hidden called before forward_logits");
    return acts_->xL;
  }

  // Bytes of activation memory held for the current (B, T).
  std::size_t activation_bytes() const { return acts_ ? acts_->mem.bytes() + (stack_ ? stack_->activation_bytes() : 0) : 0; }

  // The logits of `tokens` (i32, (B, T), backend memory) into `logits` ((B, T, vocab)), keeping nothing
  // for a backward pass: the blocks run one at a time, each through one block's activations (the
  // forward of a frozen teacher). `hidden`, when given ((B, T, C)), receives h_L, the last block's
  // output. Works frozen or not, and gives the logits forward_logits gives.
  void infer_logits(const tensor& tokens, const tensor& logits, const tensor& hidden = tensor()) {
    check(tokens.shape.rank() == 2, "transformer::infer_logits: tokens has shape ", tokens.shape.str(), ", expected (B, T)");
    const index_t B = tokens.shape[0], T = tokens.shape[1];
    check(T <= cfg_.max_seq, "transformer::infer_logits: sequence length ", T, " exceeds max_seq ", cfg_.max_seq);
    ops::expect_shape("transformer::infer_logits", "logits", logits, shape{B, T, cfg_.vocab});
    if (hidden.data) ops::expect_shape("transformer::infer_logits", "hidden", hidden, shape{B, T, cfg_.d_model});
    if (!infer_ || infer_->B != B || infer_->T != T) {
      infer_.reset();
      auto a = std::make_unique<inference_scratch>();
      a->B = B;
      a->T = T;
      const index_t C = cfg_.d_model;
      a->mem.declare(a->x, {B, T, C});
      a->mem.declare(a->y, {B, T, C});
      a->mem.declare(a->hf, {B, T, C});
      if (!cfg_.traits().rms_norm) a->mem.declare(a->nf_mean, {B * T});
      a->mem.declare(a->nf_rstd, {B * T});
      a->mem.allocate(be_, type_);
      infer_ = std::move(a);
    }
    auto& a = *infer_;
    ops::embedding_forward(be_, a.x, tokens, param("wte"), has("wpe") ? param("wpe") : tensor());
    a.block_bytes = 0;
    for (index_t l = 0; l < cfg_.n_layers(); ++l) {
      const auto sh = shape_of_layer(cfg_, l);
      block_acts<Backend> acts(be_, sh, B, T, type_);
      a.block_bytes = std::max(a.block_bytes, acts.bytes());
      block_forward(be_, sh, bind_block(layout_, layer_prefix(l), params_.data(), type_), acts, a.x, a.y, infer_hook_, l);
      std::swap(a.x, a.y);
    }
    if (hidden.data) ops::copy(be_, hidden, a.x);
    final_norm(a.x, a.hf, a.nf_mean, a.nf_rstd);
    ops::linear_forward(be_, logits, a.hf, head(), tensor());
  }
  // infer_logits' blocks pass their linears' inputs through `h` (null: none; pre-norm families), e.g.
  // to quantise activations as a W8A8 model would. Must outlive the calls.
  void set_infer_hook(linear_input_hook* h) { infer_hook_ = h; }

  // The logits of a last hidden state h ((B, T, C), backend memory) into `logits` ((B, T, vocab)): the
  // final norm and the head, with scratch of its own, so several threads may call it on one model.
  void head_logits(const tensor& h, const tensor& logits) const {
    check(h.shape.rank() == 3 && h.shape[2] == cfg_.d_model, "transformer::head_logits: h has shape ", h.shape.str(),
          ", expected (B, T, ", cfg_.d_model, ")");
    const index_t B = h.shape[0], T = h.shape[1];
    ops::expect_shape("transformer::head_logits", "logits", logits, shape{B, T, cfg_.vocab});
    tensor hf, mean, rstd;
    arena<Backend> mem;
    mem.declare(hf, {B, T, cfg_.d_model});
    if (!cfg_.traits().rms_norm) mem.declare(mean, {B * T});
    mem.declare(rstd, {B * T});
    mem.allocate(be_, type_);
    final_norm(h, hf, mean, rstd);
    ops::linear_forward(be_, logits, hf, head(), tensor());
  }
  // Bytes the model holds now: parameters and gradients, saved activations, infer_logits' buffers.
  std::size_t resident_bytes() const { return this->parameter_bytes() + activation_bytes() + (infer_ ? infer_->mem.bytes() : 0); }
  // Bytes infer_logits held besides the parameters in its last call: its hidden-state buffers, and the
  // largest block's activations (one block's at a time).
  std::size_t inference_bytes() const { return infer_ ? infer_->mem.bytes() + infer_->block_bytes : 0; }

 private:
  // The backward pass from acts_->dlogits down to the embeddings.
  void backward_from_dlogits(const tensor& dhidden = tensor()) {
    auto& a = *acts_;
    be_.fill_zero(a.dh.data, a.dh.bytes());
    ops::linear_backward(be_, a.dh, head_grad(), tensor(), a.dlogits, a.hf, head());
    // Final norm backward into d(x_L), then the blocks, then the embeddings.
    be_.fill_zero(a.dxL.data, a.dxL.bytes());
    if (cfg_.traits().rms_norm)
      ops::rmsnorm_backward(be_, a.dxL, grad("norm_f.weight"), a.dh, a.xL, param("norm_f.weight"), a.nf_rstd);
    else
      ops::layernorm_backward(be_, a.dxL, grad("norm_f.weight"), grad("norm_f.bias"), a.dh, a.xL, param("norm_f.weight"),
                              a.nf_mean, a.nf_rstd);
    if (dhidden.data) ops::accumulate(be_, a.dxL, dhidden);
    be_.fill_zero(a.dx0.data, a.dx0.bytes());
    this->stack("transformer::backward").backward(a.dxL, a.dx0);
    ops::embedding_backward(be_, grad("wte"), has("wpe") ? grad("wpe") : tensor(), a.dx0, tokens_);
  }

  struct activations {
    index_t B, T;
    tensor x0, xL, hf, nf_mean, nf_rstd, logits, dlogits, dh, row_loss, dxL, dx0;
    arena<Backend> mem;
  };

  bool has(const std::string& name) const { return layout_.contains(name); }
  tensor head() const { return cfg_.tie_embeddings ? param("wte") : param("lm_head.weight"); }
  tensor head_grad() const { return cfg_.tie_embeddings ? grad("wte") : grad("lm_head.weight"); }

  struct inference_scratch {
    index_t B, T;
    tensor x, y, hf, nf_mean, nf_rstd;
    arena<Backend> mem;
    std::size_t block_bytes = 0;
  };

  void final_norm(const tensor& x, const tensor& out, const tensor& mean, const tensor& rstd) const {
    if (cfg_.traits().rms_norm)
      ops::rmsnorm_forward(be_, out, rstd, x, param("norm_f.weight"), cfg_.norm_eps);
    else
      ops::layernorm_forward(be_, out, mean, rstd, x, param("norm_f.weight"), param("norm_f.bias"), cfg_.norm_eps);
  }

  void ensure_acts(index_t B, index_t T) {
    if (acts_ && acts_->B == B && acts_->T == T) return;
    acts_.reset();
    auto a = std::make_unique<activations>();
    a->B = B;
    a->T = T;
    const index_t C = cfg_.d_model, V = cfg_.vocab;
    a->mem.declare(a->x0, {B, T, C});
    a->mem.declare(a->xL, {B, T, C});
    a->mem.declare(a->hf, {B, T, C});
    if (!cfg_.traits().rms_norm) a->mem.declare(a->nf_mean, {B * T});
    a->mem.declare(a->nf_rstd, {B * T});
    a->mem.declare(a->logits, {B, T, V});
    a->mem.declare(a->dlogits, {B, T, V});
    a->mem.declare(a->dh, {B, T, C});
    a->mem.declare(a->row_loss, {B * T});
    a->mem.declare(a->dxL, {B, T, C});
    a->mem.declare(a->dx0, {B, T, C});
    a->mem.allocate(be_, type_);
    acts_ = std::move(a);
  }

  model_config cfg_;
  std::unique_ptr<activations> acts_;
  std::unique_ptr<inference_scratch> infer_;
  linear_input_hook* infer_hook_ = nullptr;
  tensor tokens_, targets_;
};

}  // namespace lwcl::model
