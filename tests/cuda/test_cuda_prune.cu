// Calibration statistics for pruning on backend::cuda against backend::host: the same weights and
// batches give the same channel moments, head norms and block cosines (the sums are folded by the same
// functors, in double, on both), and the same per-block local-loss gradients (Taylor criteria). The
// device ranking (cuda::rank_descending, a radix sort) orders exactly as std::stable_sort does, so
// prune::allocate gives the same plan with and without the backend.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "lwcl/backend/cuda/cuda.cuh"
#include "lwcl/backend/host/host.hpp"
#include "lwcl/model/host_params.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/prune/allocate.hpp"
#include "lwcl/prune/local_gradients.hpp"
#include "lwcl/prune/stats.hpp"
#include "support/check.hpp"

using namespace lwcl;
using lwcl::test::rel_error;

namespace {

std::vector<double> flatten(const prune::calibration_stats& s) {
  std::vector<double> out;
  for (const auto& l : s.layers) {
    for (const prune::channel_stats* c : {&l.attn_in, &l.o_in, &l.mlp_in, &l.proj_in})
      for (const auto* v : {&c->sum, &c->sum_sq, &c->sum_abs}) out.insert(out.end(), v->begin(), v->end());
    out.insert(out.end(), l.head_norm_sum.begin(), l.head_norm_sum.end());
    out.push_back(l.cosine_sum);
  }
  return out;
}

// n keys with many ties: most from 9 values (+0.0 and -0.0 among them), the rest distinct.
std::vector<double> tied_keys(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  const double common[] = {-2.5, -1.0, -0.0, 0.0, 0.0, 0.5, 1.0, 3.25, 1e300};
  std::vector<double> k(n);
  for (auto& v : k) {
    const std::uint64_t r = gen();
    v = r % 4 == 0 ? static_cast<double>(static_cast<std::int64_t>(r >> 11)) * 0x1p-40 - 2048.0 : common[(r >> 2) % 9];
  }
  return k;
}

std::vector<index_t> stable_rank(const std::vector<double>& k) {
  std::vector<index_t> order(k.size());
  std::iota(order.begin(), order.end(), index_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](index_t a, index_t b) { return k[static_cast<std::size_t>(a)] > k[static_cast<std::size_t>(b)]; });
  return order;
}

