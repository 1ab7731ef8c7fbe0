#pragma once
// A latency model of decoding, as the hardware-aware searches build them (HAQ, Once-for-all): a lookup
// table of measured times per (linear shape, weight bits and group, activation bits, tokens, threads),
// summed over a model's block linears, plus the measured time of everything else in a decoding step
// (embeddings, norms, attention over the cache, the head) for the model's architecture. The table is
// measured on this machine (measure_linear) and written as JSON; bench/latency_model checks its
// predictions against whole models decoding. Activations are f32 (act_bits 32) or int8 per token
// (act_bits 8: quant/act_quant.hpp; with f32 weights that is quantise-dequantise before the f32 GEMM, what
// a host without a 16-bit-activation kernel runs, so it never pays).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/core/rng.hpp"
#include "lwcl/model/config.hpp"
#include "lwcl/model/decode.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/ops/linear.hpp"
#include "lwcl/quant/act_quant.hpp"
#include "lwcl/quant/matmul.hpp"
#include "lwcl/quant/rtn.hpp"

namespace lwcl::quant {

// One linear's cost: rows x cols (out x in), weight bits (32: the f32 GEMM) and group, activation bits,
// input rows (tokens), threads.
struct linear_key {
  index_t rows = 0, cols = 0;
  int weight_bits = 32;
  index_t group = 0;
  int act_bits = 32;
  index_t tokens = 1;
  int threads = 1;

  auto tie() const { return std::tie(rows, cols, weight_bits, group, act_bits, tokens, threads); }
  bool operator<(const linear_key& o) const { return tie() < o.tie(); }
  bool operator==(const linear_key& o) const { return tie() == o.tie(); }
  std::string str() const {
    return std::to_string(rows) + "x" + std::to_string(cols) + " w" + std::to_string(weight_bits) + " g" + std::to_string(group) +
           " a" + std::to_string(act_bits) + " tokens " + std::to_string(tokens) + " threads " + std::to_string(threads);
  }
};

// The format of one linear in a model: weight bits 32 for f32, else a packed format.
struct linear_choice {
  int weight_bits = 32;
  index_t group = 0;
  int act_bits = 32;
};

// The block linears of a model config: (name under the layer prefix, rows, cols) per layer.
inline std::vector<std::tuple<std::string, index_t, index_t>> block_linears(const model::model_config& cfg, index_t layer) {
  const auto& L = cfg.layers[static_cast<std::size_t>(layer)];
  const index_t C = cfg.d_model, D = cfg.head_dim, q = L.n_heads * D, kv = L.n_kv_heads * D, F = L.ffn;
  std::vector<std::tuple<std::string, index_t, index_t>> out = {
      {"attn.q.weight", q, C}, {"attn.k.weight", kv, C}, {"attn.v.weight", kv, C}, {"attn.o.weight", C, q}};
  if (cfg.traits().gated_mlp) {
    out.push_back({"mlp.gate.weight", F, C});
    out.push_back({"mlp.up.weight", F, C});
    out.push_back({"mlp.down.weight", C, F});
  } else {
    out.push_back({"mlp.fc.weight", F, C});
    out.push_back({"mlp.proj.weight", C, F});
  }
  return out;
}

class latency_table {
 public:
  void set(const linear_key& k, double seconds) {
    check(std::isfinite(seconds) && seconds > 0, "latency_table: ", k.str(), ": ", seconds, " s (expected a positive time)");
    seconds_[k] = seconds;
  }
  bool contains(const linear_key& k) const { return seconds_.count(k) != 0; }
  double at(const linear_key& k) const {
    const auto it = seconds_.find(k);
    check(it != seconds_.end(), "latency_table: no measurement for ", k.str(), " (measure it with quant::measure_linear)");
    return it->second;
  }
  std::size_t size() const { return seconds_.size(); }

  // The expected seconds of one decoding step's block linears of `cfg` at `tokens` input rows and
  // `threads`, each linear's format given by `choice(layer, name)`.
  double linear_seconds(const model::model_config& cfg, index_t tokens, int threads,
                        const std::function<linear_choice(index_t, const std::string&)>& choice) const {
    double s = 0;
    for (index_t l = 0; l < cfg.n_layers(); ++l)
      for (const auto& [name, rows, cols] : block_linears(cfg, l)) {
        const linear_choice c = choice(l, name);
        s += at({rows, cols, c.weight_bits, c.weight_bits == 32 ? 0 : c.group, c.act_bits, tokens, threads});
      }
    return s;
  }

  nlohmann::ordered_json to_json() const {
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    for (const auto& [k, s] : seconds_)
      a.push_back({{"rows", k.rows}, {"cols", k.cols}, {"weight_bits", k.weight_bits}, {"group", k.group},
                   {"act_bits", k.act_bits}, {"tokens", k.tokens}, {"threads", k.threads}, {"seconds", s}});
    return a;
  }
  static latency_table from_json(const nlohmann::json& j, const std::string& what) {
    check(j.is_array(), "latency_table: ", what, " is not a JSON array of measurements");
    latency_table t;
    for (const auto& e : j) {
      try {
        linear_key k{e.at("rows").get<index_t>(),    e.at("cols").get<index_t>(),   e.at("weight_bits").get<int>(),
                     e.at("group").get<index_t>(),   e.at("act_bits").get<int>(),   e.at("tokens").get<index_t>(),
                     e.at("threads").get<int>()};
        t.set(k, e.at("seconds").get<double>());
      } catch (const nlohmann::json::exception& ex) {
        fail("latency_table: ", what, ": a measurement lacks a field or has one of the wrong type (", ex.what(), ")");
      }
    }
    return t;
  }

