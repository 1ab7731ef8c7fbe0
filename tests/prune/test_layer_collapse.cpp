// Layer collapse (prune/layer_collapse.hpp): the merge formula, the similarity threshold deciding
// which merges are kept, the target layer count, and bad input.
#include <doctest/doctest.h>

#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/model/layer_map.hpp"
#include "lwcl/prune/layer_collapse.hpp"
#include "support/fixture.hpp"

using namespace lwcl;

namespace {

std::unique_ptr<model::transformer<backend::cpu>> make(backend::cpu& be, const model::model_config& cfg) {
  auto net = std::make_unique<model::transformer<backend::cpu>>(be, cfg, dtype::f64);
  net->init(7);
  return net;
}

std::vector<std::int32_t> ids_for(index_t vocab, index_t n) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  for (index_t i = 0; i < n; ++i) ids[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 5 + 1) % vocab);
  return ids;
}

}  // namespace

TEST_CASE("merge_layers: theta_l plus the differences of its followers") {
  const std::vector<std::vector<double>> layers = {{1, 2}, {3, 5}, {4, -1}, {0, 0}};
  // Merging layers 1..2 into 1: (3, 5) + ((4, -1) - (3, 5)) = (4, -1); 1..3: + ((0, 0) - (3, 5)) = (1, -6).
  CHECK(prune::merge_layers(layers, 1, 1) == std::vector<double>{4, -1});
  CHECK(prune::merge_layers(layers, 1, 2) == std::vector<double>{1, -6});
  CHECK(prune::merge_layers(layers, 0, 0) == layers[0]);
}

TEST_CASE("layer_collapse: the threshold decides which merges are kept") {
  backend::cpu be;
  const auto cfg = model::model_config::uniform(model::family::llama, 40, 16, 16, 5, 4, 2, 24);
  auto net = make(be, cfg);
  const auto ids = ids_for(cfg.vocab, 2 * 16);
  const auto reference = prune::collapse_detail::logits_host(*net, ids, 2, 16);

  SUBCASE("an unreachable threshold merges nothing and returns the same model") {
    prune::collapse_options o;
    o.threshold = 1.0;
    std::vector<prune::collapse_step> log;
    auto out = prune::layer_collapse(*net, ids, 2, 16, o, &log);
    CHECK(out->config().n_layers() == 5);
    CHECK(!log.empty());
    for (const auto& s : log) CHECK_FALSE(s.accepted);
    CHECK(prune::collapse_detail::logits_host(*out, ids, 2, 16) == reference);
  }
  SUBCASE("a permissive threshold merges down to the target, and the log's cosines are the merged model's") {
    prune::collapse_options o;
    o.threshold = -1.0;
    o.merge = 1;
    o.target_layers = 2;
    std::vector<prune::collapse_step> log;
    auto out = prune::layer_collapse(*net, ids, 2, 16, o, &log);
    CHECK(out->config().n_layers() == 2);
    REQUIRE(!log.empty());
    CHECK(log.back().accepted);
    const double cos = prune::collapse_detail::mean_cosine(prune::collapse_detail::logits_host(*out, ids, 2, 16), reference,
                                                           cfg.vocab);
    CHECK(cos == doctest::Approx(log.back().cosine).epsilon(1e-12));
    // The walk starts at the top: the first candidate is layer L - 1 - merge = 3.
    CHECK(log.front().layer == 3);
  }
  SUBCASE("an accepted merge equals the formula applied by hand") {
    prune::collapse_options o;
    o.threshold = -1.0;
    o.merge = 1;
    o.target_layers = 4;  // exactly one merge: layer 3 absorbs layer 4
    auto out = prune::layer_collapse(*net, ids, 2, 16, o);
    REQUIRE(out->config().n_layers() == 4);
    const auto p = prune::detail::host_params(*net);
    const auto q = prune::detail::host_params(*out);
    for (const auto& e : out->layout().entries()) {
      if (e.name.rfind("layers.3.", 0) != 0) continue;
      const auto& a = net->layout().find(e.name);
      const auto& b = net->layout().find("layers.4." + e.name.substr(9));
      for (index_t i = 0; i < e.shape.numel(); ++i) {
        const double want = p[static_cast<std::size_t>(a.offset + i)] +
                            (p[static_cast<std::size_t>(b.offset + i)] - p[static_cast<std::size_t>(a.offset + i)]);
        CHECK(q[static_cast<std::size_t>(e.offset + i)] == want);
      }
    }
  }
}

