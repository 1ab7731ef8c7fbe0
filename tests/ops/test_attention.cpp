// Attention: explicit PyTorch oracle on RoPE'd q and k (GQA causal and bidirectional, MQA, MHA), a
// Qwen2-style attention block chained from linear, rope and attention, finite-difference gradients,
// accumulation, and argument checks.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/ops/attention.hpp"
#include "lwcl/ops/linear.hpp"
#include "lwcl/ops/rope.hpp"
#include "support/check.hpp"
#include "support/fixture.hpp"

using namespace lwcl;
using lwcl::test::rel_error;

namespace {

template <class T>
std::vector<T> zeros(index_t n) {
  return std::vector<T>(static_cast<std::size_t>(n));
}

// q0, k0 -> RoPE -> q, k -> attention(q, k, v) -> out, and the way back.
template <class T>
struct attn_case {
  test::fixture fx;
  shape qs = fx.dims("q0"), ks = fx.dims("k0");
  index_t B = qs[0], L = qs[1], H = qs[2], KVH = ks[2], D = qs[3];
  shape ps{B, H, L, L};
  double theta = fx.scalar("theta");
  index_t pos_offset = static_cast<index_t>(fx.ints("pos_offset").at(0));
  bool causal = fx.ints("causal").at(0) != 0;
  std::vector<T> q0 = fx.as<T>("q0"), k0 = fx.as<T>("k0"), v = fx.as<T>("v"), dout = fx.as<T>("dout");
  std::vector<T> q = zeros<T>(qs.numel()), k = zeros<T>(ks.numel()), out = zeros<T>(qs.numel());
  std::vector<T> probs = zeros<T>(ps.numel()), dprobs = zeros<T>(ps.numel());
  std::vector<T> dq = zeros<T>(qs.numel()), dk = zeros<T>(ks.numel()), dv = zeros<T>(ks.numel());
  std::vector<T> dq0 = zeros<T>(qs.numel()), dk0 = zeros<T>(ks.numel());
  backend::cpu be;

  explicit attn_case(const std::string& file) : fx(file) {}

  void rope() {
    ops::rope_forward(be, tensor(q.data(), qs), tensor(q0.data(), qs), theta, pos_offset);
    ops::rope_forward(be, tensor(k.data(), ks), tensor(k0.data(), ks), theta, pos_offset);
  }
  void attend() {
    ops::attention_forward(be, tensor(out.data(), qs), tensor(probs.data(), ps), tensor(q.data(), qs), tensor(k.data(), ks),
                           tensor(v.data(), ks), causal);
  }
  void attend_backward() {
    ops::attention_backward(be, tensor(dq.data(), qs), tensor(dk.data(), ks), tensor(dv.data(), ks), tensor(dprobs.data(), ps),
                            tensor(dout.data(), qs), tensor(q.data(), qs), tensor(k.data(), ks), tensor(v.data(), ks),
                            tensor(probs.data(), ps), causal);
  }
  void rope_backward() {
    ops::rope_backward(be, tensor(dq0.data(), qs), tensor(dq.data(), qs), theta, pos_offset);
    ops::rope_backward(be, tensor(dk0.data(), ks), tensor(dk.data(), ks), theta, pos_offset);
  }
};

const char* const attn_files[] = {"ops/attention_gqa_causal.lwfx", "ops/attention_gqa_bidir.lwfx",
                                  "ops/attention_mqa_causal.lwfx", "ops/attention_mha_bidir.lwfx"};

}  // namespace

TEST_CASE("attention fixtures cover GQA causal and bidirectional with two RoPE bases") {
  attn_case<double> causal("ops/attention_gqa_causal.lwfx"), bidir("ops/attention_gqa_bidir.lwfx");
  CHECK(causal.H == 6);
  CHECK(causal.KVH == 2);
  CHECK(causal.causal);
  CHECK(bidir.H == 6);
  CHECK(bidir.KVH == 2);
  CHECK_FALSE(bidir.causal);
  CHECK(causal.theta == 10000.0);
  CHECK(bidir.theta == 500000.0);
}

