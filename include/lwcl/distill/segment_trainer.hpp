#pragma once
// One student segment trained on its own: the student layers [first, last) as a block_stack over
// buffers that hold only that segment's parameters, gradients and AdamW moments, learning to map an
// input feature (teacher or student boundary feature) to the teacher's feature at the segment's end
// with a feature loss (a loss policy: policies/loss/). Nothing else of the student or the teacher is
// resident while it trains. With fake quantisation set (quantisation-aware training) every forward
// pass runs on the segment's linear weights rounded to a weight format, and the gradients they give are
// applied to the full-precision weights (straight through).

#include <algorithm>
#include <istream>
#include <ostream>
#include <utility>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/model/block_stack.hpp"
#include "lwcl/ops/distill_loss.hpp"
#include "lwcl/optim/adamw.hpp"
#include "lwcl/optim/clip.hpp"
#include "lwcl/policies/concepts.hpp"
#include "lwcl/policies/loss/nmse.hpp"
#include "lwcl/quant/fake_quant.hpp"
#include "lwcl/quant/format.hpp"

namespace lwcl::distill {

// What a segment holds while it trains, by purpose; total() is resident_bytes().
struct segment_memory_use {
  std::size_t parameters = 0, gradients = 0, optimizer = 0, activations = 0, work = 0;
  std::size_t total() const { return parameters + gradients + optimizer + activations + work; }
};

template <class Backend, policies::loss_policy Loss = policies::loss::nmse>
class segment_trainer {
  static_assert(Loss::target == policies::loss_target::features,
                "segment_trainer: a segment learns boundary features; pick a feature loss (mse, nmse, cosine or a "
                "weighted_sum of them), not a logit loss");


 public:
  // `model_layout` / `model_params` (host, double) are the whole student's; the segment copies its
  // layers out of them and write_back() copies them in again.
  segment_trainer(Backend& be, const model::model_config& cfg, index_t first, index_t last, const tensor_layout& model_layout,
                  const std::vector<double>& model_params, dtype t, const optim::adamw_config& oc,
                  Loss loss = {}, double clip = 1.0)
      : be_(be), cfg_(cfg), first_(first), last_(last), type_(t), loss_(std::move(loss)), clip_(clip) {
    check(0 <= first && first < last && last <= cfg.n_layers(), "segment_trainer: layers [", first, ", ", last,
          ") are not inside the student's ", cfg.n_layers(), " layers");
    check(static_cast<index_t>(model_params.size()) == model_layout.numel(), "segment_trainer: ", model_params.size(),
          " parameters for a layout of ", model_layout.numel());
    model::add_stack_params(layout_, cfg, first, last);
    params_ = buffer<Backend>(be, static_cast<std::size_t>(layout_.numel()) * dtype_size(t));
    grads_ = buffer<Backend>(be, params_.bytes());
    be.fill_zero(params_.data(), params_.bytes());
    be.fill_zero(grads_.data(), grads_.bytes());
    load(model_layout, model_params);
    stack_ = std::make_unique<model::block_stack<Backend>>(be, cfg, first, last, layout_, params_.data(), grads_.data(), t);
    opt_ = std::make_unique<optim::adamw<Backend>>(be, params(), oc);
  }

  index_t first() const { return first_; }
  index_t last() const { return last_; }
  tensor params() const { return tensor(params_.data(), type_, {layout_.numel()}); }
  tensor grads() const { return tensor(grads_.data(), type_, {layout_.numel()}); }
  const tensor_layout& layout() const { return layout_; }
  long steps() const { return opt_->steps(); }

  // Bytes resident for training this segment: parameters, gradients, AdamW moments, activations.
  std::size_t resident_bytes() const { return memory_use().total(); }
  segment_memory_use memory_use() const {
    return {params_.bytes(), grads_.bytes(), opt_->state_bytes(), stack_->activation_bytes(), work_bytes() + fake_quant_bytes()};
  }

