// Calibration statistics and the structured-pruning criteria against an independent oracle:
// transformers runs the tiny gpt2 and llama (GQA) checkpoints in float64 with forward hooks, and NumPy
// recomputes every statistic and score (tools/fixtures/prune_scores.py). Also: random scores are
// deterministic per seed; bad input (foreign statistics, no tokens, ids outside the vocabulary) throws.
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/data/shards.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/policies/pruning/activation.hpp"
#include "lwcl/policies/pruning/block_influence.hpp"
#include "lwcl/policies/pruning/flap.hpp"
#include "lwcl/policies/pruning/magnitude.hpp"
#include "lwcl/policies/pruning/random.hpp"
#include "lwcl/policies/pruning/wanda_sp.hpp"
#include "lwcl/prune/allocate.hpp"
#include "lwcl/prune/stats.hpp"
#include "support/check.hpp"
#include "support/fixture.hpp"

using namespace lwcl;
namespace pp = lwcl::policies::pruning;

namespace {

// The oracle's calibration set: (batches, B, T) token ids.
struct calibration_set {
  std::vector<std::int32_t> ids;
  index_t batches, B, T;
};

calibration_set calibration_of(const test::fixture& fx) {
  const auto ids = fx.ints("ids");
  const auto& d = fx.dims("ids");
  return {std::vector<std::int32_t>(ids.begin(), ids.end()), d[0], d[1], d[2]};
}

std::string scores_file(const std::string& family) { return "prune/scores_" + family + ".lwfx"; }

// A model loaded from tests/data/hf/<family> with its statistics over the oracle's calibration set.
struct loaded {
  backend::cpu be;
  model::transformer<backend::cpu> net;
  test::fixture fx;
  prune::calibration_stats stats;

  loaded(const std::string& family, dtype t)
      : net(be, checkpoint::read_hf_config(test::data_path("hf/" + family)), t), fx(scores_file(family)) {
    checkpoint::load_hf_weights(net, test::data_path("hf/" + family));
    const auto cal = calibration_of(fx);
    stats = prune::collect_statistics(net, cal.ids, cal.B, cal.T);
  }
};

// Largest relative error of the statistics against the hooked ones, over every layer and quantity.
double stats_error(const loaded& m) {
  double worst = 0;
  for (std::size_t l = 0; l < m.stats.layers.size(); ++l) {
    const auto& s = m.stats.layers[l];
    const std::string p = "stats.l" + std::to_string(l) + ".";
    const std::pair<const char*, const prune::channel_stats*> channels[] = {
        {"attn_in", &s.attn_in}, {"o_in", &s.o_in}, {"mlp_in", &s.mlp_in}, {"proj_in", &s.proj_in}};
    for (const auto& entry : channels) {
      const std::string key = entry.first;
      const prune::channel_stats* c = entry.second;
      CAPTURE(key);
      CHECK(c->count == m.fx.ints("tokens")[0]);
      worst = std::max(worst, test::rel_error(c->sum, m.fx.f64(p + key + ".sum")));
      worst = std::max(worst, test::rel_error(c->sum_sq, m.fx.f64(p + key + ".sum_sq")));
      worst = std::max(worst, test::rel_error(c->sum_abs, m.fx.f64(p + key + ".sum_abs")));
    }
    worst = std::max(worst, test::rel_error(s.head_norm_sum, m.fx.f64(p + "head_norm_sum")));
    worst = std::max(worst, test::rel_error(std::vector<double>{s.cosine_sum}, m.fx.f64(p + "cosine_sum")));
    worst = std::max(worst, test::rel_error(s.o_in.means(), m.fx.f64(p + "o_in.mean")));
    worst = std::max(worst, test::rel_error(s.proj_in.means(), m.fx.f64(p + "proj_in.mean")));
  }
  return worst;
}

// Largest relative error of `got` against the oracle's scores named `name`, per field over all layers
// (each field relative to its own largest magnitude).
double scores_error(const prune::group_scores& got, const test::fixture& fx, const std::string& name) {
  std::vector<double> g[4], want[4];
  for (std::size_t l = 0; l < got.layers.size(); ++l) {
    const std::string p = "scores." + name + ".l" + std::to_string(l) + ".";
    const auto& s = got.layers[l];
    const std::vector<double>* fields[] = {&s.heads, &s.kv_groups, &s.ffn};
    const char* names[] = {"heads", "kv_groups", "ffn"};
    for (int f = 0; f < 3; ++f) {
      g[f].insert(g[f].end(), fields[f]->begin(), fields[f]->end());
      const auto w = fx.f64(p + names[f]);
      want[f].insert(want[f].end(), w.begin(), w.end());
    }
    g[3].push_back(s.layer);
    want[3].push_back(fx.scalar(p + "layer"));
  }
  double worst = 0;
  for (int f = 0; f < 4; ++f) worst = std::max(worst, test::rel_error(g[f], want[f]));
  return worst;
}

template <class Criterion>
double criterion_error(const loaded& m, const prune::scoring_input& in, const Criterion& c) {
  const prune::group_scores s = policies::score_groups(c, in);
  CHECK(s.criterion == std::string(Criterion::name));
  return scores_error(s, m.fx, std::string(Criterion::name));
}

}  // namespace

