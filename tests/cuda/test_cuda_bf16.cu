// bf16 mixed precision on backend::cuda against backend::host. Both backends read bf16, compute in f32
// and round once, so an element op or a per-row op differs between them only where FMA contraction
// or a different summation order (block reductions, cuBLAS's tensor-core GEMM against the host's
// f32 GEMM) moves the f32 value across a bf16 rounding boundary: at most 1 bf16 ulp, and in most
// elements not at all. GEMM-based results are held to bf16's unit roundoff relative to their largest
// entry, and the 20-step training trajectories to the same 1% that separates bf16 from f32 on the host
// (tests/model/test_mixed_precision.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "lwcl/backend/cuda/cuda.cuh"
#include "lwcl/backend/host/host.hpp"
#include "lwcl/distill/segment_trainer.hpp"
#include "lwcl/model/host_params.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/ops/activation.hpp"
#include "lwcl/ops/attention.hpp"
#include "lwcl/ops/cross_entropy.hpp"
#include "lwcl/ops/distill_loss.hpp"
#include "lwcl/ops/elementwise.hpp"
#include "lwcl/ops/embedding.hpp"
#include "lwcl/ops/layernorm.hpp"
#include "lwcl/ops/linear.hpp"
#include "lwcl/ops/rmsnorm.hpp"
#include "lwcl/ops/rope.hpp"
#include "lwcl/optim/adamw.hpp"
#include "support/arena.hpp"
#include "support/check.hpp"
#include "support/tiny_lm.hpp"

using namespace lwcl;
using lwcl::test::rel_error;

