#pragma once
// Incremental decoding of a decoder LM with a key/value cache: step() feeds the next tokens of one
// sequence at positions length() .. length() + n - 1 and returns their logits, computing each layer's
// keys and values for the new tokens only and attending over the cached ones. The logits equal those
// of a full forward over the whole sequence at every position (tests/model/test_decode.cpp). Works on
// both backends (the same ops as block_forward); per-layer widths are the model's. A program can route
// the block linears elsewhere (set_linear: packed quantised weights, say) while the rest stays as is.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lwcl/model/block.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/ops/attention_cached.hpp"

namespace lwcl::model {

// Rows [first, first + n) of a step's logits (1, rows, vocab; f32 or f64, backend memory) as f32 on the
// host, in `out` (resized to n * vocab).
template <class Backend>
void logits_to_host(Backend& be, const tensor& logits, index_t first, index_t n, std::vector<float>& out) {
  const index_t V = logits.shape.last();
  check(logits.type == dtype::f32 || logits.type == dtype::f64, "logits_to_host: logits are ",
        dtype_name(logits.type), ", expected f32 or f64");
  out.resize(static_cast<std::size_t>(n * V));
  const std::size_t off = static_cast<std::size_t>(first * V);
  if (logits.type == dtype::f32) {
    be.to_host(out.data(), static_cast<const float*>(logits.data) + off, out.size() * sizeof(float));
  } else {
    std::vector<double> wide(out.size());
    be.to_host(wide.data(), static_cast<const double*>(logits.data) + off, wide.size() * sizeof(double));
    std::copy(wide.begin(), wide.end(), out.begin());
  }
}

template <class Backend>
class kv_decoder {
 public:
  // A cache for sequences of up to `capacity` positions (at most the model's max_seq); `chunk` is the
  // most tokens one step() takes (a prompt longer than that is fed in several steps).
  kv_decoder(const transformer<Backend>& net, index_t capacity, index_t chunk = 0)
      : net_(net), cfg_(net.config()), cap_(capacity), chunk_(chunk > 0 ? chunk : capacity) {
    check(capacity >= 1 && capacity <= cfg_.max_seq, "kv_decoder: capacity ", capacity, " must be in [1, ", cfg_.max_seq,
          "] (the model's max_seq)");
    check(chunk_ <= cap_, "kv_decoder: chunk ", chunk_, " exceeds the capacity ", cap_);
    index_t max_q = 0, max_kv = 0, max_f = 0, max_h = 0;
    for (index_t l = 0; l < cfg_.n_layers(); ++l) {
      const auto sh = shape_of_layer(cfg_, l);
      kv_.push_back(std::make_unique<layer_cache>());  // by pointer: an arena's slots must not move
      auto& c = *kv_.back();
      c.mem.declare(c.k, {1, cap_, sh.KVH, sh.D});
      c.mem.declare(c.v, {1, cap_, sh.KVH, sh.D});
      c.mem.allocate(net.backend(), net.type());
      max_q = std::max(max_q, sh.H * sh.D);
      max_kv = std::max(max_kv, sh.KVH * sh.D);
      max_f = std::max(max_f, sh.F);
      max_h = std::max(max_h, sh.H);
    }
    const index_t C = cfg_.d_model, n = chunk_;
    s_.mem.declare(s_.x, {1, n, C});
    s_.mem.declare(s_.h, {1, n, C});
    s_.mem.declare(s_.x2, {1, n, C});
    s_.mem.declare(s_.y, {1, n, C});
    s_.mem.declare(s_.q, {n * max_q});
    s_.mem.declare(s_.kv_new, {n * max_kv});
    s_.mem.declare(s_.att, {n * max_q});
    s_.mem.declare(s_.probs, {max_h * n * cap_});
    s_.mem.declare(s_.f, {n * max_f});
    s_.mem.declare(s_.g, {n * max_f});
    s_.mem.declare(s_.s, {n * max_f});
    s_.mem.declare(s_.mean, {n});
    s_.mem.declare(s_.rstd, {n});
    s_.mem.declare(s_.logits, {1, n, cfg_.vocab});
    s_.mem.declare(s_.ids, {2 * n});  // i32 ids in a slot of the model's dtype (2 bytes at the least)
    s_.mem.allocate(net.backend(), net.type());
  }

  kv_decoder(const kv_decoder&) = delete;
  kv_decoder& operator=(const kv_decoder&) = delete;

