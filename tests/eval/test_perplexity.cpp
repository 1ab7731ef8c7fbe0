// Sliding-window perplexity: on the transformers-made gpt2 checkpoint it equals the perplexity computed
// from transformers' own float64 logits; any stride scores every token after the first exactly once;
// the protocol is printed with the number.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/eval/perplexity.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "support/fixture.hpp"

using namespace lwcl;

TEST_CASE("perplexity equals the one computed from transformers' logits, for every stride") {
  const auto dir = test::data_path("hf/gpt2");
  test::fixture fx("hf/gpt2_logits.lwfx");
  const auto ids64 = fx.ints("ids");  // (2, 12); row 0 used
  const auto logits = fx.f64("logits");  // (2, 12, 64)
  const index_t T = 12, V = 64;
  double nll = 0;
  for (index_t t = 0; t + 1 < T; ++t) {  // position t predicts token t + 1
    const double* row = logits.data() + t * V;
    double m = row[0], z = 0;
    for (index_t v = 1; v < V; ++v) m = std::max(m, row[v]);
    for (index_t v = 0; v < V; ++v) z += std::exp(row[v] - m);
    nll += m + std::log(z) - row[ids64[static_cast<std::size_t>(t + 1)]];
  }
  const double want = std::exp(nll / static_cast<double>(T - 1));

  backend::cpu be;
  model::transformer<backend::cpu> net(be, checkpoint::read_hf_config(dir));
  checkpoint::load_hf_weights(net, dir);
  const std::vector<std::int32_t> ids(ids64.begin(), ids64.begin() + T);
  const auto full = eval::perplexity(net, ids, T, T, "fixture");
  CHECK(full.tokens == T - 1);
  CHECK(std::abs(full.perplexity() - want) / want < 1e-6);
  CHECK(full.protocol() == "split=fixture seq_len=12 stride=12 tokens=11");
  // Shorter windows see less context, so the value may differ, but every target is scored once.
  for (index_t stride : {1, 2, 5, 6}) {
    CAPTURE(stride);
    const auto r = eval::perplexity(net, ids, 6, stride);
    CHECK(r.tokens == T - 1);
    CHECK(std::isfinite(r.perplexity()));
  }
  // With windows as long as the text every target sees its whole prefix, so the stride does not matter
  // (checked in f64, where windows of different lengths agree to rounding).
  model::transformer<backend::cpu> net64(be, checkpoint::read_hf_config(dir), dtype::f64);
  checkpoint::load_hf_weights(net64, dir);
  const double p64 = eval::perplexity(net64, ids, T, T).perplexity();
  CHECK(std::abs(p64 - want) / want < 1e-12);
  CHECK(std::abs(eval::perplexity(net64, ids, T, 4).perplexity() - p64) < 1e-12 * p64);
  CHECK_THROWS_WITH_AS(eval::perplexity(net, ids, 32, 4), doctest::Contains("seq_len 32 must be in [1, 16]"), lwcl::error);
  CHECK_THROWS_WITH_AS(eval::perplexity(net, ids, 8, 9), doctest::Contains("stride 9 must be in [1, seq_len = 8]"), lwcl::error);
}
