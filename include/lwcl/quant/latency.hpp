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
#include <fstream>
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
// input rows (tokens), threads, and the working set the weights are read from: stream_bytes 0 times the
// linear with its weights hot in the caches (the same weights every call), a positive value cycles the
// calls through copies of the weights that span at least that many bytes, as a decoding step does when
// it reads every layer's weights once (set it to the model's linear weight bytes in this format).
struct linear_key {
  index_t rows = 0, cols = 0;
  int weight_bits = 32;
  index_t group = 0;
  int act_bits = 32;
  index_t tokens = 1;
  int threads = 1;
  std::size_t stream_bytes = 0;

  auto tie() const { return std::tie(rows, cols, weight_bits, group, act_bits, tokens, threads, stream_bytes); }
  bool operator<(const linear_key& o) const { return tie() < o.tie(); }
  bool operator==(const linear_key& o) const { return tie() == o.tie(); }
  std::string str() const {
    return std::to_string(rows) + "x" + std::to_string(cols) + " w" + std::to_string(weight_bits) + " g" + std::to_string(group) +
           " a" + std::to_string(act_bits) + " tokens " + std::to_string(tokens) + " threads " + std::to_string(threads) +
           (stream_bytes ? " streamed from " + std::to_string(stream_bytes) + " bytes" : std::string(" hot"));
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
  // `stream_bytes(choice)` gives the working set each entry was measured at (none: hot caches).
  double linear_seconds(const model::model_config& cfg, index_t tokens, int threads,
                        const std::function<linear_choice(index_t, const std::string&)>& choice,
                        const std::function<std::size_t(const linear_choice&)>& stream_bytes = {}) const {
    double s = 0;
    for (index_t l = 0; l < cfg.n_layers(); ++l)
      for (const auto& [name, rows, cols] : block_linears(cfg, l)) {
        const linear_choice c = choice(l, name);
        s += at({rows, cols, c.weight_bits, c.weight_bits == 32 ? 0 : c.group, c.act_bits, tokens, threads,
                 stream_bytes ? stream_bytes(c) : 0});
      }
    return s;
  }

  nlohmann::ordered_json to_json() const {
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    for (const auto& [k, s] : seconds_)
      a.push_back({{"rows", k.rows}, {"cols", k.cols}, {"weight_bits", k.weight_bits}, {"group", k.group},
                   {"act_bits", k.act_bits}, {"tokens", k.tokens}, {"threads", k.threads}, {"stream_bytes", k.stream_bytes},
                   {"seconds", s}});
    return a;
  }
  static latency_table from_json(const nlohmann::json& j, const std::string& what) {
    check(j.is_array(), "latency_table: ", what, " is not a JSON array of measurements");
    latency_table t;
    for (const auto& e : j) {
      try {
        linear_key k{e.at("rows").get<index_t>(),    e.at("cols").get<index_t>(),   e.at("weight_bits").get<int>(),
                     e.at("group").get<index_t>(),   e.at("act_bits").get<int>(),   e.at("tokens").get<index_t>(),
                     e.at("threads").get<int>(), e.value("stream_bytes", std::size_t{0})};
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

// What measure_linear needs of any key, on every backend: positive sizes and a working set of at most
// 16 GiB (`who` names the caller).
inline void check_key(const linear_key& k, const char* who) {
  check(k.rows > 0 && k.cols > 0 && k.tokens > 0, who, ": ", k.str(), " (expected positive sizes)");
  check(k.stream_bytes <= (std::size_t{16} << 30), who, ": ", k.str(), " (expected a working set of at most 16 GiB)");
}

// The weights (rows x cols) and inputs (tokens x cols) a key is timed on: uniform values from a stream
// fixed by the shape, the same on every backend (speed does not depend on them).
struct linear_data {
  std::vector<float> W, x;
};
inline linear_data random_linear(const linear_key& k) {
  const philox_stream s{0x1a7e, static_cast<std::uint64_t>(k.rows * 131 + k.cols)};
  linear_data d{std::vector<float>(static_cast<std::size_t>(k.rows * k.cols)), std::vector<float>(static_cast<std::size_t>(k.tokens * k.cols))};
  for (std::size_t i = 0; i < d.W.size(); ++i) d.W[i] = 0.05f * (s.uniform(i) - 0.5f);
  for (std::size_t i = 0; i < d.x.size(); ++i) d.x[i] = s.uniform(d.W.size() + i) - 0.5f;
  return d;
}

// How many copies of weights of `bytes` bytes span the key's working set (1 when hot).
inline std::size_t copies(const linear_key& k, std::size_t bytes) {
  return k.stream_bytes == 0 ? std::size_t{1} : std::max<std::size_t>(1, (k.stream_bytes + bytes - 1) / bytes);
}

}  // namespace latency_detail

// Measures one linear on the host as a decoding step runs it: the f32 layer through ops::linear_forward
// (the host backend's GEMM), a packed one through dequant_matmul over RTN-packed random weights, and with
// 8-bit activations a packed one through a8_matmul (an f32 one quantises and dequantises its input, then
// runs the f32 GEMM). With k.stream_bytes the calls take turns over copies of the weights spanning at
// least that many bytes, so each call reads its weights from as far down the memory hierarchy as a
// model of that size would. The caller sets the thread count (OpenMP and OpenBLAS); `threads` only
// labels the key.
inline double measure_linear(const linear_key& k, double min_seconds = 0.05) {
  check(k.act_bits == 32 || k.act_bits == 8, "measure_linear: ", k.act_bits, " activation bits (expected 32 or 8)");
  latency_detail::check_key(k, "measure_linear");
  latency_detail::linear_data data = latency_detail::random_linear(k);
  const std::vector<float>& W = data.W;
  std::vector<float>& x = data.x;
  std::vector<float> y(static_cast<std::size_t>(k.tokens * k.rows)), b(static_cast<std::size_t>(k.rows), 0.0f);
  const auto copies = [&](std::size_t bytes) { return latency_detail::copies(k, bytes); };
  std::size_t turn = 0;
  if (k.weight_bits == 32) {
    backend::cpu be;
    const std::size_t n = copies(W.size() * sizeof(float));
    std::vector<float> Ws(W.size() * n);
    for (std::size_t c = 0; c < n; ++c) std::copy(W.begin(), W.end(), Ws.begin() + static_cast<std::ptrdiff_t>(c * W.size()));
    const tensor tx(x.data(), {1, k.tokens, k.cols}), ty(y.data(), {1, k.tokens, k.rows}), tb(b.data(), {k.rows});
    const auto weight = [&] { return tensor(Ws.data() + (turn++ % n) * W.size(), {k.rows, k.cols}); };
    if (k.act_bits == 8) {
      std::vector<float> xq(x.size());
      const tensor tq(xq.data(), {1, k.tokens, k.cols});
      return latency_detail::median_seconds(
          [&] {
            std::copy(x.begin(), x.end(), xq.begin());
            fake_quantize_tokens(xq.data(), k.tokens, k.cols);
            ops::linear_forward(be, ty, tq, weight(), tb);
          },
          min_seconds);
    }
    return latency_detail::median_seconds([&] { ops::linear_forward(be, ty, tx, weight(), tb); }, min_seconds);
  }
  weight_format f;
  f.bits = k.weight_bits;
  f.group = k.group;
  const packed_weight p = quantize_rtn(W, k.rows, k.cols, f, k.str());
  if (k.act_bits == 8) {
    const std::vector<a8_weight> w8(copies(p.bytes()), prepare_a8(p, k.str()));
    return latency_detail::median_seconds(
        [&] { a8_matmul(w8[turn++ % w8.size()], x.data(), k.tokens, b.data(), y.data()); }, min_seconds);
  }
  const std::vector<packed_weight> ps(copies(p.bytes()), p);
  return latency_detail::median_seconds(
      [&] { dequant_matmul(ps[turn++ % ps.size()], x.data(), k.tokens, b.data(), y.data()); }, min_seconds);
}

// The bytes of `cfg`'s block linear weights, each stored in the format `choice(layer, name)` gives (f32:
// 4 bytes a weight; packed, symmetric: codes and 16-bit scales): the working set a decoding step streams
// its linears from.
inline std::size_t linear_weight_bytes(const model::model_config& cfg,
                                       const std::function<linear_choice(index_t, const std::string&)>& choice) {
  std::size_t n = 0;
  for (index_t l = 0; l < cfg.n_layers(); ++l)
    for (const auto& [name, rows, cols] : block_linears(cfg, l)) {
      const linear_choice c = choice(l, name);
      if (c.weight_bits == 32) {
        n += static_cast<std::size_t>(rows * cols) * 4;
        continue;
      }
      const index_t gw = c.group > 0 ? c.group : cols;
      n += static_cast<std::size_t>(rows * cols * c.weight_bits / 8) + static_cast<std::size_t>(rows * (cols / gw)) * 2;
    }
  return n;
}
inline std::size_t linear_weight_bytes(const model::model_config& cfg, const linear_choice& c) {
  return linear_weight_bytes(cfg, [&](index_t, const std::string&) { return c; });
}

// The host CPU, for a line printed with every timing: its model name, the vector features the kernels
// use (avx2 fma avx512f avx512bw avx512_bf16 amx_tile) and the dequantiser kernel picked at run time.
inline std::string host_cpu_line() {
  std::ifstream cpu("/proc/cpuinfo");
  std::string line, model_name, flags;
  while (std::getline(cpu, line)) {
    if (model_name.empty() && line.rfind("model name", 0) == 0) model_name = line.substr(line.find(':') + 2);
    if (flags.empty() && line.rfind("flags", 0) == 0) flags = line;
  }
  std::string have;
  for (const char* f : {"avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "amx_tile"})
    if (flags.find(std::string(" ") + f) != std::string::npos) have += std::string(" ") + f;
  return (model_name.empty() ? std::string("unknown cpu") : model_name) + ";" + have + "; dequantiser kernel " +
         std::string(simd_level_name(cpu_level()));
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
