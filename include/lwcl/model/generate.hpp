#pragma once
// Text generation from a decoder LM: the prompt fills a key/value cache (model::kv_decoder) in one
// step, then each new token is chosen from the last position's logits and fed back alone. Choice of the
// next token, in the order Hugging Face applies its logits warpers: temperature, then top-k, then top-p
// (the smallest set of most probable tokens whose probability reaches p); temperature 0 is greedy
// (the first maximum). Draws come from a counter-based stream, so a seed gives the same text on every
// machine and backend.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/core/rng.hpp"
#include "lwcl/model/decode.hpp"

namespace lwcl::model {

struct sampling {
  double temperature = 0;  // 0: greedy
  index_t top_k = 0;       // 0: no limit
  double top_p = 1.0;      // in (0, 1]
  std::uint64_t seed = 0;
  // > 0: only ids below it are ever chosen (a tokenizer smaller than the model's padded vocabulary);
  // 0: every id of the model.
  index_t vocab = 0;

  void validate() const {
    check(std::isfinite(temperature) && temperature >= 0, "sampling: temperature ", temperature,
          " must be finite and >= 0 (0 is greedy)");
    check(top_k >= 0, "sampling: top_k ", top_k, " must be >= 0 (0 keeps every token)");
    check(top_p > 0 && top_p <= 1, "sampling: top_p ", top_p, " must be in (0, 1]");
    check(vocab >= 0, "sampling: vocab ", vocab, " must be >= 0 (0: the model's whole vocabulary)");
  }
};

// The next token from one position's logits (host memory, V values); `draw` indexes the random stream.
inline std::int32_t sample_token(const float* logits, index_t V, const sampling& s, std::uint64_t draw) {
  s.validate();
  check(V > 0, "sample_token: an empty vocabulary");
  for (index_t i = 0; i < V; ++i)
    check(std::isfinite(logits[i]), "sample_token: logit ", i, " is ", logits[i], "; the model's output is not finite");
  if (s.temperature == 0 || s.top_k == 1) {
    index_t best = 0;
    for (index_t i = 1; i < V; ++i)
      if (logits[i] > logits[best]) best = i;
    return static_cast<std::int32_t>(best);
  }
  std::vector<index_t> order(static_cast<std::size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  // Most probable first; equal logits keep the lower id first.
  std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) { return logits[a] > logits[b]; });
  // Top-k keeps every token whose logit equals the k-th largest too, as Hugging Face's warper does.
  index_t keep_k = s.top_k > 0 ? std::min(s.top_k, V) : V;
  while (keep_k < V && logits[order[static_cast<std::size_t>(keep_k)]] == logits[order[static_cast<std::size_t>(keep_k - 1)]])
    ++keep_k;
  const double m = logits[order[0]] / s.temperature;
  std::vector<double> p(static_cast<std::size_t>(keep_k));
  double z = 0;
  for (index_t i = 0; i < keep_k; ++i) z += p[static_cast<std::size_t>(i)] = std::exp(logits[order[static_cast<std::size_t>(i)]] / s.temperature - m);
  index_t keep = keep_k;
  if (s.top_p < 1) {
    double cum = 0;
    for (index_t i = 0; i < keep_k; ++i) {
      cum += p[static_cast<std::size_t>(i)] / z;
      if (cum >= s.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double total = 0;
  for (index_t i = 0; i < keep; ++i) total += p[static_cast<std::size_t>(i)];
  const double u = philox_stream{s.seed, 0x67656e}.uniform(draw) * total;
  double acc = 0;
  for (index_t i = 0; i < keep; ++i) {
    acc += p[static_cast<std::size_t>(i)];
    if (u < acc) return static_cast<std::int32_t>(order[static_cast<std::size_t>(i)]);
  }
  return static_cast<std::int32_t>(order[static_cast<std::size_t>(keep - 1)]);
}

struct generation {
  std::vector<std::int32_t> tokens;  // the new tokens only
  double prefill_seconds = 0;        // the prompt's step
  double decode_seconds = 0;         // every later step, sampling included
  double tokens_per_second() const {
    return decode_seconds > 0 && tokens.size() > 1 ? static_cast<double>(tokens.size() - 1) / decode_seconds : 0.0;
  }
};

// `max_new` tokens after `prompt`; the prompt and the new tokens must fit the model's context.
template <class Backend>
generation generate(const transformer<Backend>& net, const std::vector<std::int32_t>& prompt, index_t max_new,
                    const sampling& s) {
  s.validate();
  const auto& cfg = net.config();
  const auto n = static_cast<index_t>(prompt.size());
  check(n >= 1, "generate: an empty prompt (give at least one token)");
  check(max_new >= 1, "generate: max_new ", max_new, " must be at least 1");
  check(n + max_new <= cfg.max_seq, "generate: a prompt of ", n, " tokens and ", max_new,
        " new ones exceed the model's context of ", cfg.max_seq, " positions");
  check(net.type() == dtype::f32 || net.type() == dtype::f64, "generate: the model is ", dtype_name(net.type()),
        "; generation runs f32 or f64 models");
  using clock = std::chrono::steady_clock;
  kv_decoder<Backend> dec(net, n + max_new, n);
  auto& be = net.backend();
  check(s.vocab <= cfg.vocab, "generate: sampling.vocab ", s.vocab, " exceeds the model's vocabulary of ", cfg.vocab);
  const index_t V = cfg.vocab, choose_from = s.vocab > 0 ? s.vocab : V;
  std::vector<float> row(static_cast<std::size_t>(V));
  auto last_row = [&](const tensor& logits, index_t rows) { logits_to_host(be, logits, rows - 1, 1, row); };
  generation g;
  auto t0 = clock::now();
  last_row(dec.step(prompt, 1), 1);
  g.tokens.push_back(sample_token(row.data(), choose_from, s, 0));
  auto t1 = clock::now();
  g.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  for (index_t i = 1; i < max_new; ++i) {
    last_row(dec.step({g.tokens.back()}), 1);
    g.tokens.push_back(sample_token(row.data(), choose_from, s, static_cast<std::uint64_t>(i)));
  }
  g.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  return g;
}

}  // namespace lwcl::model