TEST_CASE_TEMPLATE("attention with RoPE matches PyTorch forward and backward", T, float, double) {
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-10;
  for (const char* file : attn_files) {
    const std::string name = file;
    CAPTURE(name);
    attn_case<T> c(file);
    c.rope();
    c.attend();
    CHECK(rel_error(c.q, c.fx.f64("q")) < tol);
    CHECK(rel_error(c.k, c.fx.f64("k")) < tol);
    CHECK(rel_error(c.probs, c.fx.f64("probs")) < tol);
    CHECK(rel_error(c.out, c.fx.f64("out")) < tol);
    c.attend_backward();
    CHECK(rel_error(c.dq, c.fx.f64("dq")) < 10 * tol);
    CHECK(rel_error(c.dk, c.fx.f64("dk")) < 10 * tol);
    CHECK(rel_error(c.dv, c.fx.f64("dv")) < 10 * tol);
    c.rope_backward();
    CHECK(rel_error(c.dq0, c.fx.f64("dq0")) < 10 * tol);
    CHECK(rel_error(c.dk0, c.fx.f64("dk0")) < 10 * tol);
  }
}

TEST_CASE("causal attention probabilities are exactly zero above the diagonal and rows sum to one") {
  for (const char* file : attn_files) {
    const std::string name = file;
    CAPTURE(name);
    attn_case<double> c(file);
    std::fill(c.probs.begin(), c.probs.end(), 7.0);  // stale values must not survive
    c.rope();
    c.attend();
    const index_t L = c.L;
    for (index_t row = 0; row < c.B * c.H * L; ++row) {
      const index_t t = row % L;
      double sum = 0;
      for (index_t j = 0; j < L; ++j) {
        const double p = c.probs[static_cast<std::size_t>(row * L + j)];
        if (c.causal && j > t)
          CHECK(p == 0.0);
        else
          CHECK(p > 0.0);
        sum += p;
      }
      CHECK(sum == doctest::Approx(1.0).epsilon(1e-14));
    }
  }
}

TEST_CASE("attention gradients match finite differences") {
  for (const char* file : attn_files) {
    const std::string name = file;
    CAPTURE(name);
    attn_case<double> c(file);
    c.rope();
    c.attend();
    c.attend_backward();
    c.rope_backward();
    // A step of 1e-4 rather than the default 1e-6: some gradient entries are near 1e-4, and the rounding
    // error of a central difference, about |loss| * 1e-16 / step, would be 1e-6 of them at the default
    // step; at 1e-4 both it and the truncation error (order step^2) stay near 1e-8.
    const double step = 1e-4;
    // Attention alone, with respect to its own inputs.
    auto attn_loss = [&] {
      c.attend();
      return test::dot(c.out, c.dout);
    };
    CHECK(test::gradcheck(c.q, c.dq, attn_loss, step) < 1e-6);
    CHECK(test::gradcheck(c.k, c.dk, attn_loss, step) < 1e-6);
    CHECK(test::gradcheck(c.v, c.dv, attn_loss, step) < 1e-6);
    // Through RoPE, with respect to the un-rotated q and k.
    auto full_loss = [&] {
      c.rope();
      c.attend();
      return test::dot(c.out, c.dout);
    };
    CHECK(test::gradcheck(c.q0, c.dq0, full_loss, step) < 1e-6);
    CHECK(test::gradcheck(c.k0, c.dk0, full_loss, step) < 1e-6);
  }
}

TEST_CASE("attention backward accumulates and leaves the future alone under the causal mask") {
  attn_case<double> c("ops/attention_gqa_causal.lwfx");
  c.rope();
  c.attend();
  c.attend_backward();
  const auto dq1 = c.dq, dk1 = c.dk, dv1 = c.dv;
  c.attend_backward();
  for (std::size_t i = 0; i < dq1.size(); ++i) CHECK(c.dq[i] == doctest::Approx(2 * dq1[i]));
  for (std::size_t i = 0; i < dk1.size(); ++i) CHECK(c.dk[i] == doctest::Approx(2 * dk1[i]));
  for (std::size_t i = 0; i < dv1.size(); ++i) CHECK(c.dv[i] == doctest::Approx(2 * dv1[i]));

  // With dout nonzero only at the first token, no later key or value can receive a gradient.
  std::fill(c.dq.begin(), c.dq.end(), 0.0);
  std::fill(c.dk.begin(), c.dk.end(), 0.0);
  std::fill(c.dv.begin(), c.dv.end(), 0.0);
  const index_t row_q = c.H * c.D, row_kv = c.KVH * c.D;
  for (index_t b = 0; b < c.B; ++b)
    for (index_t t = 1; t < c.L; ++t)
      std::fill_n(c.dout.begin() + b * c.L * row_q + t * row_q, row_q, 0.0);
  c.attend_backward();
  bool first_token_has_grad = false;
  for (index_t b = 0; b < c.B; ++b)
    for (index_t t = 0; t < c.L; ++t)
      for (index_t i = 0; i < row_kv; ++i) {
        const auto at = static_cast<std::size_t>(b * c.L * row_kv + t * row_kv + i);
        if (t == 0)
          first_token_has_grad = first_token_has_grad || c.dv[at] != 0.0;
        else {
          CHECK(c.dk[at] == 0.0);
          CHECK(c.dv[at] == 0.0);
        }
      }
  CHECK(first_token_has_grad);
}