  // The segment's training state (parameters, then AdamW's step and moments) as bytes, and back: what a
  // pipeline checkpoint holds for the segment it was training. load_state checks the sizes.
  void save_state(std::ostream& os) const {
    std::vector<char> p(params_.bytes());
    be_.to_host(p.data(), params_.data(), p.size());
    os.write(p.data(), static_cast<std::streamsize>(p.size()));
    check(os.good(), "segment_trainer: writing ", p.size(), " bytes of parameters failed");
    opt_->save(os);
  }
  void load_state(std::istream& is) {
    std::vector<char> p(params_.bytes());
    is.read(p.data(), static_cast<std::streamsize>(p.size()));
    check(is.good(), "segment_trainer: the saved state of segment [", first_, ", ", last_, ") ends inside its ", p.size(),
          " bytes of parameters");
    opt_->load(is);
    be_.from_host(params_.data(), p.data(), p.size());
  }

  // The optimiser's state alone (step count, moments, bf16 master copy; adamw::save_state's bytes), and
  // back into a segment of the same layers (checked): what a segment keeps across its visits
  // (pipeline/kept_optimizer.hpp).
  std::vector<char> optimizer_state() const { return opt_->save_state(); }
  void load_optimizer_state(const std::vector<char>& state) { opt_->load_state(state); }

  // Quantisation-aware training from here on: every forward pass (forward, loss, compute_gradients, step)
  // sees each linear weight of the segment as dequantize(quantize_rtn(w)) under `f`, its scales found
  // from the current weights at every pass; gradients are taken there and applied to the f32 weights
  // (straight through); params() and write_back() hold the f32 weights. The segment must be f32 and
  // every linear must fit the format (checked here, naming the layer). Costs one copy of the segment's
  // parameters in host memory while it trains.
  void set_fake_quant(const quant::weight_format& f) {
    check(type_ == dtype::f32, "segment_trainer: fake quantisation trains f32 weights, and the segment holds ",
          dtype_name(type_));
    linears_.clear();
    for (const auto& e : layout_.entries())
      if (quant::is_block_linear(e.name)) {
        f.check_for(e.shape[0], e.shape[1], e.name);
        linears_.push_back(&e);
      }
    check(!linears_.empty(), "segment_trainer: layers [", first_, ", ", last_, ") have no linear weight to fake-quantise");
    check(!transform_, "segment_trainer: fake quantisation and a weight transform cannot both be set");
    fake_quant_ = f;
  }
  const std::optional<quant::weight_format>& fake_quant() const { return fake_quant_; }

  // A general form of the same: every pass runs on the weights `f(master, effective)` writes into
  // `effective` (the segment's f32 parameters in layout() order, a copy of `master` on entry), and the
  // gradients it gives are applied to the master weights (a weight-entangled supernet mixes quantised
  // copies of its weights this way: search/supernet.hpp). Not together with set_fake_quant.
  using weight_transform = std::function<void(const std::vector<float>& master, std::vector<float>& effective)>;
  void set_weight_transform(weight_transform f) {
    check(type_ == dtype::f32, "segment_trainer: a weight transform works on f32 weights, and the segment holds ",
          dtype_name(type_));
    check(!fake_quant_, "segment_trainer: a weight transform and fake quantisation (", fake_quant_ ? fake_quant_->describe() : "",
          ") cannot both be set");
    transform_ = std::move(f);
  }
  // The hook on the segment's linear inputs (model::linear_input_hook), or nullptr for none.
  void set_input_hook(model::linear_input_hook* h) { stack_->set_input_hook(h); }

  // y = segment(x); x and y are (B, T, C) in backend memory.
  void forward(const tensor& x, const tensor& y) {
    const quantised_weights q(*this);
    stack_->forward(x, y);
  }

  // Loss of segment(x) against `target` without a parameter update.
  double loss(const tensor& x, const tensor& target) {
    ensure(x.shape);
    const quantised_weights q(*this);
    stack_->forward(x, out_.view());
    return apply_loss(tensor(), target);
  }