TEST_CASE("calibration statistics equal the statistics of transformers' hooked linear inputs") {
  for (const std::string family : {"gpt2", "llama"}) {
    CAPTURE(family);
    const loaded f64(family, dtype::f64);
    const double e64 = stats_error(f64);
    MESSAGE(family, " statistics, f64: ", e64);
    CHECK(e64 < 1e-9);
    // f32: every activation rounded to float before it is accumulated in double.
    const loaded f32(family, dtype::f32);
    const double e32 = stats_error(f32);
    MESSAGE(family, " statistics, f32: ", e32);
    CHECK(e32 < 1e-5);
    CHECK(f64.stats.tokens == f64.fx.ints("tokens")[0]);
    REQUIRE(f64.stats.layers.size() == f64.net.config().layers.size());
    CHECK(f64.stats.layers[0].head_norm_sum.size() == static_cast<std::size_t>(f64.net.config().layers[0].n_heads));
  }
}

TEST_CASE("every criterion's scores equal the NumPy oracle's") {
  for (const std::string family : {"gpt2", "llama"}) {
    for (dtype t : {dtype::f64, dtype::f32}) {
      CAPTURE(family);
      const std::string type(dtype_name(t));
      CAPTURE(type);
      const loaded m(family, t);
      const auto in = prune::make_scoring_input(m.net, m.stats);
      // f64: rounding only. f32: activations rounded to float (the weights were saved in float32, so
      // magnitude is exact either way); FLAP's variances are the most sensitive.
      const double bound = t == dtype::f64 ? 1e-9 : 1e-5;
      const std::tuple criteria{pp::magnitude_l1{}, pp::magnitude_l2{}, pp::wanda_sp{}, pp::wanda_sp_in_out{},
                                pp::flap{},         pp::flap_pooled{},   pp::activation{}, pp::block_influence{}};
      std::apply(
          [&](const auto&... c) {
            (
                [&] {
                  const double e = criterion_error(m, in, c);
                  MESSAGE(family, " ", dtype_name(t), " ", std::string(std::decay_t<decltype(c)>::name), ": ", e);
                  CHECK(e < bound);
                }(),
                ...);
          },
          criteria);
      // The authors' code squares the attention channels' fluctuations before standardising.
      const double sq = scores_error(policies::score_groups(pp::flap{.square_head_channels = true}, in), m.fx, "flap_squared");
      MESSAGE(family, " ", dtype_name(t), " flap (squared head channels): ", sq);
      CHECK(sq < bound);
      for (const char* name : {"random_a", "random_b"}) {
        const pp::random r{static_cast<std::uint64_t>(m.fx.ints(std::string(name) + ".seed")[0])};
        CHECK(scores_error(policies::score_groups(r, in), m.fx, name) == 0.0);
      }
    }
  }
}