namespace {

// Qwen2 self-attention: q/k/v projections with bias, RoPE, causal GQA attention, o_proj without bias.
template <class T>
struct qwen2_block {
  test::fixture fx{"ops/attention_qwen2.lwfx"};
  shape xs = fx.dims("x");
  index_t B = xs[0], L = xs[1], C = xs[2];
  index_t H = fx.ints("heads").at(0), KVH = fx.ints("heads").at(1), D = fx.dims("wq")[0] / H;
  double theta = fx.scalar("theta");
  shape qs{B, L, H, D}, ks{B, L, KVH, D}, ps{B, H, L, L}, q2{B, L, H * D}, k2{B, L, KVH * D};
  std::vector<T> x = fx.as<T>("x"), wq = fx.as<T>("wq"), bq = fx.as<T>("bq"), wk = fx.as<T>("wk"), bk = fx.as<T>("bk");
  std::vector<T> wv = fx.as<T>("wv"), bv = fx.as<T>("bv"), wo = fx.as<T>("wo"), dy = fx.as<T>("dy");
  std::vector<T> q = zeros<T>(qs.numel()), k = zeros<T>(ks.numel()), v = zeros<T>(ks.numel());
  std::vector<T> probs = zeros<T>(ps.numel()), att = zeros<T>(qs.numel()), y = zeros<T>(xs.numel());
  std::vector<T> dx = zeros<T>(xs.numel()), dwq = zeros<T>(H * D * C), dbq = zeros<T>(H * D), dwk = zeros<T>(KVH * D * C);
  std::vector<T> dbk = zeros<T>(KVH * D), dwv = zeros<T>(KVH * D * C), dbv = zeros<T>(KVH * D), dwo = zeros<T>(C * H * D);
  std::vector<T> datt = zeros<T>(qs.numel()), dq = zeros<T>(qs.numel()), dk = zeros<T>(ks.numel()), dv = zeros<T>(ks.numel());
  std::vector<T> dprobs = zeros<T>(ps.numel()), dqlin = zeros<T>(qs.numel()), dklin = zeros<T>(ks.numel());
  backend::cpu be;

