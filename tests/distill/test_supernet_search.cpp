// distill::search_supernet and export_subnet (the layer-wise joint width x bits search): the latency
// term steers the choices (a tight target with a heavy weight gives a faster subnet than no latency
// term, and no faster than the space's fastest candidate); the export is the chosen subnet (its
// structure and parameter count follow the chosen widths, its bits per weight the chosen bits); a space
// of the teacher's own width at 32 bits is the teacher's block (no loss) and exports its weights
// unchanged; bad input fails clearly.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/rng.hpp"
#include "lwcl/distill/supernet_search.hpp"
#include "lwcl/model/host_params.hpp"
#include "lwcl/prune/plan.hpp"

using namespace lwcl;

namespace {

using net_t = model::transformer<backend::cpu>;

// A llama of two layers (width 128, 4 heads over 2 KV groups, FFN 128) with random token batches.
struct search_setup {
  backend::cpu be;
  model::model_config cfg = model::model_config::uniform(model::family::llama, 64, 16, 128, 2, 4, 2, 128);
  net_t teacher{be, cfg, dtype::f32};
  index_t B = 2, T = 16;
  std::vector<std::vector<std::int32_t>> batches;

  search_setup() {
    teacher.init(3);
    philox_stream s{11, 0};
    for (int b = 0; b < 3; ++b) {
      std::vector<std::int32_t> ids(static_cast<std::size_t>(B * T));
      for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>(s.bits(b * 1000 + i) % 64);
      batches.push_back(ids);
    }
  }
};

// A latency model of a linear's weight bytes: rows x cols x weight bits, with 8-bit inputs a little faster.
double fake_latency(index_t rows, index_t cols, int wb, int ab) {
  return 1e-9 * static_cast<double>(rows * cols) * wb / 32.0 * (ab == 8 ? 0.9 : 1.0);
}

search::supernet_space joint_space() {
  search::supernet_space sp;
  sp.kv_groups = {2, 1};
  sp.ffn = {128, 64, 32};
  return sp;
}

distill::supernet_search_options few_steps(double lambda) {
  distill::supernet_search_options o;
  o.steps = 24;
  o.finetune = 4;
  o.lr = 1e-3;
  o.lambda = lambda;
  o.noise_seed = 7;
  o.log = nullptr;
  return o;
}

}  // namespace

TEST_CASE("search_supernet: the latency term steers the choices, and the export is the chosen subnet") {
  search_setup su;
  const auto sp = joint_space();
  double full = 0, fastest = 0;  // per-layer latency of the teacher's width at 32 bits, and of the space's fastest
  for (const auto& [n, rows, cols] : quant::block_linears(su.cfg, 0)) full += fake_latency(rows, cols, 32, 32);
  {
    // The fastest candidate: one KV group, FFN 32, 4-bit weights, 8-bit inputs; its linears' shapes from
    // the pruned config.
    prune::prune_plan plan = prune::keep_all(su.cfg);
    for (auto& l : plan.layers) {
      l.kv_heads = {0};
      l.heads = {0, 1};
      l.ffn.clear();
      for (index_t j = 0; j < 32; ++j) l.ffn.push_back(j);
    }
    const auto small = prune::pruned_config(su.cfg, plan);
    for (const auto& [n, rows, cols] : quant::block_linears(small, 0)) fastest += fake_latency(rows, cols, 4, 8);
  }
  const std::vector<double> tight(2, 0.05 * full);
  const auto loose = distill::search_supernet(su.be, su.teacher, sp, su.batches, su.B, su.T, fake_latency, tight,
                                              few_steps(0.0));
  const auto pulled = distill::search_supernet(su.be, su.teacher, sp, su.batches, su.B, su.T, fake_latency, tight,
                                               few_steps(20.0));
  REQUIRE(pulled.choices.size() == 2);
  REQUIRE(pulled.plans.size() == 2);
  CHECK(pulled.predicted_linear_seconds < loose.predicted_linear_seconds);
  CHECK(pulled.predicted_linear_seconds >= 2 * fastest * (1 - 1e-9));
  CHECK(loose.predicted_linear_seconds <= 2 * full * (1 + 1e-9));
  CHECK(pulled.resident_bytes > 0);
  CHECK(std::isfinite(pulled.final_loss));
  CHECK(pulled.params.size() == model::host_params(su.teacher).size());

  // The export: widths as chosen, bits as chosen.
  const auto e = distill::export_subnet(su.be, su.cfg, pulled, su.batches, su.B, su.T, sp.group);
  for (index_t l = 0; l < 2; ++l) {
    const auto& c = pulled.choices[static_cast<std::size_t>(l)];
    CHECK(e.net->config().layers[static_cast<std::size_t>(l)].n_kv_heads == c.kv_groups);
    CHECK(e.net->config().layers[static_cast<std::size_t>(l)].ffn == c.ffn);
  }
  prune::prune_plan chosen;
  chosen.layers = pulled.plans;
  CHECK(e.net->num_parameters() == prune::model_parameters(prune::pruned_config(su.cfg, chosen)));
  CHECK(e.bits_per_weight >= 4.0);
  CHECK(e.bits_per_weight <= 32.0);
  int quantised = 0, act8 = 0;
  for (const auto& c : pulled.choices) {
    for (const auto& [n, b] : c.weight_bits) quantised += b < 32;
    for (const auto& [s, b] : c.act_bits) act8 += b == 8;
  }
  CHECK(static_cast<int>(e.names.size()) == quantised);
  CHECK(static_cast<int>(e.hook.sites.size()) == act8);
  if (quantised > 0) CHECK(e.bits_per_weight < 32.0);
}

TEST_CASE("search_supernet: a space of the teacher's own width at 32 bits is the teacher, and exports it unchanged") {
  search_setup su;
  search::supernet_space sp;
  sp.kv_groups = {2};
  sp.ffn = {128};
  sp.weight_bits = {32};
  sp.act_bits = {32};
  const std::vector<double> targets(2, 1.0);
  const auto r = distill::search_supernet(su.be, su.teacher, sp, su.batches, su.B, su.T, fake_latency, targets,
                                          few_steps(1.0));
  const auto e = distill::export_subnet(su.be, su.cfg, r, su.batches, su.B, su.T, sp.group);
  CHECK(model::host_params(*e.net) == r.params);
  // Its only candidate is the teacher's own block, which reproduces the teacher's features: nothing to learn.
  CHECK(r.final_loss < 1e-8);
  CHECK(r.params == model::host_params(su.teacher));
  CHECK(e.names.empty());
  CHECK(e.hook.sites.empty());
  CHECK(e.bits_per_weight == 32.0);
}

TEST_CASE("search_supernet: bad input fails clearly") {
  search_setup su;
  const auto sp = joint_space();
  CHECK_THROWS_WITH_AS(distill::search_supernet(su.be, su.teacher, sp, su.batches, su.B, su.T, fake_latency,
                                                std::vector<double>(3, 1.0), few_steps(1.0)),
                       doctest::Contains("3 layer targets for 2 layers"), lwcl::error);
  CHECK_THROWS_WITH_AS(distill::search_supernet(su.be, su.teacher, sp, {}, su.B, su.T, fake_latency,
                                                std::vector<double>(2, 1.0), few_steps(1.0)),
                       doctest::Contains("no feature batches"), lwcl::error);
  auto bad = sp;
  bad.ffn = {100};  // not a multiple of the quantisation group
  CHECK_THROWS_AS(distill::search_supernet(su.be, su.teacher, bad, su.batches, su.B, su.T, fake_latency,
                                           std::vector<double>(2, 1.0), few_steps(1.0)),
                  lwcl::error);
}
