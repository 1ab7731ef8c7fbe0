#pragma once
// Gradients for the Taylor criterion, one block at a time. Block l's local loss is the next-token
// cross-entropy of its output read through the model's frozen final norm and LM head; only block l's
// parameters get gradients, so one block's activations and gradients (plus the head's logits) are
// resident, never the whole model's. Why not a reconstruction loss against the teacher's own boundary
// feature: at the unpruned teacher the block reproduces that feature exactly, so its gradient, and
// every first-order score built on it, is identically zero.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lwcl/data/loader.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/ops/cross_entropy.hpp"
#include "lwcl/prune/scoring_input.hpp"

namespace lwcl::prune {

// Runs on any backend: the batch's tokens are copied into backend memory, each block's gradient is
// copied out and added to the host-side mean.
template <class Backend>
class local_gradient_pass {
 public:
  explicit local_gradient_pass(const model::transformer<Backend>& net) : net_(net) {
    out_.config = net.config();
    out_.layout = net.layout();
    out_.grad.assign(static_cast<std::size_t>(net.layout().numel()), 0.0);
  }

  // Adds one batch of B x T inputs and their next-token targets (host memory, row-major).
  void add(const std::int32_t* ids, const std::int32_t* targets, index_t B, index_t T) {
    const auto& cfg = net_.config();
    check(B > 0 && T > 0 && T <= cfg.max_seq, "local_gradient_pass: batch ", B, " x ", T, " must be positive with T <= max_seq ",
          cfg.max_seq);
    for (index_t i = 0; i < B * T; ++i)
      check(targets[i] >= 0 && targets[i] < cfg.vocab, "local_gradient_pass: target ", targets[i], " at ", i,
            " is outside the vocabulary [0, ", cfg.vocab, ")");
    Backend& be = net_.backend();
    const dtype dt = net_.type();
    const index_t C = cfg.d_model, V = cfg.vocab, N = B * T;
    const bool rms = cfg.traits().rms_norm;
    arena<Backend> mem;
    tensor x, y, dx, dy, hf, dh, mean, rstd, logits, dlogits, row_loss, dnorm_w, dnorm_b, dhead;
    for (tensor* t : {&x, &y, &dx, &dy, &hf, &dh}) mem.declare(*t, {B, T, C});
    if (!rms) mem.declare(mean, {N});
    mem.declare(rstd, {N});
    mem.declare(logits, {B, T, V});
    mem.declare(dlogits, {B, T, V});
    mem.declare(row_loss, {N});
    mem.declare(dnorm_w, {C});
    if (!rms) mem.declare(dnorm_b, {C});
    mem.declare(dhead, {V, C});  // scratch: the head is frozen
    mem.allocate(be, dt);
    const tensor head = cfg.tie_embeddings ? net_.param("wte") : net_.param("lm_head.weight");
    const tensor norm_w = net_.param("norm_f.weight"), norm_b = rms ? tensor() : net_.param("norm_f.bias");
    buffer<Backend> tokens(be, static_cast<std::size_t>(2 * N) * sizeof(std::int32_t));
    auto* tok = static_cast<std::int32_t*>(tokens.data());
    be.from_host(tok, ids, static_cast<std::size_t>(N) * sizeof(std::int32_t));
    be.from_host(tok + N, targets, static_cast<std::size_t>(N) * sizeof(std::int32_t));
    ops::embedding_forward(be, x, tensor(tok, dtype::i32, shape{B, T}), net_.param("wte"),
                           net_.layout().contains("wpe") ? net_.param("wpe") : tensor());
    const tensor tgt(tok + N, dtype::i32, shape{N});
    for (index_t l = 0; l < cfg.n_layers(); ++l) {
      const auto sh = model::shape_of_layer(cfg, l);
      const std::string prefix = model::layer_prefix(l);
      const auto w = model::bind_block(net_.layout(), prefix, net_.params().data, dt);
      // The block's gradients in a buffer laid out like the model's entries for this layer.
      tensor_layout layer_layout;
      model::add_block_params(layer_layout, prefix, sh);
      buffer<Backend> gbuf(be, static_cast<std::size_t>(layer_layout.numel()) * dtype_size(dt));
      be.fill_zero(gbuf.data(), gbuf.bytes());
      auto dw = model::bind_block(layer_layout, prefix, gbuf.data(), dt);
      model::block_acts<Backend> a(be, sh, B, T, dt), g(be, sh, B, T, dt, true);
      model::block_forward(be, sh, w, a, x, y);
      // Local loss: cross-entropy of head(norm_f(y)).
      if (rms)
        ops::rmsnorm_forward(be, hf, rstd, y, norm_w, cfg.norm_eps);
      else
        ops::layernorm_forward(be, hf, mean, rstd, y, norm_w, norm_b, cfg.norm_eps);
      ops::linear_forward(be, logits, hf, head, tensor());
      be.fill_zero(dlogits.data, dlogits.bytes());
      const double loss = ops::cross_entropy(be, dlogits.reshaped({N, V}), row_loss, logits.reshaped({N, V}), tgt);
      check(std::isfinite(loss), "local_gradient_pass: non-finite local loss at layer ", l);
      for (const tensor* t : {&dh, &dy, &dx, &dnorm_w, &dhead}) be.fill_zero(t->data, t->bytes());
      if (!rms) be.fill_zero(dnorm_b.data, dnorm_b.bytes());
      ops::linear_backward(be, dh, dhead, tensor(), dlogits, hf, head);
      if (rms)
        ops::rmsnorm_backward(be, dy, dnorm_w, dh, y, norm_w, rstd);
      else
        ops::layernorm_backward(be, dy, dnorm_w, dnorm_b, dh, y, norm_w, mean, rstd);
      model::block_backward(be, sh, w, dw, a, g, x, dx, dy);
      // Accumulate this batch's gradient (already a mean over its tokens) into the model layout.
      ops::dispatch_float("local_gradient_pass", dt, [&](auto z) {
        using E = decltype(z);
        std::vector<E> host(static_cast<std::size_t>(layer_layout.numel()));
        be.to_host(host.data(), gbuf.data(), gbuf.bytes());
        for (const auto& e : layer_layout.entries()) {
          const auto& dst = out_.layout.find(e.name);
          for (index_t i = 0; i < e.shape.numel(); ++i)
            out_.grad[static_cast<std::size_t>(dst.offset + i)] += static_cast<double>(host[static_cast<std::size_t>(e.offset + i)]);
        }
      });
      ops::copy(be, x, y);  // the teacher's feature feeds the next block
    }
    ++batches_;
    out_.tokens += N;
  }

