#pragma once
// A contiguous run of blocks [first, last) of a model, forward and backward over (B, T, C) hidden
// states. Parameters and gradients are views into buffers the owner holds (laid out by
// add_block_params under "layers.<i>."), so a whole LM and a lone segment share this code. The stack
// owns its activations: each block's saved tensors, the hidden states between blocks, and the
// gradient scratch, which layers of equal widths share. With activation checkpointing, forward keeps
// only the hidden states between blocks, and backward runs each block's forward again from its input
// before its backward: the blocks of equal widths then share one set of saved tensors, and the
// gradients are bitwise those without it, for one more forward pass.

#include <memory>
#include <string>
#include <vector>

#include "lwcl/model/block.hpp"

namespace lwcl::model {

// Adds the parameters of layers [first, last) to `layout`.
inline void add_stack_params(tensor_layout& layout, const model_config& cfg, index_t first, index_t last) {
  for (index_t l = first; l < last; ++l) add_block_params(layout, layer_prefix(l), shape_of_layer(cfg, l));
}

template <class Backend>
class block_stack {
 public:
  block_stack(Backend& be, const model_config& cfg, index_t first, index_t last, const tensor_layout& layout, void* params,
              void* grads, dtype t)
      : be_(be), cfg_(cfg), first_(first), last_(last), type_(t) {
    check(0 <= first && first < last && last <= cfg.n_layers(), "block_stack: layer range [", first, ", ", last,
          ") is not inside the model's ", cfg.n_layers(), " layers");
    for (index_t l = first; l < last; ++l) {
      shapes_.push_back(shape_of_layer(cfg, l));
      w_.push_back(bind_block(layout, layer_prefix(l), params, t));
      dw_.push_back(grads ? bind_block(layout, layer_prefix(l), grads, t) : block_weights{});
    }
  }

  index_t size() const { return last_ - first_; }
  std::size_t activation_bytes() const {
    std::size_t n = mem_ ? mem_->bytes() : 0;
    for (const auto& a : acts_) n += a->bytes();
    for (const auto& g : grad_scratch_) n += g->bytes();
    return n;
  }

  // Activation checkpointing on or off from the next forward (see the header comment).
  void set_recompute(bool on) {
    if (on == recompute_) return;
    recompute_ = on;
    B_ = T_ = -1;  // the activations are laid out again
  }
  bool recompute() const { return recompute_; }

  // Every block's linear inputs go through `h` from here on (null: none). Must outlive the stack's passes.
  void set_input_hook(linear_input_hook* h) { hook_ = h; }
  linear_input_hook* input_hook() const { return hook_; }

  // y = blocks(x). x must stay unchanged until backward (it is the first block's saved input).
  void forward(const tensor& x, const tensor& y) {
    check(x.shape.rank() == 3 && x.shape[2] == cfg_.d_model, "block_stack::forward: x has shape ", x.shape.str(),
          ", expected (B, T, ", cfg_.d_model, ")");
    ensure(x.shape[0], x.shape[1]);
    x_ = x;
    for (std::size_t i = 0; i < shapes_.size(); ++i) {
      const tensor& in = i == 0 ? x : hidden_[i - 1];
      const tensor& out = i + 1 == shapes_.size() ? y : hidden_[i];
      block_forward(be_, shapes_[i], w_[i], *acts_[acts_of_[i]], in, out, hook_, first_ + static_cast<index_t>(i));
    }
  }

  // Given dy, accumulates the parameter gradients and, when dx is non-empty, dx.
  void backward(const tensor& dy, const tensor& dx) {
    check(!acts_.empty() && x_.data != nullptr, "block_stack::backward called before forward");
    check(dw_.front().q_w.data != nullptr, "block_stack::backward: the stack was built without gradient buffers");
    tensor dcur = dy;
    for (std::size_t i = shapes_.size(); i-- > 0;) {
      const tensor& in = i == 0 ? x_ : hidden_[i - 1];
      tensor dnext = i == 0 && dx.data ? dx : dstream_[i % 2];
      if (!(i == 0 && dx.data)) be_.fill_zero(dnext.data, dnext.bytes());
      auto& acts = *acts_[acts_of_[i]];
      if (recompute_) block_forward(be_, shapes_[i], w_[i], acts, in, recomputed_, hook_, first_ + static_cast<index_t>(i));
      block_backward(be_, shapes_[i], w_[i], dw_[i], acts, *grad_scratch_[scratch_of_[i]], in, dnext, dcur, hook_,
                     first_ + static_cast<index_t>(i));
      dcur = dnext;
    }
  }

 private:
  void ensure(index_t B, index_t T) {
    if (B == B_ && T == T_) return;
    B_ = B;
    T_ = T;
    acts_.clear();
    acts_of_.clear();
    grad_scratch_.clear();
    scratch_of_.clear();
    mem_.reset();  // the old layout's memory goes before the new one is taken
    hidden_.assign(shapes_.size() > 1 ? shapes_.size() - 1 : 0, tensor());
    mem_ = std::make_unique<arena<Backend>>();
    for (auto& h : hidden_) mem_->declare(h, {B, T, cfg_.d_model});
    mem_->declare(dstream_[0], {B, T, cfg_.d_model});
    mem_->declare(dstream_[1], {B, T, cfg_.d_model});
    recomputed_ = tensor();
    if (recompute_) mem_->declare(recomputed_, {B, T, cfg_.d_model});
    mem_->allocate(be_, type_);
    std::vector<std::size_t> owner;  // first layer index of each scratch (and, recomputing, of each shared acts)
    for (std::size_t i = 0; i < shapes_.size(); ++i) {
      std::size_t s = 0;
      for (; s < owner.size(); ++s) {
        const auto& o = shapes_[owner[s]];
        if (o.H == shapes_[i].H && o.KVH == shapes_[i].KVH && o.F == shapes_[i].F) break;
      }
      if (s == owner.size()) {
        owner.push_back(i);
        grad_scratch_.push_back(std::make_unique<block_acts<Backend>>(be_, shapes_[i], B, T, type_, true));
        if (recompute_) acts_.push_back(std::make_unique<block_acts<Backend>>(be_, shapes_[i], B, T, type_));
      }
      scratch_of_.push_back(s);
      if (!recompute_) acts_.push_back(std::make_unique<block_acts<Backend>>(be_, shapes_[i], B, T, type_));
      acts_of_.push_back(recompute_ ? s : i);
    }
  }

  Backend& be_;
  model_config cfg_;
  index_t first_, last_;
  dtype type_;
  std::vector<block_shape> shapes_;
  std::vector<block_weights> w_, dw_;
  index_t B_ = -1, T_ = -1;
  std::vector<std::unique_ptr<block_acts<Backend>>> acts_, grad_scratch_;
  std::vector<std::size_t> scratch_of_, acts_of_;  // each block's gradient scratch and saved tensors
  std::vector<tensor> hidden_;
  tensor dstream_[2];
  std::unique_ptr<arena<Backend>> mem_;
  tensor x_;
  tensor recomputed_;  // the output of a block's forward run again in backward (discarded)
  bool recompute_ = false;
  linear_input_hook* hook_ = nullptr;
};

}  // namespace lwcl::model
