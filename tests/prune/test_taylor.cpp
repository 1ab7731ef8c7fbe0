// The Taylor criterion: per-block local gradients (prune/local_gradients.hpp) and the |g * w| group
// scores (policies/pruning/taylor.hpp) against PyTorch autograd on the tiny gpt2 and GQA llama
// checkpoints (tools/fixtures/prune_taylor.py); a criterion needing gradients without them is refused.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/policies/pruning/taylor.hpp"
#include "lwcl/prune/local_gradients.hpp"
#include "lwcl/prune/stats.hpp"
#include "support/check.hpp"
#include "support/fixture.hpp"

using namespace lwcl;

namespace {

double taylor_error(const std::string& family, dtype t) {
  backend::cpu be;
  const auto dir = test::data_path("hf/" + family);
  model::transformer<backend::cpu> net(be, checkpoint::read_hf_config(dir), t);
  checkpoint::load_hf_weights(net, dir);
  test::fixture fx("prune/taylor_" + family + ".lwfx");
  const auto shape = fx.ints("shape");
  const index_t batches = shape[0], B = shape[1], T = shape[2];
  const auto ids64 = fx.ints("ids"), tg64 = fx.ints("targets");
  const std::vector<std::int32_t> ids(ids64.begin(), ids64.end()), targets(tg64.begin(), tg64.end());
  prune::local_gradient_pass<backend::cpu> pass(net);
  for (index_t k = 0; k < batches; ++k) pass.add(ids.data() + k * B * T, targets.data() + k * B * T, B, T);
  auto in = prune::make_scoring_input(net);
  in.gradients = pass.result();
  const auto s = policies::score_groups(policies::pruning::taylor{}, in);
  CHECK(s.criterion == "taylor");
  double worst = 0;
  for (std::size_t l = 0; l < s.layers.size(); ++l) {
    const std::string n = std::to_string(l);
    worst = std::max(worst, test::rel_error(s.layers[l].heads, fx.f64("heads_" + n)));
    worst = std::max(worst, test::rel_error(s.layers[l].kv_groups, fx.f64("kv_groups_" + n)));
    worst = std::max(worst, test::rel_error(s.layers[l].ffn, fx.f64("ffn_" + n)));
    worst = std::max(worst, test::rel_error(std::vector<double>{s.layers[l].layer}, fx.f64("layer_" + n)));
  }
  return worst;
}

}  // namespace

TEST_CASE("taylor scores equal PyTorch autograd's |g * w| of each block's local loss") {
  for (const char* family : {"gpt2", "llama"}) {
    CAPTURE(family);
    const double e64 = taylor_error(family, dtype::f64), e32 = taylor_error(family, dtype::f32);
    MESSAGE(std::string(family), ": taylor scores max relative error f64 ", e64, ", f32 ", e32);
    CHECK(e64 < 1e-9);
    CHECK(e32 < 1e-5);
  }
}

TEST_CASE("taylor without gradients, and gradient passes over bad input, raise lwcl::error") {
  backend::cpu be;
  const auto dir = test::data_path("hf/llama");
  model::transformer<backend::cpu> net(be, checkpoint::read_hf_config(dir), dtype::f64);
  checkpoint::load_hf_weights(net, dir);
  const auto in = prune::make_scoring_input(net);
  CHECK_THROWS_WITH_AS(policies::score_groups(policies::pruning::taylor{}, in),
                       doctest::Contains("taylor needs gradients of a local loss"), lwcl::error);
  prune::local_gradient_pass<backend::cpu> pass(net);
  CHECK_THROWS_WITH_AS(pass.result(), doctest::Contains("the calibration set is empty"), lwcl::error);
  const std::vector<std::int32_t> ids(8, 1), bad_targets(8, static_cast<std::int32_t>(net.config().vocab));
  CHECK_THROWS_WITH_AS(pass.add(ids.data(), bad_targets.data(), 2, 4), doctest::Contains("is outside the vocabulary"),
                       lwcl::error);
}