  // Fills grads() with d(loss)/d(segment parameters) for (x, target) and returns the loss (with fake
  // quantisation: at the quantised weights).
  double compute_gradients(const tensor& x, const tensor& target) {
    ensure(x.shape);
    const quantised_weights q(*this);
    be_.fill_zero(grads_.data(), grads_.bytes());
    stack_->forward(x, out_.view());
    be_.fill_zero(dout_.view().data, dout_.view().bytes());
    const double l = apply_loss(dout_.view(), target);
    check(std::isfinite(l), "the loss is ", l);
    stack_->backward(dout_.view(), tensor());
    return l;
  }

  // One optimisation step on (x, target): gradients, global-norm clipping, AdamW at `lr`. Returns the
  // loss before the update. A non-finite loss or gradient norm is an lwcl::error naming the segment,
  // its step and, where one holds a NaN or an infinity, the tensor (locate_nonfinite).
  // `after_gradients`, when set, runs between the gradients and the update (it may read and change grads()).
  double step(const tensor& x, const tensor& target, double lr, const std::function<void()>& after_gradients = {}) {
    const long n = opt_->steps() + 1;
    try {
      const double l = compute_gradients(x, target);
      if (after_gradients) after_gradients();
      optim::clip_grad_norm(be_, grads(), clip_);
      opt_->step(grads(), lr);
      return l;
    } catch (const lwcl::error& e) {
      const std::string where = locate_nonfinite(x, target);
      fail("segment [", first_, ", ", last_, ") stopped at its step ", n, ": ", e.what(), where.empty() ? "" : "; ",
           where);
    }
  }

  // Where a NaN or an infinity sits among what a step reads: its input, its target, or the first of the
  // segment's parameter tensors that holds one (by name, with the element), before any update. Empty
  // when every value is finite (the overflow arose inside the computation).
  std::string locate_nonfinite(const tensor& x, const tensor& target) const {
    if (const auto at = first_nonfinite(x)) return detail::concat("its input features hold ", at->second, " at element ", at->first, " of ", x.numel());
    if (const auto at = first_nonfinite(target))
      return detail::concat("its target features hold ", at->second, " at element ", at->first, " of ", target.numel());
    const auto host = host_copy();
    for (const auto& e : layout_.entries())
      for (index_t i = 0; i < e.shape.numel(); ++i)
        if (const double v = host[static_cast<std::size_t>(e.offset + i)]; !std::isfinite(v))
          return detail::concat("parameter '", e.name, "' ", e.shape.str(), " holds ", v, " at element ", i);
    return {};
  }

  // Copies the segment's (trained) parameters into the whole student's host parameter vector.
  void write_back(const tensor_layout& model_layout, std::vector<double>& model_params) const {
    const auto host = host_copy();
    for (const auto& e : layout_.entries()) {
      const auto& d = model_layout.find(e.name);
      std::copy_n(host.begin() + e.offset, e.shape.numel(), model_params.begin() + d.offset);
    }
  }

 private:
  // While alive, the segment's parameters hold the fake-quantised linear weights; the f32 ones come
  // back when it goes (also when the pass throws). Does nothing without fake quantisation.
  class quantised_weights {
   public:
    explicit quantised_weights(segment_trainer& s) : s_(s) {
      if (!s_.fake_quant_ && !s_.transform_) return;
      master_.resize(static_cast<std::size_t>(s_.layout_.numel()));
      s_.be_.to_host(master_.data(), s_.params_.data(), master_.size() * sizeof(float));
      std::vector<float> q(master_);
      if (s_.transform_) s_.transform_(master_, q);
      check(q.size() == master_.size(), "segment_trainer: the weight transform left ", q.size(), " weights of ", master_.size());
      if (s_.fake_quant_)
        for (const auto* e : s_.linears_) quant::fake_quantize(q.data() + e->offset, e->shape[0], e->shape[1], *s_.fake_quant_, e->name);
      s_.be_.from_host(s_.params_.data(), q.data(), q.size() * sizeof(float));
    }
    ~quantised_weights() {
      if (!master_.empty()) s_.be_.from_host(s_.params_.data(), master_.data(), master_.size() * sizeof(float));
    }
    quantised_weights(const quantised_weights&) = delete;
    quantised_weights& operator=(const quantised_weights&) = delete;