  // How a block linear is computed: out = inp weight^T + bias for layer `layer`'s linear `which`
  // ("attn.q.weight", "mlp.down.weight", ...; weight is the model's tensor, bias may be empty). Unset:
  // ops::linear_forward.
  using linear_fn = std::function<void(index_t layer, std::string_view which, const tensor& out, const tensor& inp,
                                       const tensor& weight, const tensor& bias)>;
  void set_linear(linear_fn f) { linear_ = std::move(f); }

  index_t length() const { return len_; }
  index_t capacity() const { return cap_; }
  void reset() { len_ = 0; }
  // Bytes of the cache and the step buffers.
  std::size_t bytes() const {
    std::size_t b = s_.mem.bytes();
    for (const auto& c : kv_) b += c->mem.bytes();
    return b;
  }

  // Drops every cached position from `n` on, so that the next step continues after the first n tokens
  // (a shared prefix scored once, then each of several continuations after it).
  void truncate(index_t n) {
    check(n >= 0 && n <= len_, "kv_decoder::truncate: ", n, " positions, expected 0 to the ", len_, " cached");
    len_ = n;
  }

  // Feeds tokens (host memory) at positions length() .. and returns the logits of the last `keep` of
  // them (1, keep, vocab; keep = 0: all n) in backend memory, valid until the next step. A prompt whose
  // next token is all that matters asks for keep = 1 and skips the head's work on the other rows.
  tensor step(const std::vector<std::int32_t>& tokens, index_t keep = 0) {
    const auto n = static_cast<index_t>(tokens.size());
    check(n >= 1 && n <= chunk_, "kv_decoder::step: ", n, " tokens, expected 1 to ", chunk_);
    check(keep >= 0 && keep <= n, "kv_decoder::step: keep ", keep, " rows of ", n, " new ones");
    if (keep == 0) keep = n;
    check(len_ + n <= cap_, "kv_decoder::step: ", len_, " cached and ", n, " new positions exceed the cache's ", cap_,
          " (the model's context is ", cfg_.max_seq, ")");
    for (auto id : tokens)
      check(id >= 0 && id < cfg_.vocab, "kv_decoder::step: token id ", id, " is outside the vocabulary [0, ", cfg_.vocab, ")");
    auto& be = net_.backend();
    const dtype t = net_.type();
    const index_t C = cfg_.d_model;
    const tensor ids(s_.ids.data, dtype::i32, {1, n});
    be.from_host(ids.data, tokens.data(), tokens.size() * sizeof(std::int32_t));
    const tensor x = rows(s_.x, n, C), h = rows(s_.h, n, C), x2 = rows(s_.x2, n, C), y = rows(s_.y, n, C);
    const bool learned_positions = net_.layout().contains("wpe");
    tensor wpe;
    if (learned_positions) {  // the table's rows from position len_ on
      const tensor full = net_.param("wpe");
      wpe = tensor(static_cast<char*>(full.data) + static_cast<std::size_t>(len_ * C) * dtype_size(t), t,
                   {cfg_.max_seq - len_, C});
    }
    ops::embedding_forward(be, x, ids, net_.param("wte"), wpe);
    tensor cur = x, next = y;
    for (index_t l = 0; l < cfg_.n_layers(); ++l) {
      layer(l, n, cur, h, x2, next);
      std::swap(cur, next);
    }
    // The final norm and the head over the last `keep` rows only.
    const tensor last(static_cast<char*>(cur.data) + static_cast<std::size_t>((n - keep) * C) * dtype_size(t), t,
                      {1, keep, C});
    const tensor hk = rows(s_.h, keep, C);
    const auto& tr = cfg_.traits();
    if (tr.rms_norm)
      ops::rmsnorm_forward(be, hk, view(s_.rstd, {keep}), last, net_.param("norm_f.weight"), cfg_.norm_eps);
    else
      ops::layernorm_forward(be, hk, view(s_.mean, {keep}), view(s_.rstd, {keep}), last, net_.param("norm_f.weight"),
                             net_.param("norm_f.bias"), cfg_.norm_eps);
    const tensor logits = rows(s_.logits, keep, cfg_.vocab);
    const tensor head = net_.layout().contains("lm_head.weight") ? net_.param("lm_head.weight") : net_.param("wte");
    ops::linear_forward(be, logits, hk, head, tensor());
    len_ += n;
    return logits;
  }

 private:
  struct layer_cache {
    tensor k, v;
    arena<Backend> mem;
  };
  struct scratch {
    tensor x, h, x2, y, q, kv_new, att, probs, f, g, s, mean, rstd, logits, ids;
    arena<Backend> mem;
  };

