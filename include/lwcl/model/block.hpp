#pragma once
// One transformer block of any family, forward and backward, composed from lwcl::ops. A block's
// parameters are named views into the model's flat parameter buffer (see add_block_params); its
// activations for a (B, T) batch live in one arena, and a second arena of the same shape holds the
// gradients of those activations during the backward pass.
//
// Pre-norm (gpt2, llama, qwen2):  x2 = x + attn(norm1(x));  y = x2 + mlp(norm2(x2))
// Post-norm (bert):               x2 = norm1(x + attn(x));  y = norm2(x2 + mlp(x2))

#include <memory>
#include <string>

#include "lwcl/model/config.hpp"
#include "lwcl/ops/activation.hpp"
#include "lwcl/ops/attention.hpp"
#include "lwcl/ops/elementwise.hpp"
#include "lwcl/ops/layernorm.hpp"
#include "lwcl/ops/linear.hpp"
#include "lwcl/ops/rmsnorm.hpp"
#include "lwcl/ops/rope.hpp"
#include "lwcl/tensor/arena.hpp"

namespace lwcl::model {

// Where a block's linears read their input: q, k and v read norm1's output, o the attention's, the MLP's
// first linear(s) norm2's output, its last the activation's.
enum class linear_site { qkv, o, mlp_in, mlp_out };

// A hook on the inputs of a pre-norm block's linears (the supernet's activation quantisation and width
// masks, search/supernet.hpp). forward() may rewrite x, the tensor the site's linears are about to read,
// in place (their weight gradients are then taken at what it wrote); backward() is handed d(loss)/d(that
// rewritten input), summed over the site's linears, and rewrites it in place into d(loss)/d(the input
// before the hook). Layers are the model's indices. Host code; it runs between the backend's kernels.
struct linear_input_hook {
  virtual ~linear_input_hook() = default;
  virtual void forward(index_t layer, linear_site site, const tensor& x) = 0;
  virtual void backward(index_t layer, linear_site site, const tensor& dx) = 0;
};

// The widths of one block.
struct block_shape {
  family_traits tr{};
  index_t C = 0, H = 0, KVH = 0, D = 0, F = 0;
  double eps = 1e-5, theta = 10000.0;
};

inline block_shape shape_of_layer(const model_config& cfg, index_t layer) {
  const auto& L = cfg.layers.at(static_cast<std::size_t>(layer));
  return block_shape{cfg.traits(), cfg.d_model, L.n_heads, L.n_kv_heads, cfg.head_dim, L.ffn, cfg.norm_eps, cfg.rope_theta};
}

// Declares the block's parameters under `prefix` (e.g. "layers.3.") in the order they are stored.
inline void add_block_params(tensor_layout& layout, const std::string& p, const block_shape& s) {
  const auto& tr = s.tr;
  layout.add(p + "norm1.weight", {s.C});
  if (!tr.rms_norm) layout.add(p + "norm1.bias", {s.C});
  layout.add(p + "attn.q.weight", {s.H * s.D, s.C});
  if (tr.qkv_bias) layout.add(p + "attn.q.bias", {s.H * s.D});
  layout.add(p + "attn.k.weight", {s.KVH * s.D, s.C});
  if (tr.qkv_bias) layout.add(p + "attn.k.bias", {s.KVH * s.D});
  layout.add(p + "attn.v.weight", {s.KVH * s.D, s.C});
  if (tr.qkv_bias) layout.add(p + "attn.v.bias", {s.KVH * s.D});
  layout.add(p + "attn.o.weight", {s.C, s.H * s.D});
  if (tr.out_bias) layout.add(p + "attn.o.bias", {s.C});
  layout.add(p + "norm2.weight", {s.C});
  if (!tr.rms_norm) layout.add(p + "norm2.bias", {s.C});
  if (tr.gated_mlp) {
    layout.add(p + "mlp.gate.weight", {s.F, s.C});
    layout.add(p + "mlp.up.weight", {s.F, s.C});
    layout.add(p + "mlp.down.weight", {s.C, s.F});
    if (tr.out_bias) layout.add(p + "mlp.down.bias", {s.C});
  } else {
    layout.add(p + "mlp.fc.weight", {s.F, s.C});
    if (tr.out_bias) layout.add(p + "mlp.fc.bias", {s.F});
    layout.add(p + "mlp.proj.weight", {s.C, s.F});
    if (tr.out_bias) layout.add(p + "mlp.proj.bias", {s.C});
  }
}

// Views of one block's parameters (or of their gradients: same layout, another buffer). Absent
// parameters are empty tensors. For gated MLPs fc = gate, up = up, proj = down.
struct block_weights {
  tensor norm1_w, norm1_b, q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b, norm2_w, norm2_b, fc_w, fc_b, up_w, proj_w, proj_b;
};

inline block_weights bind_block(const tensor_layout& layout, const std::string& p, void* base, dtype t) {
  auto get = [&](const std::string& name) { return layout.contains(p + name) ? layout.view(base, t, p + name) : tensor(); };
  block_weights w;
  w.norm1_w = get("norm1.weight");
  w.norm1_b = get("norm1.bias");
  w.q_w = get("attn.q.weight");
  w.q_b = get("attn.q.bias");
  w.k_w = get("attn.k.weight");
  w.k_b = get("attn.k.bias");
  w.v_w = get("attn.v.weight");
  w.v_b = get("attn.v.bias");
  w.o_w = get("attn.o.weight");
  w.o_b = get("attn.o.bias");
  w.norm2_w = get("norm2.weight");
  w.norm2_b = get("norm2.bias");
  if (layout.contains(p + "mlp.gate.weight")) {
    w.fc_w = get("mlp.gate.weight");
    w.up_w = get("mlp.up.weight");
    w.proj_w = get("mlp.down.weight");
    w.proj_b = get("mlp.down.bias");
  } else {
    w.fc_w = get("mlp.fc.weight");
    w.fc_b = get("mlp.fc.bias");
    w.proj_w = get("mlp.proj.weight");
    w.proj_b = get("mlp.proj.bias");
  }
  return w;
}

// Activations of one block for a (B, T) batch, saved by the forward pass for the backward pass; the
// same struct holds their gradients during backward. Fields a family does not use stay empty.
template <class Backend>
struct block_acts {
  index_t B = 0, T = 0;
  tensor h1, q, k, v, q_in, k_in, probs, att, x2pre, x2, h2, f, g, s, ypre;
  tensor n1_mean, n1_rstd, n2_mean, n2_rstd;
  arena<Backend> mem;

