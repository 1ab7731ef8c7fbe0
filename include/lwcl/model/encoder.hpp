#pragma once
// A bidirectional encoder (family bert): word + learned position + token-type embeddings, an embedding
// LayerNorm, then post-norm blocks, giving the last hidden states. Mean pooling and L2 normalisation
// on top turn them into sentence embeddings, as sentence-transformers computes them for models such
// as all-MiniLM-L6-v2. Parameters and gradients each live in one flat buffer, like transformer.hpp.

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lwcl/core/config.hpp"
#include "lwcl/core/math.hpp"
#include "lwcl/model/block_stack.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/model/weights.hpp"
#include "lwcl/ops/elementwise.hpp"
#include "lwcl/ops/embedding.hpp"
#include "lwcl/ops/layernorm.hpp"

namespace lwcl::model {

// An encoder's configuration: the shared model_config (family bert) and the number of token types
// (segments A/B), which decoders do not have and so model_config does not carry.
struct encoder_config {
  model_config model;
  index_t type_vocab = 2;

  void validate() const {
    model.validate();
    check(model.fam == family::bert, "encoder: family ", family_name(model.fam),
          " is a decoder; the encoder supports bert (use model::transformer for gpt2, llama and qwen2)");
    check(type_vocab > 0 && type_vocab <= model_config::max_dimension, "encoder: type_vocab must be in [1, ",
          model_config::max_dimension, "], got ", type_vocab);
  }
};

// The parameter layout of an encoder: "wte" (words), "wpe" (positions), "wtt" (token types),
// "norm_emb.weight"/"norm_emb.bias" (the embedding LayerNorm), then "layers.<i>.<block param>".
inline tensor_layout encoder_layout(const encoder_config& cfg) {
  const auto& m = cfg.model;
  tensor_layout layout;
  layout.add("wte", {m.vocab, m.d_model});
  layout.add("wpe", {m.max_seq, m.d_model});
  layout.add("wtt", {cfg.type_vocab, m.d_model});
  layout.add("norm_emb.weight", {m.d_model});
  layout.add("norm_emb.bias", {m.d_model});
  add_stack_params(layout, m, 0, m.n_layers());
  return layout;
}

namespace kernel {

// out[b, c] = mean over t of hidden[b, t, c]; one writer per output element.
template <class T>
struct mean_pool_elem {
  T* out;
  const T* hidden;
  index_t T_len;
  index_t C;

  LWCL_HD void operator()(index_t i) const {
    const index_t b = i / C, c = i % C;
    const T* h = hidden + b * T_len * C + c;
    T s = 0;
    for (index_t t = 0; t < T_len; ++t) s += h[t * C];
    out[i] = s / static_cast<T>(T_len);
  }
};

// x[row] /= max(||x[row]||_2, eps), torch.nn.functional.normalize's rule (eps keeps a zero row zero).
template <class T>
struct l2_normalize_row {
  T* x;
  index_t C;
  T eps;

  LWCL_HD void operator()(index_t row) const {
    T* r = x + row * C;
    T s = 0;
    for (index_t c = 0; c < C; ++c) s += r[c] * r[c];
    const T inv = T(1) / math::max(math::sqrt(s), eps);
    for (index_t c = 0; c < C; ++c) r[c] *= inv;
  }
};

}  // namespace kernel

// out (B, C) = the mean of hidden (B, T, C) over its T tokens. There is no padding mask: every token
// of a row counts, so a batch holds sequences of one length (or B = 1 per sentence), which equals
// sentence-transformers' masked mean over each sentence's own tokens.
template <class Backend>
void mean_pool(Backend& be, const tensor& out, const tensor& hidden) {
  constexpr std::string_view op = "mean_pool";
  ops::expect_nonempty(op, "hidden", hidden);
  check(hidden.shape.rank() == 3, op, ": hidden has shape ", hidden.shape.str(), ", expected (B, T, C)");
  const index_t B = hidden.shape[0], T = hidden.shape[1], C = hidden.shape[2];
  ops::expect_shape(op, "out", out, shape{B, C});
  ops::expect_same_dtype(op, {{"hidden", &hidden}, {"out", &out}});
  ops::dispatch_float(op, hidden.type, [&](auto z) {
    using E = decltype(z);
    be.for_each(B * C, kernel::mean_pool_elem<E>{out.ptr<E>(), hidden.ptr<E>(), T, C}, T);
  });
}

// Scales each row of x (N, C) to unit L2 norm, in place; rows with norm below eps are divided by eps.
template <class Backend>
void l2_normalize(Backend& be, const tensor& x, double eps = 1e-12) {
  constexpr std::string_view op = "l2_normalize";
  ops::expect_nonempty(op, "x", x);
  check(x.shape.rank() == 2, op, ": x has shape ", x.shape.str(), ", expected (N, C)");
  ops::dispatch_float(op, x.type, [&](auto z) {
    using E = decltype(z);
    be.for_each(x.shape[0], kernel::l2_normalize_row<E>{x.ptr<E>(), x.shape[1], static_cast<E>(eps)}, 2 * x.shape[1]);
  });
}

template <class Backend>
class encoder : public weights<Backend> {
  using base = weights<Backend>;
  using base::be_, base::type_, base::layout_, base::params_, base::grads_, base::stack_, base::bytes_of;

