#pragma once
// Decoding with packed weights: a model::kv_decoder on the host whose block linears multiply by packed
// int8/int4 weights through quant::dequant_matmul (the rest, norms, attention, embeddings and the head,
// runs as before in f32). What a quantised model costs per token, measured on the whole model. Linears
// named in `act8` take 8-bit per-token activations: a packed one multiplies in integers (a8_matmul), an
// f32 one quantises and dequantises its input before the f32 GEMM.

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/model/config.hpp"
#include "lwcl/model/decode.hpp"
#include "lwcl/ops/linear.hpp"
#include "lwcl/quant/act_quant.hpp"
#include "lwcl/quant/fake_quant.hpp"
#include "lwcl/quant/matmul.hpp"
#include "lwcl/quant/packed.hpp"

namespace lwcl::quant {

// Packed weights by parameter name ("layers.3.attn.q.weight"), and the hook that routes a decoder's
// linears through them; a linear without a packed weight keeps the f32 GEMM. Must outlive the decoder.
class packed_linears {
 public:
  packed_linears(const std::vector<std::string>& names, const std::vector<packed_weight>& weights,
                 const std::set<std::string>& act8 = {})
      : act8_(act8) {
    check(names.size() == weights.size(), "packed_linears: ", names.size(), " names for ", weights.size(), " packed weights");
    for (std::size_t i = 0; i < names.size(); ++i) {
      weights[i].validate(names[i]);
      check(by_name_.emplace(names[i], &weights[i]).second, "packed_linears: '", names[i], "' is given twice");
      if (act8.count(names[i])) a8_.emplace(names[i], prepare_a8(weights[i], names[i]));
    }
  }

  std::size_t size() const { return by_name_.size(); }
  std::size_t bytes() const {
    std::size_t n = 0;
    for (const auto& [name, w] : by_name_) n += w->bytes();
    return n;
  }

  // Routes d's block linears through the packed weights (f32 models on the host only).
  template <class Backend>
  void attach(model::kv_decoder<Backend>& d, const model::transformer<Backend>& net) const {
    static_assert(!Backend::is_device, "packed_linears: the dequantising GEMM runs on the host");
    check(net.type() == dtype::f32, "packed_linears: the model holds ", dtype_name(net.type()), " weights (expected f32)");
    for (const auto& name : act8_) {
      check(net.layout().contains(name), "packed_linears: 8-bit activations for '", name, "', which the model does not have");
      check(is_block_linear(name), "packed_linears: '", name, "' is not a block linear's weight");
    }
    for (const auto& [name, w] : by_name_) {
      check(net.layout().contains(name), "packed_linears: the model has no parameter '", name, "'");
      const auto& e = net.layout().find(name);
      check(e.shape.rank() == 2 && e.shape[0] == w->rows && e.shape[1] == w->cols, "packed_linears: '", name, "' is ",
            e.shape.str(), " in the model, ", w->rows, " x ", w->cols, " packed");
    }
    Backend& be = net.backend();
    d.set_linear([this, &be](index_t layer, std::string_view which, const tensor& out, const tensor& inp, const tensor& weight,
                             const tensor& bias) {
      const std::string name = model::layer_prefix(layer) + std::string(which);
      const auto it = by_name_.find(name);
      if (it == by_name_.end()) {
        if (act8_.count(name)) {
          thread_local std::vector<float> xq;
          xq.assign(inp.ptr<float>("packed_linears"), inp.ptr<float>("packed_linears") + inp.numel());
          fake_quantize_tokens(xq.data(), inp.numel() / inp.shape[inp.shape.rank() - 1], inp.shape[inp.shape.rank() - 1], name);
          ops::linear_forward(be, out, tensor(xq.data(), inp.shape), weight, bias);
          return;
        }
        ops::linear_forward(be, out, inp, weight, bias);
        return;
      }
      if (const auto a = a8_.find(name); a != a8_.end()) {
        const index_t M = inp.numel() / a->second.cols;
        a8_matmul(a->second, inp.ptr<float>("packed_linears"), M, bias.data ? bias.ptr<float>("packed_linears") : nullptr,
                  out.ptr<float>("packed_linears"));
        return;
      }
      const packed_weight& w = *it->second;
      const index_t M = inp.numel() / w.cols;
      dequant_matmul(w, inp.ptr<float>("packed_linears"), M, bias.data ? bias.ptr<float>("packed_linears") : nullptr,
                     out.ptr<float>("packed_linears"));
    });
  }

 private:
  std::map<std::string, const packed_weight*> by_name_;
  std::set<std::string> act8_;
  std::map<std::string, a8_weight> a8_;
};

}  // namespace lwcl::quant