namespace {

constexpr double bf16_u = 1.0 / 256;

std::vector<bf16> bf16_random(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  const std::vector<float> v = test::random_normal<float>(n, seed, scale);
  std::vector<bf16> r(n);
  for (std::size_t i = 0; i < n; ++i) r[i] = bf16(v[i]);
  return r;
}

// Distance in bf16 steps between two finite values (the bit patterns mapped to a monotone order).
long ulp_distance(bf16 a, bf16 b) {
  auto ordered = [](bf16 x) {
    const long v = x.bits & 0x7fff;
    return (x.bits & 0x8000) ? -v : v;
  };
  return std::labs(ordered(a) - ordered(b));
}

// One op's bf16 result on a backend, with how far from the host's it may be.
struct result {
  std::string name;
  std::vector<bf16> data;
  long max_ulp;  // < 0: compare by relative error (GEMMs) instead
};

// Every op of a block in bf16 on one backend, from the same inputs.
template <class Backend>
std::vector<result> run_ops(Backend& be) {
  test::arena<Backend> a(be);
  std::vector<result> r;
  const index_t B = 2, T = 33, H = 4, KVH = 2, D = 32, C = H * D, V = 1000, N = B * T, OC = 96;
  const shape xs{B, T, C}, hs{B, T, H, D}, ks{B, T, KVH, D};
  const auto xv = bf16_random(static_cast<std::size_t>(N * C), 1), yv = bf16_random(xv.size(), 2), gv = bf16_random(xv.size(), 3);
  const tensor x = a.upload(xv, xs), y = a.upload(yv, xs), g = a.upload(gv, xs);
  auto fresh = [&](shape s, std::uint64_t seed) { return a.upload(bf16_random(static_cast<std::size_t>(s.numel()), seed), s); };
  auto add = [&](std::string name, const tensor& t, long ulp) { r.push_back({std::move(name), a.template read<bf16>(t), ulp}); };

  {
    tensor o = fresh(xs, 10);
    ops::add(be, o, x, y);
    add("add", o, 1);
    ops::mix(be, o, x, y, 0.3);
    add("mix", o, 1);
    ops::gelu_forward(be, o, x, ops::gelu_kind::tanh);
    add("gelu", o, 1);
    ops::silu_forward(be, o, x);
    add("silu", o, 1);
    ops::swiglu_forward(be, o, x, y);
    add("swiglu", o, 1);
    tensor d = fresh(xs, 11);
    ops::gelu_backward(be, d, g, x, ops::gelu_kind::tanh);
    add("gelu backward", d, 1);
    tensor dg = fresh(xs, 12), du = fresh(xs, 13);
    ops::swiglu_backward(be, dg, du, g, x, y);
    add("swiglu backward dgate", dg, 1);
    add("swiglu backward dup", du, 1);
    const tensor q = fresh(hs, 14);
    tensor qr = fresh(hs, 15), dq = fresh(hs, 16);
    ops::rope_forward(be, qr, q, 10000.0, 0);
    add("rope", qr, 1);
    ops::rope_backward(be, dq, q, 10000.0, 0);
    add("rope backward", dq, 1);
  }
  {
    const tensor w = fresh({C}, 20), bias = fresh({C}, 21);
    tensor o = fresh(xs, 22), mean = fresh({N}, 23), rstd = fresh({N}, 24), dx = fresh(xs, 25), dw = fresh({C}, 26),
           db = fresh({C}, 27);
    ops::layernorm_forward(be, o, mean, rstd, x, w, bias, 1e-5);
    add("layernorm", o, 1);
    add("layernorm mean", mean, 1);
    add("layernorm rstd", rstd, 1);
    // The backward from the same saved statistics on both backends (a 1-ulp difference in a stored
    // rstd would scale a whole row of dx).
    std::vector<bf16> rv = bf16_random(static_cast<std::size_t>(N), 28, 0.2);
    for (bf16& v : rv) v = bf16(1.0f + std::abs(static_cast<float>(v)));
    mean = fresh({N}, 29);
    rstd = a.upload(rv, {N});
    ops::layernorm_backward(be, dx, dw, db, g, x, w, mean, rstd);
    add("layernorm backward dx", dx, 1);
    add("layernorm backward dweight", dw, 1);
    add("layernorm backward dbias", db, 1);
    tensor rstd2 = fresh({N}, 37);
    ops::rmsnorm_forward(be, o, rstd2, x, w, 1e-6);
    add("rmsnorm", o, 1);
    add("rmsnorm rstd", rstd2, 1);
    ops::rmsnorm_backward(be, dx, dw, g, x, w, rstd);
    add("rmsnorm backward dx", dx, 1);
    add("rmsnorm backward dweight", dw, 1);
  }
  {
    const tensor W = fresh({OC, C}, 30), bo = fresh({OC}, 31), go = fresh({B, T, OC}, 32);
    tensor o = fresh({B, T, OC}, 33), dx = fresh(xs, 34), dW = fresh({OC, C}, 35), dbo = fresh({OC}, 36);
    ops::linear_forward(be, o, x, W, bo);
    add("linear", o, -1);
    ops::linear_backward(be, dx, dW, dbo, go, x, W);
    add("linear backward dx", dx, -1);
    add("linear backward dweight", dW, -1);
    add("linear backward dbias", dbo, 1);
    // On CUDA one cuBLASLt GEMM with a bias + GELU epilogue (backend::cuda::linear_epilogue_forward).
    tensor pre = fresh({B, T, OC}, 38), act = fresh({B, T, OC}, 39);
    ops::linear_gelu_forward(be, act, pre, x, W, bo, ops::gelu_kind::tanh);
    add("linear + gelu pre-activation", pre, -1);
    add("linear + gelu", act, -1);
  }
  {
    const tensor q = fresh(hs, 40), k = fresh(ks, 41), v = fresh(ks, 42), dout = fresh(hs, 43);
    const shape ps{B, H, T, T};
    tensor out = fresh(hs, 44), p = fresh(ps, 45), dp = fresh(ps, 46), dq = fresh(hs, 47), dk = fresh(ks, 48), dv = fresh(ks, 49);
    ops::attention_forward(be, out, p, q, k, v, true);
    add("attention", out, -1);
    ops::attention_backward(be, dq, dk, dv, dp, dout, q, k, v, p, true);
    add("attention backward dq", dq, -1);
    add("attention backward dk", dk, -1);
    add("attention backward dv", dv, -1);
  }
  {
    std::vector<std::int32_t> tg(static_cast<std::size_t>(N));
    for (std::size_t i = 0; i < tg.size(); ++i) tg[i] = i % 7 == 3 ? -1 : static_cast<std::int32_t>((i * 37) % V);
    const tensor targets = a.upload(tg, {N});
    const tensor logits = fresh({N, V}, 50);
    tensor dl = fresh({N, V}, 51), rl = fresh({N}, 52);
    ops::cross_entropy(be, dl, rl, logits, targets, 1.0);
    add("cross-entropy row losses", rl, 1);
    add("cross-entropy dlogits", dl, 1);
    tensor ds = fresh(xs, 53), scratch = fresh({2 * N}, 54);
    ops::cosine_loss(be, ds, scratch, x, y, 1.0);
    add("cosine loss dstudent", ds, 1);
    ops::mse_loss(be, ds, scratch, x, y, 1.0);
    add("mse loss dstudent", ds, 1);
  }
  return r;
}

constexpr index_t Bm = test::tiny_lm::B, Tm = test::tiny_lm::T;
model::model_config tiny(model::family fam) { return test::tiny_lm::config(fam); }

}  // namespace