 public:
  using base::param, base::grad;

  encoder(Backend& be, encoder_config cfg, dtype t = dtype::f32)
      : base(be, cfg.model, (cfg.validate(), encoder_layout(cfg)), t), cfg_(std::move(cfg)) {}
  // For forward passes only (a teacher): no gradient buffer, no saved activations (weights::freeze()).
  encoder(Backend& be, encoder_config cfg, dtype t, frozen_t)
      : base(be, cfg.model, (cfg.validate(), encoder_layout(cfg)), t, true), cfg_(std::move(cfg)) {}

  const model_config& config() const override { return cfg_.model; }

  // The embedding LayerNorm's output for `tokens` with token type 0 everywhere (a single segment, as
  // sentence-transformers encodes a sentence), through buffers of its own.
  void embed_inputs(const tensor& tokens, const tensor& x) const override {
    constexpr std::string_view op = "encoder::embed_inputs";
    check(tokens.shape.rank() == 2 && tokens.type == dtype::i32 && tokens.numel() > 0, op, ": tokens is ",
          dtype_name(tokens.type), " ", tokens.shape.str(), ", expected a non-empty i32 (B, T)");
    const auto& m = cfg_.model;
    const index_t B = tokens.shape[0], T = tokens.shape[1];
    check(T <= m.max_seq, op, ": sequence length ", T, " exceeds the ", m.max_seq, " learned positions");
    ops::expect_shape(op, "x", x, shape{B, T, m.d_model});
    check_ids(op, "token id", "tokens", tokens, m.vocab, "the vocabulary");
    owned_tensor<Backend> e(be_, type_, {B, T, m.d_model}), et(be_, type_, {B, T, m.d_model}), mean(be_, type_, {B * T}),
        rstd(be_, type_, {B * T}), types(be_, dtype::i32, {B, T});
    ops::embedding_forward(be_, e.view(), tokens, param("wte"), param("wpe"));
    ops::embedding_forward(be_, et.view(), types.view(), param("wtt"), tensor());
    ops::add(be_, e.view(), e.view(), et.view());
    ops::layernorm_forward(be_, x, mean.view(), rstd.view(), e.view(), param("norm_emb.weight"), param("norm_emb.bias"),
                           m.norm_eps);
  }
  const encoder_config& encoder_cfg() const { return cfg_; }
  index_t type_vocab() const { return cfg_.type_vocab; }

  // init_parameters' initialisation, deterministic in the seed (norm weights 1, biases 0).
  void init(std::uint64_t seed) { this->init_from(cfg_.model, seed, "encoder::init"); }

  // Last hidden states (B, T, C) of `tokens` (i32 (B, T), backend memory) with segment ids
  // `token_types` (i32 (B, T); an empty tensor means all 0, BERT's default). Valid until the next
  // forward; saves what backward needs. Every sequence is used whole (no padding mask).
  tensor forward(const tensor& tokens, const tensor& token_types = tensor()) {
    constexpr std::string_view op = "encoder::forward";
    const auto& m = cfg_.model;
    check(tokens.data != nullptr && tokens.shape.rank() == 2 && tokens.numel() > 0, op, ": tokens has shape ",
          tokens.shape.str(), ", expected a non-empty (B, T)");
    check(tokens.type == dtype::i32, op, ": tokens has dtype ", dtype_name(tokens.type), ", expected i32");
    const index_t B = tokens.shape[0], T = tokens.shape[1];
    check(T <= m.max_seq, op, ": sequence length ", T, " exceeds the ", m.max_seq, " learned positions");
    if (token_types.data) {
      check(token_types.type == dtype::i32, op, ": token_types has dtype ", dtype_name(token_types.type), ", expected i32");
      ops::expect_shape(op, "token_types", token_types, tokens.shape);
    }
    ensure_acts(B, T);
    auto& a = *acts_;
    // Ids are checked on the host for every backend: a device kernel would turn a bad id into NaNs.
    check_ids(op, "token id", "tokens", tokens, m.vocab, "the vocabulary");
    const tensor types = token_types.data ? token_types : a.zero_types.view();
    if (token_types.data) check_ids(op, "token type", "token_types", token_types, cfg_.type_vocab, "the token types");
    ops::embedding_forward(be_, a.e, tokens, param("wte"), param("wpe"));
    ops::embedding_forward(be_, a.et, types, param("wtt"), tensor());
    ops::add(be_, a.e, a.e, a.et);
    ops::layernorm_forward(be_, a.x0, a.ne_mean, a.ne_rstd, a.e, param("norm_emb.weight"), param("norm_emb.bias"), m.norm_eps);
    this->stack("encoder::forward").forward(a.x0, a.xL);
    tokens_ = tokens;
    types_ = types;
    return a.xL;
  }

