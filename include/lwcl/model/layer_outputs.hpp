#pragma once
// A model's hidden state (a decoder's or the encoder's) at every layer boundary, one layer at a time: the
// embedding output (boundary 0)
// and each block's output (boundary l + 1), handed to a callback while only two (B, T, C) buffers and
// one block's activations are resident. The teacher pass of the layer-wise pipeline, the cumulative
// error curve and the feature-codec benchmark read the hidden states this way.

#include <cstdint>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/model/block.hpp"
#include "lwcl/model/block_stack.hpp"
#include "lwcl/model/weights.hpp"

namespace lwcl::model {

// Runs `net` on token ids (host memory, B * T of them) through layer last - 1 and calls
// f(boundary, h) for boundaries 0 .. last with h the (B, T, C) hidden state in backend memory (valid
// during the call). last defaults to every layer.
template <class Backend, class F>
void for_each_layer_output(const weights<Backend>& net, const std::vector<std::int32_t>& ids, index_t B, index_t T, F&& f,
                           index_t last = -1) {
  auto& be = net.backend();
  const auto& cfg = net.config();
  if (last < 0) last = cfg.n_layers();
  check(last <= cfg.n_layers(), "for_each_layer_output: boundary ", last, " past the model's ", cfg.n_layers(), " layers");
  check(static_cast<index_t>(ids.size()) == B * T, "for_each_layer_output: ", ids.size(), " token ids for a ", B, " x ", T,
        " batch");
  const dtype t = net.type();
  owned_tensor<Backend> x(be, t, {B, T, cfg.d_model}), y(be, t, {B, T, cfg.d_model});
  buffer<Backend> tok(be, ids.size() * sizeof(std::int32_t));
  be.from_host(tok.data(), ids.data(), tok.bytes());
  net.embed_inputs(tensor(tok.data(), dtype::i32, {B, T}), x.view());
  f(index_t(0), x.view());
  for (index_t l = 0; l < last; ++l) {
    const auto sh = shape_of_layer(cfg, l);
    block_acts<Backend> a(be, sh, B, T, t);
    block_forward(be, sh, bind_block(net.layout(), layer_prefix(l), net.params().data, t), a, x.view(), y.view());
    std::swap(x, y);
    f(l + 1, x.view());
  }
}

}  // namespace lwcl::model