  static tensor view(const tensor& t, shape s) { return tensor(t.data, t.type, s); }
  static tensor rows(const tensor& t, index_t n, index_t width) { return tensor(t.data, t.type, {1, n, width}); }

  // Positions [len_, len_ + n) of a cache tensor (1, cap, KVH, D).
  tensor cache_rows(const tensor& c, index_t n) const {
    const index_t w = c.shape[2] * c.shape[3];
    return tensor(static_cast<char*>(c.data) + static_cast<std::size_t>(len_ * w) * dtype_size(c.type), c.type,
                  {1, n, c.shape[2], c.shape[3]});
  }

  void layer(index_t l, index_t n, const tensor& x, const tensor& h, const tensor& x2, const tensor& y) {
    auto& be = net_.backend();
    const auto sh = shape_of_layer(cfg_, l);
    const auto w = bind_block(net_.layout(), "layers." + std::to_string(l) + ".", net_.params().data, net_.type());
    auto& c = *kv_[static_cast<std::size_t>(l)];
    const tensor q = view(s_.q, {1, n, sh.H, sh.D}), att = view(s_.att, {1, n, sh.H, sh.D});
    const tensor k_new = cache_rows(c.k, n), v_new = cache_rows(c.v, n);
    auto flat = [](const tensor& t) { return tensor(t.data, t.type, {t.shape[0], t.shape[1], t.shape[2] * t.shape[3]}); };
    auto norm = [&](const tensor& out, const tensor& inp, const tensor& wt, const tensor& b) {
      if (sh.tr.rms_norm)
        ops::rmsnorm_forward(be, out, view(s_.rstd, {n}), inp, wt, sh.eps);
      else
        ops::layernorm_forward(be, out, view(s_.mean, {n}), view(s_.rstd, {n}), inp, wt, b, sh.eps);
    };
    auto lin = [&](std::string_view which, const tensor& out, const tensor& inp, const tensor& wt, const tensor& b) {
      if (linear_)
        linear_(l, which, out, inp, wt, b);
      else
        ops::linear_forward(be, out, inp, wt, b);
    };
    // x2 = x + o(attn(norm1(x))), the new keys and values written straight into the cache.
    norm(h, x, w.norm1_w, w.norm1_b);
    lin("attn.q.weight", flat(q), h, w.q_w, w.q_b);
    lin("attn.k.weight", flat(k_new), h, w.k_w, w.k_b);
    lin("attn.v.weight", flat(v_new), h, w.v_w, w.v_b);
    if (sh.tr.rope) {
      ops::rope_forward(be, q, q, sh.theta, len_);
      ops::rope_forward(be, k_new, k_new, sh.theta, len_);
    }
    ops::attention_cached_forward(be, att, s_.probs, q, c.k, c.v, len_);
    lin("attn.o.weight", x2, flat(att), w.o_w, w.o_b);
    ops::add(be, x2, x2, x);
    // y = x2 + mlp(norm2(x2))
    norm(h, x2, w.norm2_w, w.norm2_b);
    const tensor f = view(s_.f, {1, n, sh.F}), g = view(s_.g, {1, n, sh.F});
    if (sh.tr.gated_mlp) {
      const tensor s = view(s_.s, {1, n, sh.F});
      lin("mlp.gate.weight", f, h, w.fc_w, w.fc_b);
      lin("mlp.up.weight", g, h, w.up_w, tensor());
      ops::swiglu_forward(be, s, f, g);
      lin("mlp.down.weight", y, s, w.proj_w, w.proj_b);
    } else if (linear_) {
      lin("mlp.fc.weight", f, h, w.fc_w, w.fc_b);
      ops::gelu_forward(be, g, f, detail::gelu_of(sh));
      lin("mlp.proj.weight", y, g, w.proj_w, w.proj_b);
    } else {
      ops::linear_gelu_forward(be, g, f, h, w.fc_w, w.fc_b, detail::gelu_of(sh));
      ops::linear_forward(be, y, g, w.proj_w, w.proj_b);
    }
    ops::add(be, y, y, x2);
  }

  const transformer<Backend>& net_;
  const model_config& cfg_;
  index_t cap_, chunk_, len_ = 0;
  std::vector<std::unique_ptr<layer_cache>> kv_;
  scratch s_;
  linear_fn linear_;
};

}  // namespace lwcl::model
