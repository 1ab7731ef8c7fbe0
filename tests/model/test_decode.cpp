// Incremental decoding with the key/value cache gives the full forward's logits at every position
// (gpt2, llama with GQA and per-layer widths, qwen2 with biases; prompt in one step, then one token at a
// time and in chunks); greedy generation equals re-running the whole sequence each step; sampling keeps
// to its top-k / top-p set with the right frequencies; bad requests get clear errors.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/model/generate.hpp"

using namespace lwcl;

namespace {

model::model_config config_of(model::family f) {
  const bool gated = f != model::family::gpt2;
  auto c = model::model_config::uniform(f, 61, 40, 48, 3, 6, gated ? 2 : 6, 72);
  // Per-layer widths, as a pruned student has them.
  c.layers[1] = {gated ? 4 : 3, gated ? 2 : 3, 40};
  c.layers[2] = {gated ? 2 : 5, 1, 56};
  if (gated) c.layers[2].n_kv_heads = 1;
  if (f == model::family::qwen2) c.output_bias = true;
  return c;
}

std::vector<std::int32_t> tokens_of(index_t n, std::uint64_t seed) {
  philox_stream s{seed, 1};
  std::vector<std::int32_t> t;
  for (index_t i = 0; i < n; ++i) t.push_back(static_cast<std::int32_t>(s.bits(static_cast<std::uint64_t>(i)) % 61));
  return t;
}

// The full forward's logits (T, V) of a sequence.
std::vector<float> full_logits(model::transformer<backend::cpu>& net, const std::vector<std::int32_t>& ids) {
  const auto T = static_cast<index_t>(ids.size()), V = net.config().vocab;
  std::vector<float> out(static_cast<std::size_t>(T * V));
  const tensor logits = net.forward_logits(tensor(const_cast<std::int32_t*>(ids.data()), {1, T}));
  std::copy_n(static_cast<const float*>(logits.data), out.size(), out.begin());
  return out;
}

}  // namespace

TEST_CASE("cached decoding equals the full forward at every position") {
  for (auto f : {model::family::gpt2, model::family::llama, model::family::qwen2}) {
    CAPTURE(model::family_name(f));
    backend::cpu be;
    model::transformer<backend::cpu> net(be, config_of(f), dtype::f32);
    net.init(17);
    const auto ids = tokens_of(24, 5);
    const auto want = full_logits(net, ids);
    const index_t V = net.config().vocab;
    model::kv_decoder<backend::cpu> dec(net, 24, 8);
    double worst = 0, scale = 0;
    index_t pos = 0;
    for (index_t n : {7, 1, 1, 5, 1, 8, 1}) {  // a prompt, single tokens and chunks: 24 positions
      const std::vector<std::int32_t> chunk(ids.begin() + pos, ids.begin() + pos + n);
      const tensor logits = dec.step(chunk);
      const float* got = static_cast<const float*>(logits.data);
      for (index_t i = 0; i < n * V; ++i) {
        worst = std::max(worst, std::abs(double(got[i]) - want[static_cast<std::size_t>(pos * V + i)]));
        scale = std::max(scale, std::abs(double(want[static_cast<std::size_t>(pos * V + i)])));
      }
      pos += n;
    }
    CHECK(dec.length() == 24);
    MESSAGE(model::family_name(f), ": largest difference ", worst, " against logits up to ", scale);
    CHECK(worst <= 1e-5 * scale);
    CHECK_THROWS_WITH_AS(dec.step({1}), doctest::Contains("exceed the cache's 24"), lwcl::error);
    dec.reset();
    CHECK_THROWS_WITH_AS(dec.step(tokens_of(9, 1)), doctest::Contains("expected 1 to 8"), lwcl::error);
    CHECK_THROWS_WITH_AS(dec.step({61}), doctest::Contains("outside the vocabulary"), lwcl::error);
  }
}