TEST_CASE("cuda bf16: every block op matches the host's bf16 op within 1 ulp (element and row ops) or u (GEMMs)") {
  backend::cpu host;
  backend::cuda gpu;
  const auto h = run_ops(host), d = run_ops(gpu);
  REQUIRE(h.size() == d.size());
  for (std::size_t i = 0; i < h.size(); ++i) {
    INFO("op '", h[i].name, "'");
    REQUIRE(h[i].data.size() == d[i].data.size());
    if (h[i].max_ulp >= 0) {
      long worst = 0;
      for (std::size_t j = 0; j < h[i].data.size(); ++j) worst = std::max(worst, ulp_distance(h[i].data[j], d[i].data[j]));
      CHECK(worst <= h[i].max_ulp);
    } else {
      // Both round an f32 accumulation once; the accumulations differ in order.
      const std::vector<float> hv(h[i].data.begin(), h[i].data.end()), dv(d[i].data.begin(), d[i].data.end());
      CHECK(rel_error(dv, hv) < 2 * bf16_u);
    }
  }
}

TEST_CASE("cuda bf16: 20 mixed-precision AdamW steps of a tiny gpt2 and GQA llama track the host's bf16 run") {
  backend::cpu host;
  backend::cuda gpu;
  for (const auto fam : {model::family::gpt2, model::family::llama}) {
    CAPTURE(model::family_name(fam));
    const auto cfg = tiny(fam);
    model::transformer<backend::cpu> h(host, cfg, dtype::bf16);
    h.init(22);
    model::transformer<backend::cuda> d(gpu, cfg, dtype::bf16);
    model::set_host_params(d, model::host_params(h));
    optim::adamw_config oc;
    oc.lr = 3e-3;
    optim::adamw<backend::cpu> ha(host, h.params(), oc);
    optim::adamw<backend::cuda> da(gpu, d.params(), oc);
    std::vector<double> hl, dl;
    for (int step = 0; step < 20; ++step) {
      std::vector<std::int32_t> ids, targets;
      test::tiny_lm::make_batch(step, ids, targets);
      test::arena<backend::cuda> a(gpu);
      const tensor di = a.upload(ids, {Bm, Tm}), dt = a.upload(targets, {Bm, Tm});
      h.zero_grad();
      d.zero_grad();
      hl.push_back(h.forward(tensor(ids.data(), shape{Bm, Tm}), tensor(targets.data(), shape{Bm, Tm})));
      dl.push_back(d.forward(di, dt));
      h.backward();
      d.backward();
      ha.step(h.grads());
      da.step(d.grads());
    }
    double worst = 0;
    for (std::size_t i = 0; i < hl.size(); ++i) worst = std::max(worst, std::abs(dl[i] - hl[i]) / hl[i]);
    MESSAGE(model::family_name(fam), " bf16: loss ", hl.front(), " -> ", hl.back(), " (host), ", dl.front(), " -> ", dl.back(),
            " (cuda); largest relative gap over 20 steps ", worst);
    CHECK(dl.back() < 0.8 * dl.front());
    CHECK(worst < 0.01);
  }
}

TEST_CASE("cuda bf16: a segment trainer's losses track the host's bf16 segment") {
  backend::cpu host;
  backend::cuda gpu;
  const auto cfg = tiny(model::family::llama);
  model::transformer<backend::cpu> net(host, cfg, dtype::f32);
  net.init(5);
  const auto params = model::host_params(net);
  optim::adamw_config oc;
  oc.lr = 2e-3;
  distill::segment_trainer<backend::cpu> hs(host, cfg, 0, 2, net.layout(), params, dtype::bf16, oc);
  distill::segment_trainer<backend::cuda> ds(gpu, cfg, 0, 2, net.layout(), params, dtype::bf16, oc);
  CHECK(ds.memory_use().optimizer == hs.memory_use().optimizer);
  const shape xs{Bm, Tm, cfg.d_model};
  const auto xv = bf16_random(static_cast<std::size_t>(xs.numel()), 3), yv = bf16_random(xv.size(), 4);
  test::arena<backend::cuda> a(gpu);
  const tensor dx = a.upload(xv, xs), dy = a.upload(yv, xs);
  std::vector<bf16> hx = xv, hy = yv;
  double worst = 0, first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    const double lh = hs.step(tensor(hx.data(), xs), tensor(hy.data(), xs), 2e-3);
    const double ld = ds.step(dx, dy, 2e-3);
    worst = std::max(worst, std::abs(ld - lh) / lh);
    if (step == 0) first = ld;
    last = ld;
  }
  MESSAGE("segment bf16 nmse on cuda ", first, " -> ", last, "; largest relative gap to the host ", worst);
  CHECK(last < 0.9 * first);
  CHECK(worst < 0.01);
}