  void forward() {
    ops::linear_forward(be, tensor(q.data(), q2), tensor(x.data(), xs), tensor(wq.data(), {H * D, C}), tensor(bq.data(), {H * D}));
    ops::linear_forward(be, tensor(k.data(), k2), tensor(x.data(), xs), tensor(wk.data(), {KVH * D, C}),
                        tensor(bk.data(), {KVH * D}));
    ops::linear_forward(be, tensor(v.data(), k2), tensor(x.data(), xs), tensor(wv.data(), {KVH * D, C}),
                        tensor(bv.data(), {KVH * D}));
    ops::rope_forward(be, tensor(q.data(), qs), tensor(q.data(), qs), theta);
    ops::rope_forward(be, tensor(k.data(), ks), tensor(k.data(), ks), theta);
    ops::attention_forward(be, tensor(att.data(), qs), tensor(probs.data(), ps), tensor(q.data(), qs), tensor(k.data(), ks),
                           tensor(v.data(), ks), true);
    ops::linear_forward(be, tensor(y.data(), xs), tensor(att.data(), q2), tensor(wo.data(), {C, H * D}), tensor());
  }
  // Gradients land in the (zeroed) parameter and input gradients; dx collects all three projections.
  void backward() {
    for (auto* g : {&datt, &dq, &dk, &dv, &dqlin, &dklin}) std::fill(g->begin(), g->end(), T(0));
    ops::linear_backward(be, tensor(datt.data(), q2), tensor(dwo.data(), {C, H * D}), tensor(), tensor(dy.data(), xs),
                         tensor(att.data(), q2), tensor(wo.data(), {C, H * D}));
    ops::attention_backward(be, tensor(dq.data(), qs), tensor(dk.data(), ks), tensor(dv.data(), ks), tensor(dprobs.data(), ps),
                            tensor(datt.data(), qs), tensor(q.data(), qs), tensor(k.data(), ks), tensor(v.data(), ks),
                            tensor(probs.data(), ps), true);
    ops::rope_backward(be, tensor(dqlin.data(), qs), tensor(dq.data(), qs), theta);
    ops::rope_backward(be, tensor(dklin.data(), ks), tensor(dk.data(), ks), theta);
    ops::linear_backward(be, tensor(dx.data(), xs), tensor(dwq.data(), {H * D, C}), tensor(dbq.data(), {H * D}),
                         tensor(dqlin.data(), q2), tensor(x.data(), xs), tensor(wq.data(), {H * D, C}));
    ops::linear_backward(be, tensor(dx.data(), xs), tensor(dwk.data(), {KVH * D, C}), tensor(dbk.data(), {KVH * D}),
                         tensor(dklin.data(), k2), tensor(x.data(), xs), tensor(wk.data(), {KVH * D, C}));
    ops::linear_backward(be, tensor(dx.data(), xs), tensor(dwv.data(), {KVH * D, C}), tensor(dbv.data(), {KVH * D}),
                         tensor(dv.data(), k2), tensor(x.data(), xs), tensor(wv.data(), {KVH * D, C}));
  }
};

}  // namespace

TEST_CASE_TEMPLATE("a Qwen2 attention block built from linear, rope and attention matches PyTorch", T, float, double) {
  qwen2_block<T> m;
  REQUIRE(m.H == 6);
  REQUIRE(m.KVH == 2);
  m.forward();
  m.backward();
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-10;
  CHECK(rel_error(m.att, m.fx.f64("att")) < tol);
  CHECK(rel_error(m.y, m.fx.f64("y")) < tol);
  CHECK(rel_error(m.dx, m.fx.f64("dx")) < 10 * tol);
  CHECK(rel_error(m.dwq, m.fx.f64("dwq")) < 10 * tol);
  CHECK(rel_error(m.dbq, m.fx.f64("dbq")) < 10 * tol);
  CHECK(rel_error(m.dwk, m.fx.f64("dwk")) < 10 * tol);
  CHECK(rel_error(m.dbk, m.fx.f64("dbk")) < 10 * tol);
  CHECK(rel_error(m.dwv, m.fx.f64("dwv")) < 10 * tol);
  CHECK(rel_error(m.dbv, m.fx.f64("dbv")) < 10 * tol);
  CHECK(rel_error(m.dwo, m.fx.f64("dwo")) < 10 * tol);
}

TEST_CASE("the Qwen2 attention block's gradients match finite differences") {
  qwen2_block<double> m;
  m.forward();
  m.backward();
  auto loss = [&] {
    m.forward();
    return test::dot(m.y, m.dy);
  };
  CHECK(test::gradcheck(m.x, m.dx, loss) < 1e-6);
  CHECK(test::gradcheck(m.wk, m.dwk, loss) < 1e-6);
  CHECK(test::gradcheck(m.bq, m.dbq, loss) < 1e-6);
}