TEST_CASE("a step keeps only its last rows' logits, and truncation continues a shared prefix") {
  for (auto f : {model::family::gpt2, model::family::qwen2}) {
    CAPTURE(model::family_name(f));
    backend::cpu be;
    model::transformer<backend::cpu> net(be, config_of(f), dtype::f32);
    net.init(29);
    const index_t V = net.config().vocab;
    const auto prefix = tokens_of(10, 3), a = tokens_of(6, 4), b = tokens_of(4, 6);
    auto joined = [&](const std::vector<std::int32_t>& tail) {
      auto s = prefix;
      s.insert(s.end(), tail.begin(), tail.end());
      return s;
    };
    const auto want_a = full_logits(net, joined(a)), want_b = full_logits(net, joined(b));
    model::kv_decoder<backend::cpu> dec(net, 24, 16);
    auto worst_vs = [&](const tensor& got, const std::vector<float>& want, index_t from, index_t rows) {
      double worst = 0, scale = 0;
      const float* g = static_cast<const float*>(got.data);
      for (index_t i = 0; i < rows * V; ++i) {
        const double w = want[static_cast<std::size_t>(from * V + i)];
        worst = std::max(worst, std::abs(double(g[i]) - w));
        scale = std::max(scale, std::abs(w));
      }
      return worst / scale;
    };
    // The prefix with keep = 1: one row, the last position's.
    const tensor last = dec.step(prefix, 1);
    CHECK(last.shape[1] == 1);
    CHECK(worst_vs(last, want_a, 9, 1) <= 1e-5);
    // Continuation a, then back to the prefix and continuation b (keeping its last 3 rows).
    const tensor la = dec.step(a);
    CHECK(worst_vs(la, want_a, 10, 6) <= 1e-5);
    CHECK(dec.length() == 16);
    dec.truncate(10);
    const tensor lb = dec.step(b, 3);
    CHECK(lb.shape[1] == 3);
    CHECK(worst_vs(lb, want_b, 11, 3) <= 1e-5);
    CHECK(dec.length() == 14);
    CHECK_THROWS_WITH_AS(dec.truncate(15), doctest::Contains("expected 0 to the 14 cached"), lwcl::error);
    CHECK_THROWS_WITH_AS(dec.step(b, 5), doctest::Contains("keep 5 rows of 4"), lwcl::error);
  }
}

TEST_CASE("greedy generation equals choosing the argmax of a full forward at every step") {
  for (auto f : {model::family::gpt2, model::family::llama}) {
    CAPTURE(model::family_name(f));
    backend::cpu be;
    model::transformer<backend::cpu> net(be, config_of(f), dtype::f32);
    net.init(23);
    const auto prompt = tokens_of(6, 9);
    const auto g = model::generate(net, prompt, 12, model::sampling{});
    REQUIRE(g.tokens.size() == 12);
    auto seq = prompt;
    const index_t V = net.config().vocab;
    for (index_t i = 0; i < 12; ++i) {
      const auto logits = full_logits(net, seq);
      const float* last = logits.data() + (seq.size() - 1) * static_cast<std::size_t>(V);
      const auto best = static_cast<std::int32_t>(std::max_element(last, last + V) - last);
      CHECK(g.tokens[static_cast<std::size_t>(i)] == best);
      seq.push_back(best);
    }
    // A seed fixes sampled text.
    const model::sampling s{.temperature = 0.8, .top_k = 20, .top_p = 0.9, .seed = 4};
    CHECK(model::generate(net, prompt, 10, s).tokens == model::generate(net, prompt, 10, s).tokens);
    CHECK_THROWS_WITH_AS(model::generate(net, tokens_of(35, 2), 6, s), doctest::Contains("exceed the model's context of 40"),
                         lwcl::error);
    CHECK_THROWS_WITH_AS(model::generate(net, {}, 6, s), doctest::Contains("empty prompt"), lwcl::error);
  }
}