TEST_CASE("FLAP's joint allocation keeps the heads and FFN channels the oracle's adaptive structure search keeps") {
  for (const std::string family : {"gpt2", "llama"}) {
    CAPTURE(family);
    const loaded m(family, dtype::f64);
    const auto scores = policies::score_groups(pp::flap{}, prune::make_scoring_input(m.net, m.stats));
    for (const int percent : {20, 50}) {
      CAPTURE(percent);
      prune::allocation a;
      a.global = a.joint = true;
      a.ratio = percent / 100.0;
      const auto plan = prune::allocate(m.net.config(), scores, a);
      std::size_t kept_kv = 0, kept_ffn = 0, kv = 0, ffn = 0;
      for (std::size_t l = 0; l < plan.layers.size(); ++l) {
        const std::string p = "plan.flap.r" + std::to_string(percent) + ".l" + std::to_string(l) + ".";
        const auto want_kv = m.fx.ints(p + "kv_keep"), want_ffn = m.fx.ints(p + "ffn_keep");
        CHECK(plan.layers[l].kv_heads == std::vector<index_t>(want_kv.begin(), want_kv.end()));
        CHECK(plan.layers[l].ffn == std::vector<index_t>(want_ffn.begin(), want_ffn.end()));
        kept_kv += plan.layers[l].kv_heads.size();
        kept_ffn += plan.layers[l].ffn.size();
        kv += static_cast<std::size_t>(m.net.config().layers[l].n_kv_heads);
        ffn += static_cast<std::size_t>(m.net.config().layers[l].ffn);
      }
      MESSAGE(family, " ratio ", percent, "%: kept ", kept_kv, " of ", kv, " KV groups, ", kept_ffn, " of ", ffn,
              " FFN channels");
      CHECK(kept_ffn < ffn);  // the plan removes something
    }
  }
}

TEST_CASE("block influence scores whole layers: any other granularity is refused") {
  const loaded m("llama", dtype::f64);
  const auto scores = policies::score_groups(pp::block_influence{}, prune::make_scoring_input(m.net, m.stats));
  prune::allocation a;
  a.ratio = 0.5;
  for (auto g : {prune::granularity::heads, prune::granularity::ffn, prune::granularity::heads_and_ffn}) {
    a.gran = g;
    CHECK_THROWS_WITH_AS(prune::allocate(m.net.config(), scores, a),
                         doctest::Contains("block_influence scores whole layers only"), lwcl::error);
  }
  a.gran = prune::granularity::layers;
  const auto plan = prune::allocate(m.net.config(), scores, a);
  REQUIRE(plan.layers.size() == 2);
  CHECK(plan.layers[0].removed != plan.layers[1].removed);  // one of the two layers goes
}

TEST_CASE("FLAP exposes each output-projection input channel's calibration mean") {
  const loaded m("llama", dtype::f64);
  const auto means = pp::flap::channel_means(prune::make_scoring_input(m.net, m.stats));
  REQUIRE(means.size() == 2);
  for (std::size_t l = 0; l < means.size(); ++l) {
    const std::string p = "stats.l" + std::to_string(l) + ".";
    CHECK(means[l].attn.size() == 48);
    CHECK(means[l].mlp.size() == 88);
    CHECK(test::rel_error(means[l].attn, m.fx.f64(p + "o_in.mean")) < 1e-9);
    CHECK(test::rel_error(means[l].mlp, m.fx.f64(p + "proj_in.mean")) < 1e-9);
  }
}