  block_acts(Backend& be, const block_shape& sh, index_t B_, index_t T_, dtype t, bool for_grads = false) : B(B_), T(T_) {
    const index_t N = B * T;
    const auto& tr = sh.tr;
    if (!tr.post_norm) mem.declare(h1, {B, T, sh.C});
    mem.declare(q, {B, T, sh.H, sh.D});
    mem.declare(k, {B, T, sh.KVH, sh.D});
    mem.declare(v, {B, T, sh.KVH, sh.D});
    if (tr.rope && for_grads) {  // gradients before the rotation
      mem.declare(q_in, {B, T, sh.H, sh.D});
      mem.declare(k_in, {B, T, sh.KVH, sh.D});
    }
    mem.declare(probs, {B, sh.H, T, T});
    mem.declare(att, {B, T, sh.H * sh.D});
    if (tr.post_norm) mem.declare(x2pre, {B, T, sh.C});
    mem.declare(x2, {B, T, sh.C});
    if (!tr.post_norm) mem.declare(h2, {B, T, sh.C});
    mem.declare(f, {B, T, sh.F});
    mem.declare(g, {B, T, sh.F});
    if (tr.gated_mlp) mem.declare(s, {B, T, sh.F});
    if (tr.post_norm) mem.declare(ypre, {B, T, sh.C});
    if (!for_grads) {
      if (!tr.rms_norm) mem.declare(n1_mean, {N});
      mem.declare(n1_rstd, {N});
      if (!tr.rms_norm) mem.declare(n2_mean, {N});
      mem.declare(n2_rstd, {N});
    }
    mem.allocate(be, t);
  }
  block_acts(const block_acts&) = delete;
  block_acts& operator=(const block_acts&) = delete;
  std::size_t bytes() const { return mem.bytes(); }
};

namespace detail {

// (B, T, H, D) viewed as (B, T, H*D): the layout a projection writes.
inline tensor heads_flat(const tensor& t) { return t.reshaped(shape{t.shape[0], t.shape[1], t.shape[2] * t.shape[3]}); }

template <class Backend>
void norm_forward(Backend& be, const block_shape& sh, const tensor& out, const tensor& mean, const tensor& rstd,
                  const tensor& inp, const tensor& w, const tensor& b) {
  if (sh.tr.rms_norm)
    ops::rmsnorm_forward(be, out, rstd, inp, w, sh.eps);
  else
    ops::layernorm_forward(be, out, mean, rstd, inp, w, b, sh.eps);
}

template <class Backend>
void norm_backward(Backend& be, const block_shape& sh, const tensor& dinp, const tensor& dw, const tensor& db,
                   const tensor& dout, const tensor& inp, const tensor& w, const tensor& mean, const tensor& rstd) {
  if (sh.tr.rms_norm)
    ops::rmsnorm_backward(be, dinp, dw, dout, inp, w, rstd);
  else
    ops::layernorm_backward(be, dinp, dw, db, dout, inp, w, mean, rstd);
}

inline ops::gelu_kind gelu_of(const block_shape& sh) { return sh.tr.gelu_erf ? ops::gelu_kind::erf : ops::gelu_kind::tanh; }

// Self-attention sub-layer forward: q, k, v projections of `inp`, optional RoPE, attention into a.att.
template <class Backend>
void attention_part_forward(Backend& be, const block_shape& sh, const block_weights& w, block_acts<Backend>& a,
                            const tensor& inp, linear_input_hook* hook = nullptr, index_t layer = 0) {
  ops::linear_forward(be, heads_flat(a.q), inp, w.q_w, w.q_b);
  ops::linear_forward(be, heads_flat(a.k), inp, w.k_w, w.k_b);
  ops::linear_forward(be, heads_flat(a.v), inp, w.v_w, w.v_b);
  if (sh.tr.rope) {
    ops::rope_forward(be, a.q, a.q, sh.theta);
    ops::rope_forward(be, a.k, a.k, sh.theta);
  }
  ops::attention_forward(be, a.att.reshaped(a.q.shape), a.probs, a.q, a.k, a.v, sh.tr.causal);
  if (hook) hook->forward(layer, linear_site::o, a.att);
}

// Backward of attention_part_forward given d(att) in g.att: accumulates into dinp and the weights' grads.
template <class Backend>
void attention_part_backward(Backend& be, const block_shape& sh, const block_weights& w, block_weights& dw,
                             block_acts<Backend>& a, block_acts<Backend>& g, const tensor& inp, const tensor& dinp) {
  be.fill_zero(g.q.data, g.q.bytes());
  be.fill_zero(g.k.data, g.k.bytes());
  be.fill_zero(g.v.data, g.v.bytes());
  ops::attention_backward(be, g.q, g.k, g.v, g.probs, g.att.reshaped(a.q.shape), a.q, a.k, a.v, a.probs, sh.tr.causal);
  tensor dq = g.q, dk = g.k;
  if (sh.tr.rope) {
    be.fill_zero(g.q_in.data, g.q_in.bytes());
    be.fill_zero(g.k_in.data, g.k_in.bytes());
    ops::rope_backward(be, g.q_in, g.q, sh.theta);
    ops::rope_backward(be, g.k_in, g.k, sh.theta);
    dq = g.q_in;
    dk = g.k_in;
  }
  ops::linear_backward(be, dinp, dw.q_w, dw.q_b, heads_flat(dq), inp, w.q_w);
  ops::linear_backward(be, dinp, dw.k_w, dw.k_b, heads_flat(dk), inp, w.k_w);
  ops::linear_backward(be, dinp, dw.v_w, dw.v_b, heads_flat(g.v), inp, w.v_w);
}

// MLP forward from `inp` into `out` (out = mlp(inp), before any residual).
template <class Backend>
void mlp_forward(Backend& be, const block_shape& sh, const block_weights& w, block_acts<Backend>& a, const tensor& inp,
                 const tensor& out, linear_input_hook* hook = nullptr, index_t layer = 0) {
  if (sh.tr.gated_mlp) {
    ops::linear_forward(be, a.f, inp, w.fc_w, w.fc_b);
    ops::linear_forward(be, a.g, inp, w.up_w, tensor());
    ops::swiglu_forward(be, a.s, a.f, a.g);
    if (hook) hook->forward(layer, linear_site::mlp_out, a.s);
    ops::linear_forward(be, out, a.s, w.proj_w, w.proj_b);
  } else {
    // a.f keeps the pre-activation for gelu_backward; on CUDA one cuBLASLt GEMM writes both.
    ops::linear_gelu_forward(be, a.g, a.f, inp, w.fc_w, w.fc_b, gelu_of(sh));
    if (hook) hook->forward(layer, linear_site::mlp_out, a.g);
    ops::linear_forward(be, out, a.g, w.proj_w, w.proj_b);
  }
}

// Backward of mlp_forward given dout: accumulates into dinp and the weights' grads.
template <class Backend>
void mlp_backward(Backend& be, const block_shape& sh, const block_weights& w, block_weights& dw, block_acts<Backend>& a,
                  block_acts<Backend>& g, const tensor& inp, const tensor& dinp, const tensor& dout,
                  linear_input_hook* hook = nullptr, index_t layer = 0) {
  be.fill_zero(g.f.data, g.f.bytes());
  be.fill_zero(g.g.data, g.g.bytes());
  if (sh.tr.gated_mlp) {
    be.fill_zero(g.s.data, g.s.bytes());
    ops::linear_backward(be, g.s, dw.proj_w, dw.proj_b, dout, a.s, w.proj_w);
    if (hook) hook->backward(layer, linear_site::mlp_out, g.s);
    ops::swiglu_backward(be, g.f, g.g, g.s, a.f, a.g);
    ops::linear_backward(be, dinp, dw.fc_w, tensor(), g.f, inp, w.fc_w);
    ops::linear_backward(be, dinp, dw.up_w, tensor(), g.g, inp, w.up_w);
  } else {
    ops::linear_backward(be, g.g, dw.proj_w, dw.proj_b, dout, a.g, w.proj_w);
    if (hook) hook->backward(layer, linear_site::mlp_out, g.g);
    ops::gelu_backward(be, g.f, g.g, a.f, gelu_of(sh));
    ops::linear_backward(be, dinp, dw.fc_w, dw.fc_b, g.f, inp, w.fc_w);
  }
}

}  // namespace detail

// y = block(x) for x, y of shape (B, T, C); saves activations in `a`. `hook` (pre-norm families only)
// sees the input of each linear site of block `layer` before its linears read it.
template <class Backend>
void block_forward(Backend& be, const block_shape& sh, const block_weights& w, block_acts<Backend>& a, const tensor& x,
                   const tensor& y, linear_input_hook* hook = nullptr, index_t layer = 0) {
  using namespace detail;
  ops::expect_shape("block_forward", "x", x, shape{a.B, a.T, sh.C});
  ops::expect_shape("block_forward", "y", y, x.shape);
  check(!hook || !sh.tr.post_norm, "block_forward: a linear input hook needs a pre-norm block (gpt2, llama, qwen2); ",
        "post-norm blocks (bert) read their inputs twice");
  if (!sh.tr.post_norm) {
    norm_forward(be, sh, a.h1, a.n1_mean, a.n1_rstd, x, w.norm1_w, w.norm1_b);
    if (hook) hook->forward(layer, linear_site::qkv, a.h1);
    attention_part_forward(be, sh, w, a, a.h1, hook, layer);
    ops::linear_forward(be, a.x2, a.att, w.o_w, w.o_b);
    ops::add(be, a.x2, a.x2, x);
    norm_forward(be, sh, a.h2, a.n2_mean, a.n2_rstd, a.x2, w.norm2_w, w.norm2_b);
    if (hook) hook->forward(layer, linear_site::mlp_in, a.h2);
    mlp_forward(be, sh, w, a, a.h2, y, hook, layer);
    ops::add(be, y, y, a.x2);
  } else {
    attention_part_forward(be, sh, w, a, x);
    ops::linear_forward(be, a.x2pre, a.att, w.o_w, w.o_b);
    ops::add(be, a.x2pre, a.x2pre, x);
    norm_forward(be, sh, a.x2, a.n1_mean, a.n1_rstd, a.x2pre, w.norm1_w, w.norm1_b);
    mlp_forward(be, sh, w, a, a.x2, a.ypre);
    ops::add(be, a.ypre, a.ypre, a.x2);
    norm_forward(be, sh, y, a.n2_mean, a.n2_rstd, a.ypre, w.norm2_w, w.norm2_b);
  }
}

// Backward of block_forward: given dy, accumulates dx and the parameter gradients dw. `g` is scratch
// shaped like the activations (constructed with for_grads = true); `x` is the forward's input.
template <class Backend>
void block_backward(Backend& be, const block_shape& sh, const block_weights& w, block_weights& dw, block_acts<Backend>& a,
                    block_acts<Backend>& g, const tensor& x, const tensor& dx, const tensor& dy,
                    linear_input_hook* hook = nullptr, index_t layer = 0) {
  using namespace detail;
  ops::expect_shape("block_backward", "dy", dy, shape{a.B, a.T, sh.C});
  ops::expect_shape("block_backward", "dx", dx, dy.shape);
  check(!hook || !sh.tr.post_norm, "block_backward: a linear input hook needs a pre-norm block");
  if (!sh.tr.post_norm) {
    // y = x2 + mlp(norm2(x2))
    ops::copy(be, g.x2, dy);
    be.fill_zero(g.h2.data, g.h2.bytes());
    mlp_backward(be, sh, w, dw, a, g, a.h2, g.h2, dy, hook, layer);
    if (hook) hook->backward(layer, linear_site::mlp_in, g.h2);
    norm_backward(be, sh, g.x2, dw.norm2_w, dw.norm2_b, g.h2, a.x2, w.norm2_w, a.n2_mean, a.n2_rstd);
    // x2 = x + o(attn(norm1(x)))
    ops::accumulate(be, dx, g.x2);
    be.fill_zero(g.att.data, g.att.bytes());
    ops::linear_backward(be, g.att, dw.o_w, dw.o_b, g.x2, a.att, w.o_w);
    if (hook) hook->backward(layer, linear_site::o, g.att);
    be.fill_zero(g.h1.data, g.h1.bytes());
    attention_part_backward(be, sh, w, dw, a, g, a.h1, g.h1);
    if (hook) hook->backward(layer, linear_site::qkv, g.h1);
    norm_backward(be, sh, dx, dw.norm1_w, dw.norm1_b, g.h1, x, w.norm1_w, a.n1_mean, a.n1_rstd);
  } else {
    // y = norm2(ypre), ypre = x2 + mlp(x2)
    be.fill_zero(g.ypre.data, g.ypre.bytes());
    norm_backward(be, sh, g.ypre, dw.norm2_w, dw.norm2_b, dy, a.ypre, w.norm2_w, a.n2_mean, a.n2_rstd);
    ops::copy(be, g.x2, g.ypre);
    mlp_backward(be, sh, w, dw, a, g, a.x2, g.x2, g.ypre);
    // x2 = norm1(x2pre), x2pre = x + o(attn(x))
    be.fill_zero(g.x2pre.data, g.x2pre.bytes());
    norm_backward(be, sh, g.x2pre, dw.norm1_w, dw.norm1_b, g.x2, a.x2pre, w.norm1_w, a.n1_mean, a.n1_rstd);
    ops::accumulate(be, dx, g.x2pre);
    be.fill_zero(g.att.data, g.att.bytes());
    ops::linear_backward(be, g.att, dw.o_w, dw.o_b, g.x2pre, a.att, w.o_w);
    attention_part_backward(be, sh, w, dw, a, g, x, dx);
  }
}

}  // namespace lwcl::model