  // The mean gradient over the batches added so far.
  local_gradients result() const {
    check(batches_ > 0, "local_gradient_pass: the calibration set is empty (add at least one batch)");
    local_gradients r = out_;
    for (double& v : r.grad) v /= static_cast<double>(batches_);
    return r;
  }

 private:
  const model::transformer<Backend>& net_;
  local_gradients out_;
  index_t batches_ = 0;
};

// One pass over batches 0 .. n_batches - 1 of `loader` (built for (B, T) batches).
template <class Backend>
local_gradients collect_local_gradients(const model::transformer<Backend>& net, const data::batch_loader& loader, index_t B,
                                        index_t T, index_t n_batches) {
  check(n_batches > 0, "collect_local_gradients: the calibration set is empty (n_batches = ", n_batches, ")");
  local_gradient_pass<Backend> pass(net);
  std::vector<std::int32_t> ids, targets;
  for (index_t k = 0; k < n_batches; ++k) {
    loader.batch(static_cast<std::uint64_t>(k), ids, targets);
    check(static_cast<index_t>(ids.size()) == B * T, "collect_local_gradients: the loader's batches hold ", ids.size(),
          " tokens, expected ", B, " x ", T);
    pass.add(ids.data(), targets.data(), B, T);
  }
  return pass.result();
}

}  // namespace lwcl::prune