TEST_CASE("random scores are deterministic per seed, differ across seeds and lie in [0, 1)") {
  backend::cpu be;
  auto cfg = model::model_config::uniform(model::family::llama, 64, 32, 48, 3, 6, 2, 88);
  cfg.head_dim = 8;
  cfg.layers[1] = {3, 1, 40};  // uneven, as a pruned student
  model::transformer<backend::cpu> net(be, cfg);
  const auto in = prune::make_scoring_input(net);
  const auto a = policies::score_groups(pp::random{1}, in), b = policies::score_groups(pp::random{1}, in);
  const auto c = policies::score_groups(pp::random{2}, in);
  std::size_t same = 0, total = 0;
  for (std::size_t l = 0; l < cfg.layers.size(); ++l) {
    CHECK(a.layers[l].heads == b.layers[l].heads);
    CHECK(a.layers[l].kv_groups == b.layers[l].kv_groups);
    CHECK(a.layers[l].ffn == b.layers[l].ffn);
    CHECK(a.layers[l].layer == b.layers[l].layer);
    for (const auto* v : {&a.layers[l].heads, &a.layers[l].kv_groups, &a.layers[l].ffn})
      for (double x : *v) CHECK((x >= 0.0 && x < 1.0));
    for (std::size_t j = 0; j < a.layers[l].ffn.size(); ++j) {
      same += a.layers[l].ffn[j] == c.layers[l].ffn[j];
      ++total;
    }
  }
  CHECK(total == 88 + 40 + 88);
  CHECK(same == 0);
  CHECK(a.layers[0].layer != c.layers[0].layer);
}

TEST_CASE("criteria fill every group of a heterogeneous model, with or without statistics") {
  backend::cpu be;
  auto cfg = model::model_config::uniform(model::family::qwen2, 64, 32, 48, 2, 6, 2, 40);
  cfg.head_dim = 8;
  cfg.layers[1] = {4, 2, 24};
  model::transformer<backend::cpu> net(be, cfg, dtype::f64);
  net.init(5);
  std::vector<std::int32_t> ids(2 * 8);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 7 + 3) % 64);
  const auto in = prune::make_scoring_input(net, prune::collect_statistics(net, ids, 2, 8));
  auto sizes_ok = [&](const prune::group_scores& s) {
    REQUIRE(s.layers.size() == 2);
    CHECK(s.layers[1].heads.size() == 4);
    CHECK(s.layers[1].kv_groups.size() == 2);
    CHECK(s.layers[1].ffn.size() == 24);
  };
  sizes_ok(policies::score_groups(pp::magnitude_l2{}, in));
  sizes_ok(policies::score_groups(pp::wanda_sp{}, in));
  sizes_ok(policies::score_groups(pp::wanda_sp_in_out{}, in));
  sizes_ok(policies::score_groups(pp::flap{}, in));
  sizes_ok(policies::score_groups(pp::flap_pooled{}, in));
  sizes_ok(policies::score_groups(pp::activation{}, in));
  sizes_ok(policies::score_groups(pp::block_influence{}, in));
  // Block influence copies its layer score to every group of the layer.
  const auto bi = policies::score_groups(pp::block_influence{}, in);
  for (double x : bi.layers[1].ffn) CHECK(x == bi.layers[1].layer);
  // Magnitude reads weights only: no statistics needed.
  sizes_ok(policies::score_groups(pp::magnitude_l1{}, prune::make_scoring_input(net)));
}

