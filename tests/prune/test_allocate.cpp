// Allocation (prune/allocate.hpp): uniform, global and joint rankings pick the lowest-scored groups, GQA
// groups go whole or keep equal query heads per group, guards keep every layer usable, and bad
// ratios are refused with lwcl::error. allocate(be, ...) ranks with the backend's rank_descending when
// it has one and gives the plan of the host ranking.
#include <doctest/doctest.h>

#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/prune/allocate.hpp"

using namespace lwcl;

namespace {

// 2 layers, 8 query heads / 2 KV heads, FFN 6.
model::model_config gqa() { return model::model_config::uniform(model::family::llama, 50, 32, 32, 2, 8, 2, 6); }

prune::group_scores scores_for(const model::model_config& cfg) {
  prune::group_scores s;
  s.layers.resize(cfg.layers.size());
  s.layers[0].heads = {5, 1, 7, 3, 2, 8, 4, 6};
  s.layers[0].kv_groups = {1.0, 2.0};
  s.layers[0].ffn = {0.3, 0.1, 0.9, 0.5, 0.2, 0.8};
  s.layers[0].layer = 3;
  s.layers[1].heads = {1, 2, 3, 4, 9, 8, 7, 6};
  s.layers[1].kv_groups = {5.0, 0.5};
  s.layers[1].ffn = {4, 5, 6, 0.01, 0.02, 0.03};
  s.layers[1].layer = 1;
  return s;
}

// A backend with its own ranking: selection of the largest remaining key, the first of equal keys,
// written independently of detail::host_rank; declares it (ops/fused.hpp) and counts its calls.
struct ranking_backend {
  static constexpr bool device_ranking = true;
  int calls = 0;
  void rank_descending(index_t* order, const double* keys, index_t n) {
    ++calls;
    std::vector<char> taken(static_cast<std::size_t>(n), 0);
    for (index_t k = 0; k < n; ++k) {
      index_t best = -1;
      for (index_t i = 0; i < n; ++i)
        if (!taken[static_cast<std::size_t>(i)] && (best < 0 || keys[i] > keys[best])) best = i;
      taken[static_cast<std::size_t>(best)] = 1;
      order[k] = best;
    }
  }
};

bool same_plan(const prune::prune_plan& x, const prune::prune_plan& y) {
  if (x.layers.size() != y.layers.size()) return false;
  for (std::size_t l = 0; l < x.layers.size(); ++l) {
    const auto &a = x.layers[l], &b = y.layers[l];
    if (a.heads != b.heads || a.kv_heads != b.kv_heads || a.ffn != b.ffn || a.removed != b.removed) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("the host ranker orders by descending key, equal keys (+0.0 and -0.0 too) by ascending index") {
  const std::vector<double> keys = {0.0, 2.0, -0.0, 2.0, -1.0, 0.0, 3.0};
  std::vector<index_t> order(keys.size());
  prune::detail::host_rank{}(order.data(), keys.data(), static_cast<index_t>(keys.size()));
  CHECK(order == std::vector<index_t>{6, 1, 3, 0, 2, 5, 4});
  ranking_backend be;
  std::vector<index_t> other(keys.size());
  be.rank_descending(other.data(), keys.data(), static_cast<index_t>(keys.size()));
  CHECK(other == order);
}

TEST_CASE("allocate(be, ...) ranks with the backend's rank_descending and gives the host plan") {
  auto cfg = gqa();
  cfg.layers.resize(3, cfg.layers[0]);
  // Many ties, within and across layers, and signed zeros.
  prune::group_scores s;
  s.layers.resize(3);
  s.layers[0] = {{1, 0, 1, 0, -0.0, 2, 2, 0}, {0.5, 0.5}, {0.0, 1, -0.0, 1, 0.0, 1}, 0.0};
  s.layers[1] = {{2, 2, 2, 2, 1, 1, 1, 1}, {0.5, -0.0}, {1, 1, 0.0, 0.0, 1, -0.0}, -0.0};
  s.layers[2] = {{0, 0, 0, 0, 0, 0, 0, 0}, {0.0, 0.5}, {-0.0, -0.0, 1, 1, 0.0, 0.5}, 0.0};
  backend::cpu host;  // no rank_descending: the host ranking
  for (const auto gran : {prune::granularity::heads_and_ffn, prune::granularity::heads, prune::granularity::layers}) {
    for (const bool global : {false, true}) {
      for (const auto mode : {prune::head_mode::kv_groups, prune::head_mode::query_heads}) {
        if (global && mode == prune::head_mode::query_heads) continue;
        for (const double ratio : {0.25, 0.5}) {
          CAPTURE(prune::granularity_name(gran));
          CAPTURE(global);
          CAPTURE(static_cast<int>(mode));
          CAPTURE(ratio);
          prune::allocation a;
          a.gran = gran;
          a.global = global;
          a.heads = mode;
          a.ratio = ratio;
          const auto want = prune::allocate(cfg, s, a);
          ranking_backend be;
          CHECK(same_plan(prune::allocate(be, cfg, s, a), want));
          CHECK(be.calls > 0);
          CHECK(same_plan(prune::allocate(host, cfg, s, a), want));
        }
      }
    }
  }
}

TEST_CASE("uniform allocation removes the lowest-scored groups of every layer") {
  const auto cfg = gqa();
  const auto s = scores_for(cfg);
  prune::allocation a;
  a.ratio = 0.5;
  const auto p = prune::allocate(cfg, s, a);
  prune::validate_plan(cfg, p);
  CHECK(p.layers[0].kv_heads == std::vector<index_t>{1});
  CHECK(p.layers[0].heads == std::vector<index_t>{4, 5, 6, 7});
  CHECK(p.layers[0].ffn == std::vector<index_t>{2, 3, 5});
  CHECK(p.layers[1].kv_heads == std::vector<index_t>{0});
  CHECK(p.layers[1].heads == std::vector<index_t>{0, 1, 2, 3});
  CHECK(p.layers[1].ffn == std::vector<index_t>{0, 1, 2});
  // The resulting model: half the heads and channels in every layer.
  const auto pc = prune::pruned_config(cfg, p);
  CHECK(pc.layers[0].n_heads == 4);
  CHECK(pc.layers[0].n_kv_heads == 1);
  CHECK(pc.layers[1].ffn == 3);
}

TEST_CASE("query_heads mode keeps every KV group and the same number of query heads in each") {
  const auto cfg = gqa();
  prune::allocation a;
  a.gran = prune::granularity::heads;
  a.heads = prune::head_mode::query_heads;
  a.ratio = 0.5;
  const auto p = prune::allocate(cfg, scores_for(cfg), a);
  prune::validate_plan(cfg, p);
  CHECK(p.layers[0].kv_heads == std::vector<index_t>{0, 1});
  CHECK(p.layers[0].heads == std::vector<index_t>{0, 2, 5, 7});  // group 0: scores 5,1,7,3; group 1: 2,8,4,6
  CHECK(p.layers[1].heads == std::vector<index_t>{2, 3, 4, 5});
  CHECK(p.layers[0].ffn.size() == 6);  // heads only
}

TEST_CASE("global allocation ranks across layers and keeps one group per layer") {
  const auto cfg = gqa();
  prune::allocation a;
  a.gran = prune::granularity::ffn;
  a.global = true;
  a.ratio = 0.5;  // 6 of 12 channels: layer 1's three tiny ones, then layer 0's 0.1, 0.2, 0.3
  auto p = prune::allocate(cfg, scores_for(cfg), a);
  CHECK(p.layers[0].ffn == std::vector<index_t>{2, 3, 5});
  CHECK(p.layers[1].ffn == std::vector<index_t>{0, 1, 2});
  // Heads: KV groups scored 1, 2 | 5, 0.5; removing 2 of 4 takes layer 1's group 1 and layer 0's group 0.
  a.gran = prune::granularity::heads;
  p = prune::allocate(cfg, scores_for(cfg), a);
  CHECK(p.layers[0].kv_heads == std::vector<index_t>{1});
  CHECK(p.layers[1].kv_heads == std::vector<index_t>{0});
  // Guard: 0.75 of the groups would empty layer 0 (scores 1 and 2 are the lowest after 0.5); it keeps one.
  a.ratio = 0.75;
  p = prune::allocate(cfg, scores_for(cfg), a);
  prune::validate_plan(cfg, p);
  CHECK(p.layers[0].kv_heads.size() == 1);
  CHECK(p.layers[1].kv_heads.size() == 1);
}

TEST_CASE("the joint allocation ranks KV groups and FFN channels together, weighted by the parameters each removes") {
  const auto cfg = gqa();  // llama, C = 32, D = 4, 4 query heads per KV group
  const auto cost = prune::group_costs_of(cfg, cfg.layers[0]);
  CHECK(cost.kv_group == (2 * 4 + 2) * 4 * 32);  // 4 q rows and 4 o columns of 4 x 32, a k and a v block
  CHECK(cost.ffn_channel == 3 * 32);             // gate row, up row, down column
  prune::allocation a;
  a.global = a.joint = true;
  // Ranked: 6 (L1 ffn 2), 5 (L1 kv 0), 5 (L1 ffn 1), 4 (L1 ffn 0), 2 (L0 kv 1), 1 (L0 kv 0), 0.9 (L0 ffn 2),
  // 0.8 (L0 ffn 5), ...; cumulative 96, 1376, 1472, 1568, 2848, 4128, 4224, 4320, 5600, ... of 6272.
  // At ratio 0.3 the target is 4390.4, nearest at 0.8 (4320): the seven groups ranked above it stay.
  a.ratio = 0.3;
  auto p = prune::allocate(cfg, scores_for(cfg), a);
  CHECK(p.layers[0].kv_heads == std::vector<index_t>{0, 1});
  CHECK(p.layers[0].ffn == std::vector<index_t>{2});
  CHECK(p.layers[1].kv_heads == std::vector<index_t>{0});
  CHECK(p.layers[1].heads == std::vector<index_t>{0, 1, 2, 3});
  CHECK(p.layers[1].ffn == std::vector<index_t>{0, 1, 2});
  // At 0.9 (target 627.2) the nearest is the first group: nothing ranks above it, and the guards give
  // each layer back its best KV group and FFN channel.
  a.ratio = 0.9;
  p = prune::allocate(cfg, scores_for(cfg), a);
  prune::validate_plan(cfg, p);
  CHECK(p.layers[0].kv_heads == std::vector<index_t>{1});
  CHECK(p.layers[0].ffn == std::vector<index_t>{2});
  CHECK(p.layers[1].kv_heads == std::vector<index_t>{0});
  CHECK(p.layers[1].ffn == std::vector<index_t>{2});
  a.ratio = 0;
  p = prune::allocate(cfg, scores_for(cfg), a);
  CHECK(p.layers[0].ffn.size() == 6);
  CHECK(p.layers[1].kv_heads.size() == 2);
  // The joint ranking is a global one over heads and FFN channels together.
  a.ratio = 0.3;
  a.global = false;
  CHECK_THROWS_WITH_AS(prune::allocate(cfg, scores_for(cfg), a), doctest::Contains("needs the global allocation"),
                       lwcl::error);
  a.global = true;
  a.gran = prune::granularity::ffn;
  CHECK_THROWS_WITH_AS(prune::allocate(cfg, scores_for(cfg), a), doctest::Contains("granularity heads_and_ffn, got global and ffn"),
                       lwcl::error);
}

TEST_CASE("layer granularity removes the lowest-scored layers") {
  auto cfg = gqa();
  cfg.layers.resize(4, cfg.layers[0]);
  auto s = scores_for(gqa());
  s.layers.resize(4);
  s.layers[2].layer = 0.5;
  s.layers[3].layer = 2;
  prune::allocation a;
  a.gran = prune::granularity::layers;
  a.ratio = 0.5;
  const auto p = prune::allocate(cfg, s, a);
  CHECK(!p.layers[0].removed);
  CHECK(p.layers[1].removed);
  CHECK(p.layers[2].removed);
  CHECK(!p.layers[3].removed);
  CHECK(prune::pruned_config(cfg, p).n_layers() == 2);
}

TEST_CASE("bad allocations raise lwcl::error") {
  const auto cfg = gqa();
  const auto s = scores_for(cfg);
  prune::allocation a;
  SUBCASE("ratio outside [0, 1)") {
    for (double r : {-0.1, 1.0, 1.5}) {
      a.ratio = r;
      CHECK_THROWS_WITH_AS(prune::allocate(cfg, s, a), doctest::Contains("is outside [0, 1)"), lwcl::error);
    }
  }
  SUBCASE("a per-layer ratio that leaves a layer without KV groups") {
    a.ratio = 0.8;  // round(0.8 * 2) = 2 of 2 KV groups
    CHECK_THROWS_WITH_AS(prune::allocate(cfg, s, a), doctest::Contains("would leave layer 0 with no KV group"), lwcl::error);
  }
  SUBCASE("scores of the wrong size, or not finite") {
    auto bad = s;
    bad.layers[1].ffn.pop_back();
    CHECK_THROWS_WITH_AS(prune::allocate(cfg, bad, a), doctest::Contains("layer 1 has 5 FFN-channel scores, expected 6"),
                         lwcl::error);
    bad = s;
    bad.layers[0].kv_groups[0] = std::nan("");
    CHECK_THROWS_WITH_AS(prune::allocate(cfg, bad, a), doctest::Contains("non-finite KV-group score"), lwcl::error);
  }
  SUBCASE("global ranking with query_heads mode") {
    a.global = true;
    a.heads = prune::head_mode::query_heads;
    CHECK_THROWS_WITH_AS(prune::allocate(cfg, s, a), doctest::Contains("query_heads mode needs the uniform allocation"),
                         lwcl::error);
  }
}