TEST_CASE("attention rejects mismatched heads, shapes, dtypes and empty tensors") {
  backend::cpu be;
  const index_t B = 1, L = 3, D = 4;
  auto buf = [](index_t n) { return std::vector<float>(static_cast<std::size_t>(n)); };
  auto q = buf(B * L * 6 * D), k = buf(B * L * 4 * D), v = buf(B * L * 4 * D), out = buf(B * L * 6 * D), p = buf(B * 6 * L * L);
  const shape qs{B, L, 6, D}, ks{B, L, 4, D}, ps{B, 6, L, L};
  CHECK_THROWS_WITH_AS(ops::attention_forward(be, tensor(out.data(), qs), tensor(p.data(), ps), tensor(q.data(), qs),
                                              tensor(k.data(), ks), tensor(v.data(), ks), true),
                       doctest::Contains("attention_forward: the 6 query heads (q [1, 3, 6, 4]) cannot be split evenly over "
                                         "the 4 kv heads"),
                       lwcl::error);
  auto dq = buf(B * L * 6 * D), dk = buf(B * L * 4 * D), dv = buf(B * L * 4 * D), dp = buf(B * 6 * L * L);
  CHECK_THROWS_WITH_AS(ops::attention_backward(be, tensor(dq.data(), qs), tensor(dk.data(), ks), tensor(dv.data(), ks),
                                               tensor(dp.data(), ps), tensor(out.data(), qs), tensor(q.data(), qs),
                                               tensor(k.data(), ks), tensor(v.data(), ks), tensor(p.data(), ps), false),
                       doctest::Contains("attention_backward: the 6 query heads"), lwcl::error);

  const shape ks2{B, L, 2, D};  // a valid GQA layout from here on
  CHECK_THROWS_WITH_AS(ops::attention_forward(be, tensor(out.data(), qs), tensor(p.data(), ps), tensor(q.data(), qs),
                                              tensor(k.data(), ks2), tensor(v.data(), {B, L, 2, D - 1}), true),
                       doctest::Contains("attention_forward: v has shape [1, 3, 2, 3], expected [1, 3, 2, 4]"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::attention_forward(be, tensor(out.data(), qs), tensor(p.data(), ps), tensor(q.data(), qs),
                                              tensor(k.data(), {B, L - 1, 2, D}), tensor(v.data(), {B, L - 1, 2, D}), true),
                       doctest::Contains("attention_forward: k has shape [1, 2, 2, 4], expected [1, 3, KVH, 4]"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::attention_forward(be, tensor(out.data(), qs), tensor(p.data(), {B, 6, L, L - 1}), tensor(q.data(), qs),
                                              tensor(k.data(), ks2), tensor(v.data(), ks2), true),
                       doctest::Contains("attention_forward: probs has shape [1, 6, 3, 2], expected [1, 6, 3, 3]"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::attention_forward(be, tensor(out.data(), qs), tensor(p.data(), ps), tensor(q.data(), {B * L, 6 * D}),
                                              tensor(k.data(), ks2), tensor(v.data(), ks2), true),
                       doctest::Contains("attention_forward: q has shape [3, 24], expected rank 4"), lwcl::error);
  std::vector<double> vd(v.size());
  CHECK_THROWS_WITH_AS(ops::attention_forward(be, tensor(out.data(), qs), tensor(p.data(), ps), tensor(q.data(), qs),
                                              tensor(k.data(), ks2), tensor(vd.data(), ks2), true),
                       doctest::Contains("attention_forward: v has dtype f64, expected f32"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::attention_forward(be, tensor(out.data(), qs), tensor(p.data(), ps), tensor(), tensor(k.data(), ks2),
                                              tensor(v.data(), ks2), true),
                       doctest::Contains("attention_forward: q is empty"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::attention_backward(be, tensor(dq.data(), qs), tensor(dk.data(), ks2), tensor(dv.data(), ks2),
                                               tensor(dp.data(), {B, 6, L, L + 1}), tensor(out.data(), qs), tensor(q.data(), qs),
                                               tensor(k.data(), ks2), tensor(v.data(), ks2), tensor(p.data(), ps), false),
                       doctest::Contains("attention_backward: dprobs has shape [1, 6, 3, 4], expected [1, 6, 3, 3]"),
                       lwcl::error);
  CHECK_THROWS_WITH_AS(ops::attention_backward(be, tensor(dq.data(), qs), tensor(dk.data(), ks), tensor(dv.data(), ks2),
                                               tensor(dp.data(), ps), tensor(out.data(), qs), tensor(q.data(), qs),
                                               tensor(k.data(), ks2), tensor(v.data(), ks2), tensor(p.data(), ps), false),
                       doctest::Contains("attention_backward: dk has shape [1, 3, 4, 4], expected [1, 3, 2, 4]"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::attention_backward(be, tensor(dq.data(), qs), tensor(dk.data(), ks2), tensor(), tensor(dp.data(), ps),
                                               tensor(out.data(), qs), tensor(q.data(), qs), tensor(k.data(), ks2),
                                               tensor(v.data(), ks2), tensor(p.data(), ps), false),
                       doctest::Contains("attention_backward: dv has shape [], expected [1, 3, 2, 4]"), lwcl::error);
}