bool same_plan(const prune::prune_plan& x, const prune::prune_plan& y) {
  if (x.layers.size() != y.layers.size()) return false;
  for (std::size_t l = 0; l < x.layers.size(); ++l) {
    const auto &a = x.layers[l], &b = y.layers[l];
    if (a.heads != b.heads || a.kv_heads != b.kv_heads || a.ffn != b.ffn || a.removed != b.removed) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("cuda: rank_descending orders as std::stable_sort by descending key (ties, signed zeros)") {
  backend::cuda gpu;
  for (const std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{1000}, std::size_t{100003}}) {
    CAPTURE(n);
    const auto keys = tied_keys(n, 17 + n);
    std::vector<index_t> order(n, -1);
    gpu.rank_descending(order.data(), keys.data(), static_cast<index_t>(n));
    CHECK(order == stable_rank(keys));
  }
  // Two keys that tie only as +0.0 == -0.0: ascending index either way round.
  for (const auto& keys : {std::vector<double>{-0.0, 0.0}, std::vector<double>{0.0, -0.0}}) {
    std::vector<index_t> order(2, -1);
    gpu.rank_descending(order.data(), keys.data(), 2);
    CHECK(order == std::vector<index_t>{0, 1});
  }
  // n == 0 touches nothing.
  gpu.rank_descending(nullptr, nullptr, 0);
}

TEST_CASE("cuda: prune::allocate with the cuda backend gives the plan of the host ranking") {
  backend::cuda gpu;
  // 3 layers, 8 query heads / 4 KV heads, FFN 40; scores from a few values, so ties are everywhere.
  const auto cfg = model::model_config::uniform(model::family::llama, 50, 32, 32, 3, 8, 4, 40);
  std::mt19937_64 gen(5);
  const double values[] = {-0.0, 0.0, 0.25, 0.25, 1.0, 2.0};
  auto draw = [&](index_t n) {
    std::vector<double> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = values[gen() % 6];
    return v;
  };
  prune::group_scores s;
  s.layers.resize(cfg.layers.size());
  for (std::size_t l = 0; l < s.layers.size(); ++l) {
    s.layers[l].heads = draw(cfg.layers[l].n_heads);
    s.layers[l].kv_groups = draw(cfg.layers[l].n_kv_heads);
    s.layers[l].ffn = draw(cfg.layers[l].ffn);
    s.layers[l].layer = values[l % 2];  // -0.0 and 0.0 tie
  }
  for (const auto gran : {prune::granularity::heads_and_ffn, prune::granularity::layers}) {
    for (const bool global : {false, true}) {
      for (const double ratio : {0.25, 0.5}) {
        CAPTURE(prune::granularity_name(gran));
        CAPTURE(global);
        CAPTURE(ratio);
        prune::allocation a;
        a.gran = gran;
        a.global = global;
        a.ratio = ratio;
        CHECK(same_plan(prune::allocate(gpu, cfg, s, a), prune::allocate(cfg, s, a)));
        if (!global && gran != prune::granularity::layers) {
          a.heads = prune::head_mode::query_heads;
          CHECK(same_plan(prune::allocate(gpu, cfg, s, a), prune::allocate(cfg, s, a)));
        }
      }
    }
  }
}

TEST_CASE("cuda: pruning calibration statistics match the host backend (gpt2 and GQA llama, f32 and f64)") {
  backend::cpu host;
  backend::cuda gpu;
  for (const auto fam : {model::family::gpt2, model::family::llama}) {
    for (const dtype t : {dtype::f32, dtype::f64}) {
      CAPTURE(model::family_name(fam));
      CAPTURE(dtype_name(t));
      const auto cfg = model::model_config::uniform(fam, 64, 32, 96, 3, 6, fam == model::family::llama ? 2 : 6, 200);
      model::transformer<backend::cpu> on_host(host, cfg, t);
      on_host.init(11);
      model::transformer<backend::cuda> on_gpu(gpu, cfg, t);
      model::set_host_params(on_gpu, model::host_params(on_host));
      std::vector<std::int32_t> ids(3 * 4 * 32);
      for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 37 + 11) % 64);
      const auto h = prune::collect_statistics(on_host, ids, 4, 32);
      const auto d = prune::collect_statistics(on_gpu, ids, 4, 32);
      CHECK(d.tokens == h.tokens);
      REQUIRE(d.layers.size() == h.layers.size());
      for (std::size_t l = 0; l < h.layers.size(); ++l) CHECK(d.layers[l].attn_in.count == h.layers[l].attn_in.count);
      const double err = rel_error(flatten(d), flatten(h));
      MESSAGE("calibration statistics, device vs host: relative error ", err);
      // The activations differ by the GEMMs' rounding order only; the sums are in double.
      CHECK(err < (t == dtype::f64 ? 1e-12 : 1e-5));
    }
  }
}

TEST_CASE("cuda: per-block local-loss gradients for pruning match the host backend") {
  backend::cpu host;
  backend::cuda gpu;
  const auto cfg = model::model_config::uniform(model::family::llama, 64, 32, 96, 3, 6, 2, 200);
  model::transformer<backend::cpu> on_host(host, cfg, dtype::f64);
  on_host.init(12);
  model::transformer<backend::cuda> on_gpu(gpu, cfg, dtype::f64);
  model::set_host_params(on_gpu, model::host_params(on_host));
  prune::local_gradient_pass<backend::cpu> hp(on_host);
  prune::local_gradient_pass<backend::cuda> dp(on_gpu);
  for (int b = 0; b < 2; ++b) {
    std::vector<std::int32_t> ids(4 * 32), targets(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
      ids[i] = static_cast<std::int32_t>((i * 29 + 7 * b + 3) % 64);
      targets[i] = static_cast<std::int32_t>((i * 13 + b) % 64);
    }
    hp.add(ids.data(), targets.data(), 4, 32);
    dp.add(ids.data(), targets.data(), 4, 32);
  }
  const auto h = hp.result(), d = dp.result();
  CHECK(d.tokens == h.tokens);
  const double err = rel_error(d.grad, h.grad);
  MESSAGE("local gradients, device vs host (f64): relative error ", err);
  CHECK(err < 1e-10);
}
