#pragma once
// model::weights<Backend>: what the decoder LM (transformer) and the BERT encoder share: one flat
// parameter buffer and one gradient buffer laid out by a tensor_layout, in one dtype, on one backend,
// the accessors to them, the block stack that runs the layers over them, and GPT-2's initialisation.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lwcl/core/process_memory.hpp"
#include "lwcl/core/rng.hpp"
#include "lwcl/model/block_stack.hpp"
#include "lwcl/model/config.hpp"
#include "lwcl/ops/common.hpp"
#include "lwcl/tensor/arena.hpp"
#include "lwcl/tensor/tensor.hpp"

namespace lwcl::model {

// GPT-2's initialisation, deterministic in the seed: weights N(0, 0.02), residual output projections
// N(0, 0.02 / sqrt(2 L)), norm weights 1, biases 0. Writes host memory of type T laid out by `layout`.
template <class T>
void init_parameters(const model_config& cfg, const tensor_layout& layout, T* host, std::uint64_t seed) {
  const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(std::max<index_t>(1, cfg.n_layers())));
  for (std::size_t i = 0; i < layout.entries().size(); ++i) {
    const auto& e = layout.entries()[i];
    T* p = host + e.offset;
    const index_t n = e.shape.numel();
    const bool is_bias = e.name.size() > 5 && e.name.compare(e.name.size() - 5, 5, ".bias") == 0;
    const bool is_norm = e.name.find("norm") != std::string::npos;
    if (is_norm && !is_bias) {
      for (index_t j = 0; j < n; ++j) p[j] = T(1);
    } else if (is_bias) {
      for (index_t j = 0; j < n; ++j) p[j] = T(0);
    } else {
      const bool residual_out = e.name.find("attn.o.weight") != std::string::npos ||
                                e.name.find("mlp.proj.weight") != std::string::npos ||
                                e.name.find("mlp.down.weight") != std::string::npos;
      const double std = residual_out ? proj_std : 0.02;
      philox_stream s{seed, i};
      for (index_t j = 0; j < n; ++j) p[j] = static_cast<T>(std * s.normal(static_cast<std::uint64_t>(j)));
    }
  }
}

template <class Backend>
class weights {
 public:
  virtual ~weights() = default;
  weights(const weights&) = delete;
  weights& operator=(const weights&) = delete;

  // The model's configuration.
  virtual const model_config& config() const = 0;
  // The feature at boundary 0, the input of layer 0, of `tokens` (i32 (B, T), backend memory) into `x`
  // ((B, T, d_model)): a decoder's word (and position) embeddings; the encoder's word, position and
  // token-type-0 embeddings through its embedding LayerNorm. Keeps nothing for a backward pass and
  // works on a frozen model: what a teacher pass and a calibration pass start from.
  virtual void embed_inputs(const tensor& tokens, const tensor& x) const = 0;

  Backend& backend() const { return be_; }
  const tensor_layout& layout() const { return layout_; }
  dtype type() const { return type_; }
  index_t num_parameters() const {
    index_t n = 0;
    for (const auto& e : layout_.entries()) n += e.shape.numel();
    return n;
  }
  // The whole flat parameter / gradient buffers (including alignment padding, which stays zero).
  tensor params() const { return tensor(params_.data(), type_, {layout_.numel()}); }
  tensor grads() const { return tensor(grads_.data(), type_, {layout_.numel()}); }
  tensor param(const std::string& name) const { return layout_.view(params_.data(), type_, name); }
  tensor grad(const std::string& name) const { return layout_.view(grads_.data(), type_, name); }
  void zero_grad() { be_.fill_zero(grads_.data(), grads_.bytes()); }

  // For a model only run forward from here on (a teacher): frees the gradient buffer and the block
  // stack with its saved activations. A frozen model trains no more; it cannot be undone.
  void freeze() {
    stack_.reset();
    grads_ = buffer<Backend>();
    frozen_ = true;
  }
  bool frozen() const { return frozen_; }
  // Activation checkpointing of the block stack from the next forward (block_stack::set_recompute): the
  // blocks keep only the hidden states between them and run forward again in backward, for bitwise the
  // same gradients in less memory.
  void set_activation_checkpointing(bool on) { stack("set_activation_checkpointing").set_recompute(on); }
  bool activation_checkpointing() const { return stack_ && stack_->recompute(); }
  // Bytes of the parameter and gradient buffers (the gradients are 0 once frozen).
  std::size_t parameter_bytes() const { return params_.bytes() + grads_.bytes(); }

 protected:
  // Zero-filled parameters and gradients laid out by `layout`, and a block stack over layers
  // [0, m.n_layers()) of `m`; frozen: the parameters alone, as freeze() leaves them (a teacher built
  // this way never allocates a gradient buffer).
  weights(Backend& be, const model_config& m, tensor_layout layout, dtype t, bool frozen = false)
      : be_(be), type_(t), layout_(std::move(layout)), frozen_(frozen) {
    if constexpr (!Backend::is_device) {  // a model this machine cannot hold is an error, not a bad_alloc
      const double need = static_cast<double>(bytes_of(layout_.numel())) * (frozen ? 1 : 2);
      const double have = physical_memory_bytes();
      check(have <= 0 || need <= have, "model: ", layout_.numel(), " parameters in ", dtype_name(t),
            frozen ? "" : " with their gradients", " need ", need / (1 << 30), " GiB, more than this machine's ",
            have / (1 << 30), " GiB of memory");
    }
    params_ = buffer<Backend>(be_, bytes_of(layout_.numel()));
    be_.fill_zero(params_.data(), params_.bytes());
    if (frozen) return;
    grads_ = buffer<Backend>(be_, bytes_of(layout_.numel()));
    be_.fill_zero(grads_.data(), grads_.bytes());
    stack_ = std::make_unique<block_stack<Backend>>(be_, m, 0, m.n_layers(), layout_, params_.data(), grads_.data(), type_);
  }

  // init_parameters(m, ...) into the parameters, deterministic in the seed; `who` names the model in
  // the error for a dtype it cannot hold.
  void init_from(const model_config& m, std::uint64_t seed, std::string_view who) {
    ops::dispatch_storage(who, type_, [&](auto z) {
      using T = decltype(z);
      std::vector<T> host(static_cast<std::size_t>(layout_.numel()), T(0));
      init_parameters(m, layout_, host.data(), seed);
      be_.from_host(params_.data(), host.data(), params_.bytes());
    });
  }

  std::size_t bytes_of(index_t n) const { return static_cast<std::size_t>(n) * dtype_size(type_); }

  Backend& be_;
  dtype type_;
  tensor_layout layout_;
  // The block stack, refused once frozen.
  block_stack<Backend>& stack(std::string_view who) const {
    check(!frozen_, who, ": the model is frozen (its gradients and saved activations were released); run it "
          "forward with infer_logits");
    return *stack_;
  }

  buffer<Backend> params_, grads_;
  std::unique_ptr<block_stack<Backend>> stack_;
  bool frozen_ = false;
};

}  // namespace lwcl::model
