// Calibration statistics for pruning on backend::cuda against backend::host: the same weights and
// batches give the same channel moments, head norms and block cosines (the sums are folded by the same
// functors, in double, on both), and the same per-block local-loss gradients (Taylor criteria).
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "lwcl/backend/cuda/cuda.cuh"
#include "lwcl/backend/host/host.hpp"
#include "lwcl/model/host_params.hpp"
#include "lwcl/model/transformer.hpp"
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

}  // namespace

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
