// Mixed-precision training on the host backend: bf16 weights, activations and gradients with f32
// compute and an f32 AdamW master copy, against the same model in f32 from the same (bf16-valued)
// weights. The host's bf16 path is the reference the CUDA backend's bf16 path is compared with.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/distill/segment_trainer.hpp"
#include "lwcl/model/host_params.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/optim/adamw.hpp"
#include "support/check.hpp"
#include "support/tiny_lm.hpp"

using namespace lwcl;
using lwcl::test::rel_error;

namespace {

using test::tiny_lm::B;
using test::tiny_lm::T;
using test::tiny_lm::make_batch;
model::model_config tiny(model::family fam) { return test::tiny_lm::config(fam); }

std::vector<double> grads_of(const model::transformer<backend::cpu>& net) {
  std::vector<double> out(static_cast<std::size_t>(net.layout().numel()));
  ops::dispatch_storage("test", net.type(), [&](auto z) {
    using E = decltype(z);
    const E* g = static_cast<const E*>(net.grads().data);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(g[i]);
  });
  return out;
}

}  // namespace

TEST_CASE("bf16 mixed precision: gpt2 and GQA llama gradients and 20 AdamW steps track the f32 model") {
  backend::cpu be;
  for (const auto fam : {model::family::gpt2, model::family::llama}) {
    CAPTURE(model::family_name(fam));
    const auto cfg = tiny(fam);
    model::transformer<backend::cpu> h(be, cfg, dtype::bf16);
    h.init(22);
    model::transformer<backend::cpu> f(be, cfg, dtype::f32);
    model::set_host_params(f, model::host_params(h));  // the same bf16 values in both
    optim::adamw_config oc;
    oc.lr = 3e-3;
    optim::adamw<backend::cpu> fa(be, f.params(), oc), ha(be, h.params(), oc);
    REQUIRE(ha.master().type == dtype::f32);
    std::vector<double> fl, hl;
    for (int step = 0; step < 20; ++step) {
      std::vector<std::int32_t> ids, targets;
      make_batch(step, ids, targets);
      const tensor ti(ids.data(), shape{B, T}), tt(targets.data(), shape{B, T});
      f.zero_grad();
      h.zero_grad();
      fl.push_back(f.forward(ti, tt));
      hl.push_back(h.forward(ti, tt));
      f.backward();
      h.backward();
      if (step == 0) {
        // Gradients of the same weights: every activation and gradient is stored in bf16 (u = 2^-8),
        // about twenty rounded stages in a 2-layer model. Measured 0.017 (gpt2) and 0.012 (llama).
        const double g = rel_error(grads_of(h), grads_of(f));
        MESSAGE(model::family_name(fam), ": step-0 gradient error bf16 vs f32 ", g);
        CHECK(g < 0.03);
      }
      fa.step(f.grads());
      ha.step(h.grads());
    }
    double worst = 0;
    for (std::size_t i = 0; i < fl.size(); ++i) worst = std::max(worst, std::abs(hl[i] - fl[i]) / fl[i]);
    MESSAGE(model::family_name(fam), ": loss ", fl.front(), " -> ", fl.back(), " (f32), ", hl.front(), " -> ", hl.back(),
            " (bf16); largest relative gap over 20 steps ", worst);
    // Measured: largest gap 0.0014 (gpt2) and 0.0034 (llama), losses 4.58 -> 2.04 and 4.62 -> 1.25.
    CHECK(hl.back() < 0.8 * hl.front());  // the bf16 run trains
    CHECK(worst < 0.01);
    // The master copy holds what the parameters were rounded from.
    const auto p = model::host_params(h);
    const float* master = ha.master().ptr<float>();
    std::size_t off = 0;
    for (std::size_t i = 0; i < p.size(); ++i)
      if (static_cast<double>(static_cast<float>(bf16(master[i]))) != p[i]) ++off;
    CHECK(off == 0);
  }
}

TEST_CASE("bf16 segment trainer: f32 optimiser state counted, loss falls like the f32 segment's") {
  backend::cpu be;
  const auto cfg = tiny(model::family::llama);
  model::transformer<backend::cpu> net(be, cfg, dtype::f32);
  net.init(5);
  const auto params = model::host_params(net);
  optim::adamw_config oc;
  oc.lr = 2e-3;
  distill::segment_trainer<backend::cpu> s32(be, cfg, 0, 1, net.layout(), params, dtype::f32, oc);
  distill::segment_trainer<backend::cpu> s16(be, cfg, 0, 1, net.layout(), params, dtype::bf16, oc);
  const auto m16 = s16.memory_use(), m32 = s32.memory_use();
  CHECK(m16.parameters * 2 == m32.parameters);
  CHECK(m16.optimizer == 3 * m32.parameters);  // m, v and the master copy, each f32
  CHECK(m32.optimizer == 2 * m32.parameters);

  const shape xs{B, T, cfg.d_model};
  std::vector<float> x = test::random_normal<float>(static_cast<std::size_t>(xs.numel()), 3), y = test::random_normal<float>(x.size(), 4);
  for (float& v : x) v = bf16(v);
  for (float& v : y) v = bf16(v);
  std::vector<bf16> xh(x.begin(), x.end()), yh(y.begin(), y.end());
  std::vector<double> l32, l16;
  for (int step = 0; step < 30; ++step) {
    l32.push_back(s32.step(tensor(x.data(), xs), tensor(y.data(), xs), 2e-3));
    l16.push_back(s16.step(tensor(xh.data(), xs), tensor(yh.data(), xs), 2e-3));
  }
  MESSAGE("segment nmse: f32 ", l32.front(), " -> ", l32.back(), ", bf16 ", l16.front(), " -> ", l16.back());
  CHECK(std::abs(l16.front() - l32.front()) < 0.01 * l32.front());
  CHECK(l16.back() < 0.9 * l16.front());
  CHECK(std::abs(l16.back() - l32.back()) < 0.05 * l32.back());
}
