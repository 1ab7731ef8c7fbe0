// Whole models on backend::cuda against backend::host: every decoder family's forward, loss and
// parameter gradients on the same weights and batch, and 20 AdamW steps of a tiny gpt2 and a tiny GQA
// llama whose losses must track the host's step by step.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "lwcl/backend/cuda/cuda.cuh"
#include "lwcl/backend/host/host.hpp"
#include "lwcl/model/generate.hpp"
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

// Token ids and targets in the backend's memory.
template <class Backend>
struct device_batch {
  buffer<Backend> mem;
  tensor ids, targets;
  device_batch(Backend& be, const std::vector<std::int32_t>& i, const std::vector<std::int32_t>& t)
      : mem(be, 2 * i.size() * sizeof(std::int32_t)) {
    auto* p = static_cast<std::int32_t*>(mem.data());
    be.from_host(p, i.data(), i.size() * sizeof(std::int32_t));
    be.from_host(p + i.size(), t.data(), t.size() * sizeof(std::int32_t));
    ids = tensor(p, dtype::i32, shape{B, T});
    targets = tensor(p + i.size(), dtype::i32, shape{B, T});
  }
};

template <class Backend>
std::vector<double> host_grads(model::transformer<Backend>& net) {
  std::vector<double> out(static_cast<std::size_t>(net.layout().numel()));
  ops::dispatch_float("test", net.type(), [&](auto z) {
    using E = decltype(z);
    std::vector<E> tmp(out.size());
    net.backend().to_host(tmp.data(), net.grads().data, tmp.size() * sizeof(E));
    for (std::size_t i = 0; i < tmp.size(); ++i) out[i] = static_cast<double>(tmp[i]);
  });
  return out;
}

}  // namespace

TEST_CASE("cuda: gpt2, llama and qwen2 forward, loss and gradients match the host backend (f32 and f64)") {
  backend::cpu host;
  backend::cuda gpu;
  for (const auto fam : {model::family::gpt2, model::family::llama, model::family::qwen2}) {
    for (const dtype t : {dtype::f32, dtype::f64}) {
      CAPTURE(model::family_name(fam));
      CAPTURE(dtype_name(t));
      const auto cfg = tiny(fam);
      model::transformer<backend::cpu> h(host, cfg, t);
      h.init(21);
      model::transformer<backend::cuda> d(gpu, cfg, t);
      model::set_host_params(d, model::host_params(h));
      std::vector<std::int32_t> ids, targets;
      make_batch(0, ids, targets);
      device_batch<backend::cpu> hb(host, ids, targets);
      device_batch<backend::cuda> db(gpu, ids, targets);
      h.zero_grad();
      d.zero_grad();
      const double hl = h.forward(hb.ids, hb.targets), dl = d.forward(db.ids, db.targets);
      h.backward();
      d.backward();
      const double tol = t == dtype::f64 ? 1e-11 : 1e-4;
      CHECK(std::abs(dl - hl) <= tol * std::abs(hl));
      const double gerr = rel_error(host_grads(d), host_grads(h));
      MESSAGE(model::family_name(fam), " ", dtype_name(t), ": loss ", hl, " vs ", dl, ", gradient relative error ", gerr);
      CHECK(gerr < tol);
    }
  }
}

TEST_CASE("cuda: 20 AdamW steps of a tiny gpt2 and a tiny GQA llama track the host's losses") {
  backend::cpu host;
  backend::cuda gpu;
  for (const auto fam : {model::family::gpt2, model::family::llama}) {
    CAPTURE(model::family_name(fam));
    const auto cfg = tiny(fam);
    model::transformer<backend::cpu> h(host, cfg, dtype::f32);
    h.init(22);
    model::transformer<backend::cuda> d(gpu, cfg, dtype::f32);
    model::set_host_params(d, model::host_params(h));
    optim::adamw_config oc;
    oc.lr = 3e-3;
    optim::adamw<backend::cpu> ha(host, h.params(), oc);
    optim::adamw<backend::cuda> da(gpu, d.params(), oc);
    std::vector<double> hl, dl;
    for (int step = 0; step < 20; ++step) {
      std::vector<std::int32_t> ids, targets;
      make_batch(step, ids, targets);
      device_batch<backend::cpu> hb(host, ids, targets);
      device_batch<backend::cuda> db(gpu, ids, targets);
      h.zero_grad();
      d.zero_grad();
      hl.push_back(h.forward(hb.ids, hb.targets));
      dl.push_back(d.forward(db.ids, db.targets));
      h.backward();
      d.backward();
      ha.step(h.grads());
      da.step(d.grads());
    }
    double worst = 0;
    for (std::size_t i = 0; i < hl.size(); ++i) worst = std::max(worst, std::abs(dl[i] - hl[i]) / hl[i]);
    MESSAGE(model::family_name(fam), ": loss ", hl.front(), " -> ", hl.back(), " (host), ", dl.front(), " -> ", dl.back(),
            " (cuda); largest relative gap over 20 steps ", worst);
    CHECK(hl.back() < hl.front());  // the run trains
    CHECK(worst < 1e-3);
    CHECK(rel_error(model::host_params(d), model::host_params(h)) < 1e-3);
  }
}

TEST_CASE("cuda: key/value-cache decoding and greedy generation match the host backend") {
  backend::cpu host;
  backend::cuda gpu;
  for (const auto fam : {model::family::gpt2, model::family::llama, model::family::qwen2}) {
    CAPTURE(model::family_name(fam));
    const auto cfg = tiny(fam);
    model::transformer<backend::cpu> h(host, cfg, dtype::f32);
    h.init(31);
    model::transformer<backend::cuda> d(gpu, cfg, dtype::f32);
    model::set_host_params(d, model::host_params(h));
    std::vector<std::int32_t> ids, targets;
    make_batch(0, ids, targets);
    const std::vector<std::int32_t> prompt(ids.begin(), ids.begin() + 5);
    model::kv_decoder<backend::cpu> hd(h, 12, 5);
    model::kv_decoder<backend::cuda> dd(d, 12, 5);
    const index_t V = cfg.vocab;
    for (const auto& chunk : {prompt, std::vector<std::int32_t>{ids[5]}, std::vector<std::int32_t>{ids[6], ids[7]}}) {
      const auto n = static_cast<index_t>(chunk.size());
      std::vector<float> hl(static_cast<std::size_t>(n * V)), dl(hl.size());
      host.to_host(hl.data(), hd.step(chunk).data, hl.size() * sizeof(float));
      gpu.to_host(dl.data(), dd.step(chunk).data, dl.size() * sizeof(float));
      const double err = rel_error(std::vector<double>(dl.begin(), dl.end()), std::vector<double>(hl.begin(), hl.end()));
      MESSAGE(model::family_name(fam), ": ", n, " new positions, logits relative error ", err);
      CHECK(err < 1e-4);
    }
    CHECK(model::generate(d, prompt, 6, model::sampling{}).tokens == model::generate(h, prompt, 6, model::sampling{}).tokens);
  }
}