   private:
    segment_trainer& s_;
    std::vector<float> master_;
  };

  void load(const tensor_layout& model_layout, const std::vector<double>& model_params) {
    std::vector<double> host(static_cast<std::size_t>(layout_.numel()), 0.0);
    for (const auto& e : layout_.entries()) {
      const auto& s = model_layout.find(e.name);
      check(s.shape == e.shape, "segment_trainer: '", e.name, "' is ", s.shape.str(), " in the student, ", e.shape.str(),
            " in the segment");
      std::copy_n(model_params.begin() + s.offset, e.shape.numel(), host.begin() + e.offset);
    }
    ops::dispatch_storage("segment_trainer", type_, [&](auto z) {
      using T = decltype(z);
      std::vector<T> tmp(host.begin(), host.end());
      be_.from_host(params_.data(), tmp.data(), tmp.size() * sizeof(T));
    });
  }
  // The first element of t that is not finite, and its value.
  std::optional<std::pair<index_t, double>> first_nonfinite(const tensor& t) const {
    if (!t.data || t.numel() == 0) return std::nullopt;
    std::optional<std::pair<index_t, double>> found;
    ops::dispatch_storage("segment_trainer", t.type, [&](auto z) {
      using T = decltype(z);
      std::vector<T> tmp(static_cast<std::size_t>(t.numel()));
      be_.to_host(tmp.data(), t.data, tmp.size() * sizeof(T));
      for (std::size_t i = 0; i < tmp.size() && !found; ++i)
        if (const double v = static_cast<double>(tmp[i]); !std::isfinite(v)) found.emplace(static_cast<index_t>(i), v);
    });
    return found;
  }
  std::vector<double> host_copy() const {
    std::vector<double> out(static_cast<std::size_t>(layout_.numel()));
    ops::dispatch_storage("segment_trainer", type_, [&](auto z) {
      using T = decltype(z);
      std::vector<T> tmp(out.size());
      be_.to_host(tmp.data(), params_.data(), tmp.size() * sizeof(T));
      std::copy(tmp.begin(), tmp.end(), out.begin());
    });
    return out;
  }
  void ensure(const shape& s) {
    if (out_.view().data && out_.view().shape == s) return;
    out_ = owned_tensor<Backend>(be_, type_, s);
    dout_ = owned_tensor<Backend>(be_, type_, s);
    scratch_ = owned_tensor<Backend>(be_, type_, {2 * s[0] * s[1]});
  }
  std::size_t work_bytes() const { return out_.view().bytes() + dout_.view().bytes() + scratch_.view().bytes(); }
  // Host bytes fake quantisation holds during a pass: the f32 weights and their rounded copy.
  std::size_t fake_quant_bytes() const { return fake_quant_ || transform_ ? 2 * params_.bytes() : 0; }
  double apply_loss(const tensor& dout, const tensor& target) {
    return loss_.compute(be_, dout, scratch_.view(), out_.view(), target, 1.0);
  }

  Backend& be_;
  model::model_config cfg_;
  index_t first_, last_;
  dtype type_;
  Loss loss_;
  double clip_;
  tensor_layout layout_;
  buffer<Backend> params_, grads_;
  std::unique_ptr<model::block_stack<Backend>> stack_;
  std::unique_ptr<optim::adamw<Backend>> opt_;
  owned_tensor<Backend> out_, dout_, scratch_;
  std::optional<quant::weight_format> fake_quant_;
  std::vector<const tensor_layout::entry*> linears_;  // the entries fake quantisation rounds
  weight_transform transform_;
};

}  // namespace lwcl::distill