TEST_CASE("sampling keeps to the top-k and top-p sets with the right frequencies") {
  // Probabilities 0.5, 0.3, 0.15, 0.05 at temperature 1.
  const std::vector<float> logits = {std::log(0.15f), std::log(0.5f), std::log(0.05f), std::log(0.3f)};
  auto freq = [&](const model::sampling& s) {
    std::map<int, double> f;
    for (std::uint64_t d = 0; d < 4000; ++d) f[model::sample_token(logits.data(), 4, s, d)] += 1.0 / 4000;
    return f;
  };
  CHECK(model::sample_token(logits.data(), 4, model::sampling{}, 0) == 1);  // greedy
  CHECK(model::sample_token(logits.data(), 4, model::sampling{.temperature = 5, .top_k = 1}, 3) == 1);
  const auto all = freq({.temperature = 1, .seed = 1});
  CHECK(all.at(1) == doctest::Approx(0.5).epsilon(0.1));
  CHECK(all.at(3) == doctest::Approx(0.3).epsilon(0.1));
  CHECK(all.at(0) == doctest::Approx(0.15).epsilon(0.15));
  CHECK(all.at(2) == doctest::Approx(0.05).epsilon(0.3));
  const auto k2 = freq({.temperature = 1, .top_k = 2, .seed = 2});  // 0.5 / 0.8 and 0.3 / 0.8
  CHECK(k2.size() == 2);
  CHECK(k2.at(1) == doctest::Approx(0.625).epsilon(0.08));
  const auto p06 = freq({.temperature = 1, .top_p = 0.6, .seed = 3});  // 0.5 < 0.6 <= 0.8: tokens 1 and 3
  CHECK(p06.size() == 2);
  CHECK(p06.count(1) == 1);
  CHECK(p06.count(3) == 1);
  const auto p05 = freq({.temperature = 1, .top_p = 0.45, .seed = 3});  // 0.5 reaches 0.45: token 1 alone
  CHECK(p05.size() == 1);
  // Top-k keeps ties with the k-th largest logit (Hugging Face's TopKLogitsWarper: scores below the k-th
  // value are removed): logits 2, 1, 1, 0 at k = 2 keep three tokens, in proportions e^2 : e : e.
  const std::vector<float> tied = {1.f, 2.f, 0.f, 1.f};
  std::map<int, double> tk;
  for (std::uint64_t d = 0; d < 4000; ++d) tk[model::sample_token(tied.data(), 4, {.temperature = 1, .top_k = 2, .seed = 4}, d)] += 1.0 / 4000;
  CHECK(tk.size() == 3);
  CHECK(tk.count(2) == 0);
  const double e = std::exp(1.0);
  CHECK(tk.at(1) == doctest::Approx(e / (e + 2)).epsilon(0.08));
  CHECK(tk.at(0) == doctest::Approx(1 / (e + 2)).epsilon(0.15));
  // A vocabulary limit: only the first 2 ids can be drawn (a tokenizer smaller than the padded model).
  CHECK(model::sample_token(logits.data(), 1, model::sampling{}, 0) == 0);
  const auto hot = freq({.temperature = 100, .seed = 5});  // a high temperature flattens toward uniform
  CHECK(hot.at(2) == doctest::Approx(0.25).epsilon(0.2));
  CHECK_THROWS_WITH_AS(model::sample_token(logits.data(), 4, {.temperature = 1, .top_p = 0}, 0),
                       doctest::Contains("top_p 0 must be in (0, 1]"), lwcl::error);
  CHECK_THROWS_WITH_AS(model::sample_token(logits.data(), 4, {.temperature = 1, .top_p = 1.5}, 0),
                       doctest::Contains("top_p 1.5 must be in (0, 1]"), lwcl::error);
  CHECK_THROWS_WITH_AS(model::sample_token(logits.data(), 4, {.temperature = -1}, 0), doctest::Contains("temperature -1"),
                       lwcl::error);
  const std::vector<float> bad = {0.f, NAN, 1.f, 2.f};
  CHECK_THROWS_WITH_AS(model::sample_token(bad.data(), 4, {}, 0), doctest::Contains("logit 1 is nan"), lwcl::error);
}
