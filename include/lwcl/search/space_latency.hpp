#pragma once
// The latency table of a supernet search space (supernet.hpp): every linear shape its width candidates
// give x weight bits {32, 8, 4} x activation bits {32, 8}, for one token on `threads` threads, each
// measured by quant::measure_linear with its weights streamed from a working set the size of the
// model's linears in that format. The search reads it through search::linear_latency; a layer's target
// is a fraction of the f32 model's linear time from the same table.

#include <cstddef>
#include <set>
#include <utility>
#include <vector>

#include "lwcl/model/config.hpp"
#include "lwcl/quant/latency.hpp"
#include "lwcl/search/supernet.hpp"

namespace lwcl::search {

struct space_latency {
  quant::latency_table table;
  model::model_config cfg;
  index_t group = 32;  // weight-quantisation group of the 4- and 8-bit formats
  int threads = 1;

  // Bytes of all the model's linears in a weight format, the working set a measurement streams from.
  std::size_t stream_bytes(int weight_bits) const {
    return quant::linear_weight_bytes(cfg, quant::linear_choice{weight_bits, weight_bits == 32 ? 0 : group, 32});
  }
  quant::linear_key key(index_t rows, index_t cols, int weight_bits, int act_bits) const {
    return {rows, cols, weight_bits, weight_bits == 32 ? 0 : group, act_bits, 1, threads, stream_bytes(weight_bits)};
  }
  // Seconds of one token through a (rows x cols) linear in those formats; the shape must be in the table.
  double operator()(index_t rows, index_t cols, int weight_bits, int act_bits) const {
    return table.at(key(rows, cols, weight_bits, act_bits));
  }
  linear_latency lookup() const {
    return [this](index_t rows, index_t cols, int wb, int ab) { return (*this)(rows, cols, wb, ab); };
  }
  // Each layer's linear seconds at f32 weights and activations (the unpruned model).
  std::vector<double> f32_layer_seconds() const {
    std::vector<double> s(static_cast<std::size_t>(cfg.n_layers()), 0.0);
    for (index_t l = 0; l < cfg.n_layers(); ++l)
      for (const auto& [name, rows, cols] : quant::block_linears(cfg, l)) s[static_cast<std::size_t>(l)] += (*this)(rows, cols, 32, 32);
    return s;
  }
};

// Measures the table of `space` over `cfg`'s first layer's shapes (a space is uniform over layers),
// `seconds` of timing per entry.
inline space_latency measure_space_latency(const model::model_config& cfg, const supernet_space& space, int threads,
                                           double seconds = 0.04) {
  space_latency t;
  t.cfg = cfg;
  t.group = space.group;
  t.threads = threads;
  const auto& L0 = cfg.layers[0];
  const index_t C = cfg.d_model, D = cfg.head_dim, r = L0.n_heads / L0.n_kv_heads;
  std::set<std::pair<index_t, index_t>> shapes;
  for (index_t k : space.kv_groups) {
    shapes.insert({k * r * D, C});
    shapes.insert({k * D, C});
    shapes.insert({C, k * r * D});
  }
  for (index_t f : space.ffn) {
    shapes.insert({f, C});
    shapes.insert({C, f});
  }
  for (const auto& [rows, cols] : shapes)
    for (int wb : {32, 8, 4})
      for (int ab : {32, 8}) {
        const auto k = t.key(rows, cols, wb, ab);
        t.table.set(k, quant::measure_linear(k, seconds));
      }
  return t;
}

}  // namespace lwcl::search