TEST_CASE("statistics over a batch_loader equal those over the same token ids") {
  namespace fs = std::filesystem;
  backend::cpu be;
  model::transformer<backend::cpu> net(be, checkpoint::read_hf_config(test::data_path("hf/llama")), dtype::f64);
  checkpoint::load_hf_weights(net, test::data_path("hf/llama"));
  std::vector<std::int32_t> corpus(500);
  for (std::size_t i = 0; i < corpus.size(); ++i) corpus[i] = static_cast<std::int32_t>((i * 37 + i / 7) % 64);
  const auto path = (fs::temp_directory_path() / ("lwcl_prune_" + std::to_string(::getpid()) + ".tok")).string();
  data::write_shard(path, corpus, 64);
  {
    const data::shard shard(path);
    const data::batch_loader loader(shard, 2, 10, 3);
    const auto from_loader = prune::collect_statistics(net, loader, 2, 10, 4);
    std::vector<std::int32_t> ids, targets, all;
    for (std::uint64_t k = 0; k < 4; ++k) {
      loader.batch(k, ids, targets);
      all.insert(all.end(), ids.begin(), ids.end());
    }
    const auto from_ids = prune::collect_statistics(net, all, 2, 10);
    CHECK(from_loader.tokens == 80);
    for (std::size_t l = 0; l < 2; ++l) {
      CHECK(from_loader.layers[l].proj_in.sum_sq == from_ids.layers[l].proj_in.sum_sq);
      CHECK(from_loader.layers[l].head_norm_sum == from_ids.layers[l].head_norm_sum);
      CHECK(from_loader.layers[l].cosine_sum == from_ids.layers[l].cosine_sum);
    }
    CHECK_THROWS_WITH_AS(prune::collect_statistics(net, loader, 2, 12, 4),
                         doctest::Contains("the loader's batches hold 20 tokens, expected 2 x 12"), lwcl::error);
    CHECK_THROWS_WITH_AS(prune::collect_statistics(net, loader, 2, 10, 0), doctest::Contains("the calibration set is empty"),
                         lwcl::error);
  }
  fs::remove(path);
}

// Near misses of the concept (a named namespace: clang flags unused constants in an unnamed one).
namespace criterion_near_misses {

struct no_name {
  static constexpr bool needs_statistics = false;
  static constexpr bool needs_gradients = false;
  prune::group_scores score(const prune::scoring_input&) const { return {}; }
};
struct runtime_flag {
  static constexpr std::string_view name = "runtime_flag";
  inline static bool needs_statistics = false;  // not a constant expression
  static constexpr bool needs_gradients = false;
  prune::group_scores score(const prune::scoring_input&) const { return {}; }
};
struct wrong_result {
  static constexpr std::string_view name = "wrong_result";
  static constexpr bool needs_statistics = false;
  static constexpr bool needs_gradients = false;
  std::vector<double> score(const prune::scoring_input&) const { return {}; }
};

}  // namespace criterion_near_misses

TEST_CASE("the criteria are pruning_criterion policies; other types are not") {
  static_assert(policies::pruning_criterion<pp::random>);
  static_assert(policies::pruning_criterion<pp::magnitude_l1> && policies::pruning_criterion<pp::magnitude_l2>);
  static_assert(policies::pruning_criterion<pp::wanda_sp> && policies::pruning_criterion<pp::flap>);
  static_assert(policies::pruning_criterion<pp::activation> && policies::pruning_criterion<pp::block_influence>);
  static_assert(!policies::pruning_criterion<int>);
  static_assert(!policies::pruning_criterion<criterion_near_misses::no_name>);
  static_assert(!policies::pruning_criterion<criterion_near_misses::runtime_flag>);
  static_assert(!policies::pruning_criterion<criterion_near_misses::wrong_result>);
  static_assert(pp::wanda_sp::needs_statistics && !pp::magnitude_l1::needs_statistics && !pp::random::needs_statistics);
  static_assert(!pp::flap::needs_gradients && !pp::activation::needs_gradients && !pp::block_influence::needs_gradients);
  CHECK(pp::magnitude_l1::name == "magnitude_l1");
  CHECK(pp::magnitude_l2::name == "magnitude_l2");
}