 private:
  std::map<linear_key, double> seconds_;
};

namespace latency_detail {

// The median of `repeats` timings of f() (each the mean of enough calls to last about `min_seconds` /
// repeats), in seconds per call.
inline double median_seconds(const std::function<void()>& f, double min_seconds, int repeats = 5) {
  using clock = std::chrono::steady_clock;
  f();  // warm the caches and the thread pool
  long calls = 1;
  for (;;) {  // calls per timing so that one lasts about min_seconds / repeats
    const auto t0 = clock::now();
    for (long i = 0; i < calls; ++i) f();
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    if (s >= min_seconds / repeats || calls > (1L << 24)) break;
    calls *= 2;
  }
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = clock::now();
    for (long i = 0; i < calls; ++i) f();
    t.push_back(std::chrono::duration<double>(clock::now() - t0).count() / static_cast<double>(calls));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace latency_detail

// Measures one linear on the host as a decoding step runs it: the f32 layer through ops::linear_forward
// (the host backend's GEMM), a packed one through dequant_matmul over RTN-packed random weights, and with
// 8-bit activations a packed one through a8_matmul (an f32 one quantises and dequantises its input, then
// runs the f32 GEMM). The caller sets the thread count (OpenMP and OpenBLAS); `threads` only labels the key.
inline double measure_linear(const linear_key& k, double min_seconds = 0.05) {
  check(k.act_bits == 32 || k.act_bits == 8, "measure_linear: ", k.act_bits, " activation bits (expected 32 or 8)");
  check(k.rows > 0 && k.cols > 0 && k.tokens > 0, "measure_linear: ", k.str(), " (expected positive sizes)");
  const philox_stream s{0x1a7e, static_cast<std::uint64_t>(k.rows * 131 + k.cols)};
  std::vector<float> W(static_cast<std::size_t>(k.rows * k.cols)), x(static_cast<std::size_t>(k.tokens * k.cols)),
      y(static_cast<std::size_t>(k.tokens * k.rows)), b(static_cast<std::size_t>(k.rows), 0.0f);
  for (std::size_t i = 0; i < W.size(); ++i) W[i] = 0.05f * (s.uniform(i) - 0.5f);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = s.uniform(W.size() + i) - 0.5f;
  if (k.weight_bits == 32) {
    backend::cpu be;
    const tensor tw(W.data(), {k.rows, k.cols}), tx(x.data(), {1, k.tokens, k.cols}), ty(y.data(), {1, k.tokens, k.rows}),
        tb(b.data(), {k.rows});
    if (k.act_bits == 8) {
      std::vector<float> xq(x.size());
      const tensor tq(xq.data(), {1, k.tokens, k.cols});
      return latency_detail::median_seconds(
          [&] {
            std::copy(x.begin(), x.end(), xq.begin());
            fake_quantize_tokens(xq.data(), k.tokens, k.cols);
            ops::linear_forward(be, ty, tq, tw, tb);
          },
          min_seconds);
    }
    return latency_detail::median_seconds([&] { ops::linear_forward(be, ty, tx, tw, tb); }, min_seconds);
  }
  weight_format f;
  f.bits = k.weight_bits;
  f.group = k.group;
  const packed_weight p = quantize_rtn(W, k.rows, k.cols, f, k.str());
  if (k.act_bits == 8) {
    const a8_weight w8 = prepare_a8(p, k.str());
    return latency_detail::median_seconds([&] { a8_matmul(w8, x.data(), k.tokens, b.data(), y.data()); }, min_seconds);
  }
  return latency_detail::median_seconds([&] { dequant_matmul(p, x.data(), k.tokens, b.data(), y.data()); }, min_seconds);
}

// Seconds per single-token step of a kv_decoder over `net` after a `prompt`-token prefix: the median
// over `repeats` runs of `steps` steps each (the prefix untimed, one run first to warm up). `setup`, when
// set, prepares the decoder first: packed_linears::attach, or set_linear with a hook that does nothing to
// time the rest of the step.
inline double measure_decode_step(const model::transformer<backend::cpu>& net, index_t prompt, index_t steps,
                                  const std::function<void(model::kv_decoder<backend::cpu>&)>& setup, int repeats = 7) {
  check(prompt >= 1 && steps >= 1 && prompt + steps <= net.config().max_seq, "measure_decode_step: ", prompt, " + ", steps,
        " positions (at most the model's ", net.config().max_seq, ")");
  model::kv_decoder<backend::cpu> dec(net, prompt + steps);
  if (setup) setup(dec);
  const auto V = static_cast<std::size_t>(net.config().vocab);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(prompt));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 37 + 11) % V);
  std::vector<double> t;
  for (int r = 0; r <= repeats; ++r) {
    dec.reset();
    dec.step(ids, 1);
    const auto t0 = std::chrono::steady_clock::now();
    for (index_t s = 0; s < steps; ++s) dec.step({static_cast<std::int32_t>((static_cast<std::size_t>(s) * 7) % V)});
    if (r > 0) t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / static_cast<double>(steps));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace lwcl::quant