TEST_CASE("layer_collapse: every candidate's cosine equals PyTorch's merged model (tools/fixtures/prune_collapse.py)") {
  backend::cpu be;
  const auto dir = test::data_path("prune/collapse_llama");
  model::transformer<backend::cpu> net(be, checkpoint::read_hf_config(dir), dtype::f64);
  checkpoint::load_hf_weights(net, dir);
  test::fixture fx("prune/collapse_llama.lwfx");
  const auto ids64 = fx.ints("ids");
  const std::vector<std::int32_t> ids(ids64.begin(), ids64.end());
  const auto& d = fx.dims("ids");
  prune::collapse_options o;
  o.merge = fx.ints("merge")[0];
  o.threshold = 1.0;  // accept nothing: every candidate is a merge of the original model
  std::vector<prune::collapse_step> log;
  prune::layer_collapse(net, ids, d[0], d[1], o, &log);
  const auto candidates = fx.ints("candidates");
  const auto cosines = fx.f64("cosines");
  REQUIRE(log.size() == candidates.size());
  for (std::size_t i = 0; i < log.size(); ++i) {
    CAPTURE(i);
    CHECK(log[i].layer == candidates[i]);
    CHECK(log[i].merged == o.merge);
    CHECK(log[i].cosine == doctest::Approx(cosines[i]).epsilon(1e-12));
  }
  MESSAGE("layer-collapse candidate cosines: ", cosines[0], ", ", cosines[1]);
}

TEST_CASE("layer_collapse: bad input raises lwcl::error") {
  backend::cpu be;
  auto cfg = model::model_config::uniform(model::family::llama, 40, 16, 16, 3, 4, 2, 24);
  const auto ids = ids_for(cfg.vocab, 16);
  prune::collapse_options o;
  SUBCASE("layers of different shapes") {
    cfg.layers[1].ffn = 12;
    auto net = make(be, cfg);
    CHECK_THROWS_WITH_AS(prune::layer_collapse(*net, ids, 1, 16, o), doctest::Contains("merging needs uniform layers"),
                         lwcl::error);
  }
  SUBCASE("options out of range") {
    auto net = make(be, cfg);
    o.threshold = 1.5;
    CHECK_THROWS_WITH_AS(prune::layer_collapse(*net, ids, 1, 16, o), doctest::Contains("threshold 1.5 is outside [-1, 1]"),
                         lwcl::error);
    o = {};
    o.target_layers = 4;
    CHECK_THROWS_WITH_AS(prune::layer_collapse(*net, ids, 1, 16, o), doctest::Contains("target_layers 4 is outside [1, 3]"),
                         lwcl::error);
    o = {};
    CHECK_THROWS_WITH_AS(prune::layer_collapse(*net, ids, 2, 16, o), doctest::Contains("16 calibration ids for a batch of 2 x 16"),
                         lwcl::error);
  }
}

TEST_CASE("layer_collapse: kept_layers reads the step log into the layers each merged run starts from") {
  // Seven layers: 5 absorbs 6, a rejected step, then 2 absorbs 3 and 4.
  const std::vector<prune::collapse_step> log = {{5, 1, 0.95, true}, {4, 1, 0.5, false}, {2, 2, 0.93, true}};
  CHECK(prune::kept_layers(log, 7) == std::vector<index_t>{0, 1, 2, 5});
  CHECK(model::boundaries_of_kept_layers(prune::kept_layers(log, 7), 7) == std::vector<index_t>{0, 1, 2, 5, 7});
  CHECK(prune::kept_layers({}, 3) == std::vector<index_t>{0, 1, 2});
  CHECK_THROWS_WITH_AS(prune::kept_layers({{2, 2, 1.0, true}}, 4), doctest::Contains("merging 2 layers into layer 2 of 4"),
                       lwcl::error);
}