TEST_CASE("bad calibration input raises lwcl::error naming the problem") {
  backend::cpu be;
  const auto cfg = checkpoint::read_hf_config(test::data_path("hf/gpt2"));
  model::transformer<backend::cpu> net(be, cfg);
  checkpoint::load_hf_weights(net, test::data_path("hf/gpt2"));
  std::vector<std::int32_t> ids(2 * 8, 5);

  SUBCASE("an empty calibration set") {
    CHECK_THROWS_WITH_AS(prune::collect_statistics(net, std::vector<std::int32_t>{}, 2, 8),
                         doctest::Contains("the calibration set is empty"), lwcl::error);
    prune::calibration_pass<backend::cpu> pass(net);
    CHECK_THROWS_WITH_AS(pass.stats(), doctest::Contains("the calibration set is empty"), lwcl::error);
    // Statistics that hold no tokens cannot feed a criterion either.
    CHECK_THROWS_WITH_AS(prune::make_scoring_input(net, prune::calibration_stats{}),
                         doctest::Contains("hold no tokens"), lwcl::error);
  }
  SUBCASE("token ids outside the vocabulary") {
    ids[11] = static_cast<std::int32_t>(cfg.vocab);
    CHECK_THROWS_WITH_AS(prune::collect_statistics(net, ids, 2, 8),
                         doctest::Contains("token id 64 at tokens[1, 3] is outside the vocabulary [0, 64)"), lwcl::error);
    ids[11] = -1;
    CHECK_THROWS_WITH_AS(prune::collect_statistics(net, ids, 2, 8), doctest::Contains("outside the vocabulary"), lwcl::error);
  }
  SUBCASE("token counts that do not form (B, T) batches, or sequences longer than the model's") {
    ids.push_back(1);
    CHECK_THROWS_WITH_AS(prune::collect_statistics(net, ids, 2, 8),
                         doctest::Contains("17 token ids do not split into batches of 2 x 8"), lwcl::error);
    std::vector<std::int32_t> long_ids(static_cast<std::size_t>(cfg.max_seq + 1), 1);
    CHECK_THROWS_WITH_AS(prune::collect_statistics(net, long_ids, 1, cfg.max_seq + 1),
                         doctest::Contains("exceeds the model's max_seq 16"), lwcl::error);
    CHECK_THROWS_WITH_AS(prune::collect_statistics(net, ids, 0, 8), doctest::Contains("must be positive"), lwcl::error);
  }
  SUBCASE("statistics gathered on a model of another shape") {
    const auto stats = prune::collect_statistics(net, ids, 2, 8);
    auto narrower = cfg;
    narrower.layers[1].ffn = 64;
    model::transformer<backend::cpu> other(be, narrower);
    CHECK_THROWS_WITH_AS(prune::make_scoring_input(other, stats),
                         doctest::Contains("the calibration statistics were gathered on a model of shape [gpt2 d_model 32, "
                                           "head_dim 8, layers (heads/kv/ffn) 4/4/128 4/4/128], expected one of shape "
                                           "[gpt2 d_model 32, head_dim 8, layers (heads/kv/ffn) 4/4/128 4/4/64]"),
                         lwcl::error);
    // A scoring input assembled by hand is checked when a criterion reads it.
    auto in = prune::make_scoring_input(other);
    in.stats = stats;
    CHECK_THROWS_WITH_AS(pp::wanda_sp{}.score(in), doctest::Contains("pruning criterion wanda_sp: the calibration statistics"),
                         lwcl::error);
    CHECK_THROWS_WITH_AS(policies::score_groups(pp::flap{}, in), doctest::Contains("pruning criterion flap"), lwcl::error);
  }
  SUBCASE("a criterion that needs statistics, given none") {
    const auto in = prune::make_scoring_input(net);
    for (auto run : {+[](const prune::scoring_input& i) { return policies::score_groups(pp::wanda_sp{}, i); },
                     +[](const prune::scoring_input& i) { return policies::score_groups(pp::activation{}, i); },
                     +[](const prune::scoring_input& i) { return policies::score_groups(pp::block_influence{}, i); }})
      CHECK_THROWS_WITH_AS(run(in), doctest::Contains("needs calibration statistics; the scoring input has none"), lwcl::error);
  }
}
