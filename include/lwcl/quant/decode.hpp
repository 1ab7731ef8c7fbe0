#pragma once
// Decoding with packed weights: a model::kv_decoder on the host whose block linears multiply by packed
// int8/int4 weights through quant::dequant_matmul (the rest, norms, attention, embeddings and the head,
// runs as before in f32). What a quantised model costs per token, measured on the whole model.

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/model/config.hpp"
#include "lwcl/model/decode.hpp"
#include "lwcl/ops/linear.hpp"
#include "lwcl/quant/matmul.hpp"
#include "lwcl/quant/packed.hpp"

namespace lwcl::quant {

// Packed weights by parameter name ("layers.3.attn.q.weight"), and the hook that routes a decoder's
// linears through them; a linear without a packed weight keeps the f32 GEMM. Must outlive the decoder.
class packed_linears {
 public:
  packed_linears(const std::vector<std::string>& names, const std::vector<packed_weight>& weights) {
    check(names.size() == weights.size(), "packed_linears: ", names.size(), " names for ", weights.size(), " packed weights");
    for (std::size_t i = 0; i < names.size(); ++i) {
      weights[i].validate(names[i]);
      check(by_name_.emplace(names[i], &weights[i]).second, "packed_linears: '", names[i], "' is given twice");
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
    for (const auto& [name, w] : by_name_) {
      check(net.layout().contains(name), "packed_linears: the model has no parameter '", name, "'");
      const auto& e = net.layout().find(name);
      check(e.shape.rank() == 2 && e.shape[0] == w->rows && e.shape[1] == w->cols, "packed_linears: '", name, "' is ",
            e.shape.str(), " in the model, ", w->rows, " x ", w->cols, " packed");
    }
    Backend& be = net.backend();
    d.set_linear([this, &be](index_t layer, std::string_view which, const tensor& out, const tensor& inp, const tensor& weight,
                             const tensor& bias) {
      const auto it = by_name_.find(model::layer_prefix(layer) + std::string(which));
      if (it == by_name_.end()) {
        ops::linear_forward(be, out, inp, weight, bias);
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
};

}  // namespace lwcl::quant