  // Given d(loss)/d(hidden) (B, T, C) for the last forward, accumulates d(loss)/d(params) into the
  // gradient buffer (call zero_grad first).
  void backward(const tensor& dhidden) {
    check(acts_ != nullptr && tokens_.data != nullptr, "encoder::backward called before forward");
    auto& a = *acts_;
    ops::expect_shape("encoder::backward", "dhidden", dhidden, a.xL.shape);
    be_.fill_zero(a.dx0.data, a.dx0.bytes());
    this->stack("encoder::backward").backward(dhidden, a.dx0);
    be_.fill_zero(a.de.data, a.de.bytes());
    ops::layernorm_backward(be_, a.de, grad("norm_emb.weight"), grad("norm_emb.bias"), a.dx0, a.e, param("norm_emb.weight"),
                            a.ne_mean, a.ne_rstd);
    ops::embedding_backward(be_, grad("wte"), grad("wpe"), a.de, tokens_);
    ops::embedding_backward(be_, grad("wtt"), tensor(), a.de, types_);
  }

  // Sentence embeddings (B, C) of B sequences of equal length: forward, mean over the tokens, unit L2
  // norm. Valid until the next call.
  tensor embed(const tensor& tokens, const tensor& token_types = tensor()) {
    const tensor h = forward(tokens, token_types);
    auto& a = *acts_;
    mean_pool(be_, a.pooled, h);
    l2_normalize(be_, a.pooled);
    return a.pooled;
  }

  // Bytes of activation memory held for the current (B, T).
  std::size_t activation_bytes() const {
    return acts_ ? acts_->mem.bytes() + acts_->zero_types.view().bytes() + (stack_ ? stack_->activation_bytes() : 0) : 0;
  }

 private:
  struct activations {
    index_t B, T;
    tensor e, et, x0, xL, ne_mean, ne_rstd, pooled, dx0, de;
    arena<Backend> mem;
    owned_tensor<Backend> zero_types;  // i32 zeros: the token types when none are given
  };

  // Every id of `ids` (i32, backend memory) lies in [0, n); the error names its (b, t) position.
  void check_ids(std::string_view op, std::string_view what, std::string_view arg, const tensor& ids, index_t n,
                 std::string_view range) const {
    std::vector<std::int32_t> host(static_cast<std::size_t>(ids.numel()));
    be_.to_host(host.data(), ids.data, host.size() * sizeof(std::int32_t));
    const index_t T = ids.shape[1];
    for (std::size_t i = 0; i < host.size(); ++i) {
      const auto k = static_cast<index_t>(i);
      check(host[i] >= 0 && host[i] < n, op, ": ", what, " ", host[i], " at ", arg, "[", k / T, ", ", k % T, "] is outside ",
            range, " [0, ", n, ")");
    }
  }

  void ensure_acts(index_t B, index_t T) {
    if (acts_ && acts_->B == B && acts_->T == T) return;
    acts_.reset();
    auto a = std::make_unique<activations>();
    a->B = B;
    a->T = T;
    const index_t C = cfg_.model.d_model;
    a->mem.declare(a->e, {B, T, C});
    a->mem.declare(a->et, {B, T, C});
    a->mem.declare(a->x0, {B, T, C});
    a->mem.declare(a->xL, {B, T, C});
    a->mem.declare(a->ne_mean, {B * T});
    a->mem.declare(a->ne_rstd, {B * T});
    a->mem.declare(a->pooled, {B, C});
    a->mem.declare(a->dx0, {B, T, C});
    a->mem.declare(a->de, {B, T, C});
    a->mem.allocate(be_, type_);
    a->zero_types = owned_tensor<Backend>(be_, dtype::i32, {B, T});  // zero-filled
    acts_ = std::move(a);
  }

  encoder_config cfg_;
  std::unique_ptr<activations> acts_;
  tensor tokens_, types_;
};

// Sentence embeddings of token sequences of any lengths (each already with its [CLS] ... [SEP]), one
// forward per sequence, so no padding enters attention or the mean: equal to sentence-transformers'
// masked mean pooling followed by normalisation. Returned on the host in double.
template <class Backend>
std::vector<std::vector<double>> sentence_embeddings(encoder<Backend>& enc, const std::vector<std::vector<std::int32_t>>& seqs) {
  std::vector<std::vector<double>> out;
  const index_t C = enc.config().d_model;
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    check(!seqs[s].empty(), "sentence_embeddings: sequence ", s, " is empty");
    const auto T = static_cast<index_t>(seqs[s].size());
    owned_tensor<Backend> ids(enc.backend(), dtype::i32, {1, T});
    enc.backend().from_host(ids.view().data, seqs[s].data(), seqs[s].size() * sizeof(std::int32_t));
    const tensor e = enc.embed(ids.view());
    ops::dispatch_float("sentence_embeddings", e.type, [&](auto z) {
      using E = decltype(z);
      std::vector<E> host(static_cast<std::size_t>(C));
      enc.backend().to_host(host.data(), e.data, host.size() * sizeof(E));
      out.emplace_back(host.begin(), host.end());
    });
  }
  return out;
}

}  // namespace lwcl::model
