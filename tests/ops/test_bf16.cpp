// bf16 storage with f32 compute. Every functor reads bf16 into float, computes in float and rounds once
// when it stores, so on inputs that are bf16 values the bf16 op must give exactly bf16(the f32 op's
// result), bit for bit: any second rounding (an intermediate stored in bf16, an accumulator in bf16)
// breaks the equality. Where bf16 storage does change the computation (attention's stored scores and
// probabilities, losses summed from rounded per-row partials) the result is compared with the f32 op
// under a tolerance derived from bf16's unit roundoff u = 2^-8.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "lwcl/backend/host/host.hpp"
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
#include "support/check.hpp"

using namespace lwcl;

namespace {

constexpr double bf16_u = 1.0 / 256;  // unit roundoff of an 8-bit significand

// Normal values rounded to bf16, kept as float (the f32 op's input) ...
std::vector<float> bf16_values(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  std::vector<float> v = test::random_normal<float>(n, seed, scale);
  for (float& x : v) x = bf16(x);
  return v;
}
// ... and the same values as bf16 (the bf16 op's input).
std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = bf16(v[i]);
  return r;
}
std::vector<float> widen(const std::vector<bf16>& v) { return std::vector<float>(v.begin(), v.end()); }

// The number of elements of `got` whose bits differ from bf16(ref): 0 when the op rounded once.
std::size_t rounding_mismatches(const std::vector<bf16>& got, const std::vector<float>& ref) {
  REQUIRE(got.size() == ref.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i].bits != bf16(ref[i]).bits) ++bad;
  return bad;
}

template <class T>
tensor t(std::vector<T>& v, shape s) {
  return tensor(v.data(), s);
}

}  // namespace

TEST_CASE("bf16 dtype: rounding to nearest even, explicit narrowing, float accumulation operators") {
  CHECK(bf16(1.0f).bits == 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even significand (1).
  CHECK(bf16(1.0f + 1.0f / 256).bits == 0x3f80);
  CHECK(bf16(1.0f + 3.0f / 256).bits == 0x3f82);
  CHECK(static_cast<float>(bf16(3.0f)) == 3.0f);
  bf16 x(1.0f);
  x += 1.0f / 512;  // below half an ulp of 1: rounds back to 1
  CHECK(x.bits == 0x3f80);
  x += 1.0f;
  CHECK(static_cast<float>(x) == 2.0f);
  CHECK(std::isnan(static_cast<float>(bf16(NAN))));
  static_assert(std::is_same_v<compute_t<bf16>, float> && std::is_same_v<compute_t<double>, double>);
}

TEST_CASE("bf16 host gemm: the f32 product of the same values rounded once, with transposes and padded leading dims") {
  backend::cpu be;
  const index_t M = 5, N = 7, K = 9, pad = 3;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      const index_t a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
      const index_t lda = a_cols + pad, ldb = b_cols + pad, ldc = N + pad;
      std::vector<float> a = bf16_values(static_cast<std::size_t>(a_rows * lda), 1),
                         b = bf16_values(static_cast<std::size_t>(b_rows * ldb), 2),
                         c = bf16_values(static_cast<std::size_t>(M * ldc), 3);
      std::vector<bf16> ah = to_bf16(a), bh = to_bf16(b), ch = to_bf16(c);
      be.gemm(ta, tb, M, N, K, 0.5f, a.data(), lda, b.data(), ldb, 2.0f, c.data(), ldc);
      be.gemm(ta, tb, M, N, K, 0.5f, ah.data(), lda, bh.data(), ldb, 2.0f, ch.data(), ldc);
      CHECK(rounding_mismatches(ch, c) == 0);
      // beta = 0 ignores whatever C held, NaN included
      std::vector<bf16> cz(ch.size(), bf16(NAN));
      be.gemm(ta, tb, M, N, K, 1.0f, ah.data(), lda, bh.data(), ldb, 0.0f, cz.data(), ldc);
      for (index_t r = 0; r < M; ++r)
        for (index_t j = 0; j < N; ++j) CHECK(std::isfinite(static_cast<float>(cz[static_cast<std::size_t>(r * ldc + j)])));
    }
}

TEST_CASE("bf16 element ops round once: add, accumulate, mix, scale, gelu, silu, swiglu, rope") {
  backend::cpu be;
  const shape s{2, 3, 4, 8};  // (B, T, H, D) for rope
  const std::size_t n = static_cast<std::size_t>(s.numel());
  std::vector<float> a = bf16_values(n, 11, 2.0), b = bf16_values(n, 12), d = bf16_values(n, 13);
  std::vector<bf16> ah = to_bf16(a), bh = to_bf16(b), dh = to_bf16(d);
  std::vector<float> out(n);
  std::vector<bf16> outh(n);

  auto same = [&](const char* what) {
    INFO(what);
    CHECK(rounding_mismatches(outh, out) == 0);
  };
  ops::add(be, t(out, s), t(a, s), t(b, s));
  ops::add(be, t(outh, s), t(ah, s), t(bh, s));
  same("add");
  ops::mix(be, t(out, s), t(a, s), t(b, s), 0.3);
  ops::mix(be, t(outh, s), t(ah, s), t(bh, s), 0.3);
  same("mix");
  ops::gelu_forward(be, t(out, s), t(a, s), ops::gelu_kind::tanh);
  ops::gelu_forward(be, t(outh, s), t(ah, s), ops::gelu_kind::tanh);
  same("gelu tanh");
  ops::gelu_forward(be, t(out, s), t(a, s), ops::gelu_kind::erf);
  ops::gelu_forward(be, t(outh, s), t(ah, s), ops::gelu_kind::erf);
  same("gelu erf");
  ops::silu_forward(be, t(out, s), t(a, s));
  ops::silu_forward(be, t(outh, s), t(ah, s));
  same("silu");
  ops::swiglu_forward(be, t(out, s), t(a, s), t(b, s));
  ops::swiglu_forward(be, t(outh, s), t(ah, s), t(bh, s));
  same("swiglu");
  ops::rope_forward(be, t(out, s), t(a, s), 10000.0, 3);
  ops::rope_forward(be, t(outh, s), t(ah, s), 10000.0, 3);
  same("rope");

  // Backward ops accumulate: start from the same non-zero (bf16) values.
  auto reset = [&] {
    out = d;
    outh = dh;
  };
  reset();
  ops::accumulate(be, t(out, s), t(a, s));
  ops::accumulate(be, t(outh, s), t(ah, s));
  same("accumulate");
  reset();
  ops::scale(be, t(out, s), 0.37);
  ops::scale(be, t(outh, s), 0.37);
  same("scale");
  reset();
  ops::gelu_backward(be, t(out, s), t(b, s), t(a, s), ops::gelu_kind::tanh);
  ops::gelu_backward(be, t(outh, s), t(bh, s), t(ah, s), ops::gelu_kind::tanh);
  same("gelu backward");
  reset();
  ops::silu_backward(be, t(out, s), t(b, s), t(a, s));
  ops::silu_backward(be, t(outh, s), t(bh, s), t(ah, s));
  same("silu backward");
  reset();
  std::vector<float> dup = d;
  std::vector<bf16> duph = dh;
  ops::swiglu_backward(be, t(out, s), t(dup, s), t(b, s), t(a, s), t(d, s));
  ops::swiglu_backward(be, t(outh, s), t(duph, s), t(bh, s), t(ah, s), t(dh, s));
  same("swiglu backward (dgate)");
  CHECK(rounding_mismatches(duph, dup) == 0);
  reset();
  ops::rope_backward(be, t(out, s), t(a, s), 10000.0, 3);
  ops::rope_backward(be, t(outh, s), t(ah, s), 10000.0, 3);
  same("rope backward");
}

TEST_CASE("bf16 embedding, layernorm, rmsnorm and linear round once, forward and backward") {
  backend::cpu be;
  const index_t B = 2, T = 3, V = 11, C = 40, OC = 24, N = B * T;
  // Distinct tokens: each wte row then receives one increment, which the bf16 gradient rounds once.
  std::vector<std::int32_t> tok = {4, 0, 7, 10, 2, 5};
  const tensor tokens(tok.data(), shape{B, T});
  std::vector<float> wte = bf16_values(static_cast<std::size_t>(V * C), 21), wpe = bf16_values(static_cast<std::size_t>(T * C), 22);
  std::vector<bf16> wteh = to_bf16(wte), wpeh = to_bf16(wpe);
  const shape xs{B, T, C};
  std::vector<float> x(static_cast<std::size_t>(N * C));
  std::vector<bf16> xh(x.size());
  ops::embedding_forward(be, t(x, xs), tokens, t(wte, {V, C}), t(wpe, {T, C}));
  ops::embedding_forward(be, t(xh, xs), tokens, t(wteh, {V, C}), t(wpeh, {T, C}));
  CHECK(rounding_mismatches(xh, x) == 0);
  x = widen(xh);  // both paths continue from the same (bf16) values

  std::vector<float> dy = bf16_values(x.size(), 23);
  std::vector<bf16> dyh = to_bf16(dy);
  {
    std::vector<float> dwte = bf16_values(wte.size(), 24), dwpe = bf16_values(wpe.size(), 25);
    std::vector<bf16> dwteh = to_bf16(dwte), dwpeh = to_bf16(dwpe);
    ops::embedding_backward(be, t(dwte, {V, C}), t(dwpe, {T, C}), t(dy, xs), tokens);
    ops::embedding_backward(be, t(dwteh, {V, C}), t(dwpeh, {T, C}), t(dyh, xs), tokens);
    CHECK(rounding_mismatches(dwteh, dwte) == 0);
    CHECK(rounding_mismatches(dwpeh, dwpe) == 0);
  }

  std::vector<float> w = bf16_values(static_cast<std::size_t>(C), 26, 0.5), bias = bf16_values(static_cast<std::size_t>(C), 27, 0.1);
  for (float& v : w) v = bf16(1.0f + v);
  std::vector<bf16> wh = to_bf16(w), biash = to_bf16(bias);
  std::vector<float> y(x.size()), mean(static_cast<std::size_t>(N)), rstd(static_cast<std::size_t>(N));
  std::vector<bf16> yh(x.size()), meanh(mean.size()), rstdh(rstd.size());
  SUBCASE("layernorm") {
    ops::layernorm_forward(be, t(y, xs), t(mean, {N}), t(rstd, {N}), t(x, xs), t(w, {C}), t(bias, {C}));
    ops::layernorm_forward(be, t(yh, xs), t(meanh, {N}), t(rstdh, {N}), t(xh, xs), t(wh, {C}), t(biash, {C}));
    CHECK(rounding_mismatches(yh, y) == 0);
    CHECK(rounding_mismatches(meanh, mean) == 0);
    CHECK(rounding_mismatches(rstdh, rstd) == 0);
    // The backward reads the saved statistics, which bf16 stores rounded: give the f32 op the same.
    mean = widen(meanh);
    rstd = widen(rstdh);
    std::vector<float> dx = bf16_values(x.size(), 28), dw = bf16_values(w.size(), 29), db = bf16_values(w.size(), 30);
    std::vector<bf16> dxh = to_bf16(dx), dwh = to_bf16(dw), dbh = to_bf16(db);
    ops::layernorm_backward(be, t(dx, xs), t(dw, {C}), t(db, {C}), t(dy, xs), t(x, xs), t(w, {C}), t(mean, {N}), t(rstd, {N}));
    ops::layernorm_backward(be, t(dxh, xs), t(dwh, {C}), t(dbh, {C}), t(dyh, xs), t(xh, xs), t(wh, {C}), t(meanh, {N}),
                            t(rstdh, {N}));
    CHECK(rounding_mismatches(dxh, dx) == 0);
    CHECK(rounding_mismatches(dwh, dw) == 0);
    CHECK(rounding_mismatches(dbh, db) == 0);
  }
  SUBCASE("rmsnorm") {
    ops::rmsnorm_forward(be, t(y, xs), t(rstd, {N}), t(x, xs), t(w, {C}), 1e-6);
    ops::rmsnorm_forward(be, t(yh, xs), t(rstdh, {N}), t(xh, xs), t(wh, {C}), 1e-6);
    CHECK(rounding_mismatches(yh, y) == 0);
    CHECK(rounding_mismatches(rstdh, rstd) == 0);
    rstd = widen(rstdh);
    std::vector<float> dx = bf16_values(x.size(), 31), dw = bf16_values(w.size(), 32);
    std::vector<bf16> dxh = to_bf16(dx), dwh = to_bf16(dw);
    ops::rmsnorm_backward(be, t(dx, xs), t(dw, {C}), t(dy, xs), t(x, xs), t(w, {C}), t(rstd, {N}));
    ops::rmsnorm_backward(be, t(dxh, xs), t(dwh, {C}), t(dyh, xs), t(xh, xs), t(wh, {C}), t(rstdh, {N}));
    CHECK(rounding_mismatches(dxh, dx) == 0);
    CHECK(rounding_mismatches(dwh, dw) == 0);
  }
  SUBCASE("linear") {
    std::vector<float> W = bf16_values(static_cast<std::size_t>(OC * C), 33, 0.2), bo = bf16_values(static_cast<std::size_t>(OC), 34);
    std::vector<bf16> Wh = to_bf16(W), boh = to_bf16(bo);
    const shape os{B, T, OC};
    std::vector<float> o(static_cast<std::size_t>(N * OC));
    std::vector<bf16> oh(o.size());
    ops::linear_forward(be, t(o, os), t(x, xs), t(W, {OC, C}), t(bo, {OC}));
    ops::linear_forward(be, t(oh, os), t(xh, xs), t(Wh, {OC, C}), t(boh, {OC}));
    CHECK(rounding_mismatches(oh, o) == 0);
    std::vector<float> g = bf16_values(o.size(), 35), dx = bf16_values(x.size(), 36), dW = bf16_values(W.size(), 37),
                       dbo = bf16_values(bo.size(), 38);
    std::vector<bf16> gh = to_bf16(g), dxh = to_bf16(dx), dWh = to_bf16(dW), dboh = to_bf16(dbo);
    ops::linear_backward(be, t(dx, xs), t(dW, {OC, C}), t(dbo, {OC}), t(g, os), t(x, xs), t(W, {OC, C}));
    ops::linear_backward(be, t(dxh, xs), t(dWh, {OC, C}), t(dboh, {OC}), t(gh, os), t(xh, xs), t(Wh, {OC, C}));
    CHECK(rounding_mismatches(dxh, dx) == 0);
    CHECK(rounding_mismatches(dWh, dW) == 0);
    CHECK(rounding_mismatches(dboh, dbo) == 0);
  }
}

TEST_CASE("bf16 cross-entropy and distillation losses: gradients round once, losses within the rounding of their partials") {
  backend::cpu be;
  const index_t N = 6, V = 50;
  const shape ls{N, V};
  std::vector<float> logits = bf16_values(static_cast<std::size_t>(N * V), 41, 3.0), teacher = bf16_values(logits.size(), 42, 3.0);
  std::vector<bf16> logitsh = to_bf16(logits), teacherh = to_bf16(teacher);
  std::vector<std::int32_t> tg = {3, -1, 49, 0, 17, 8};
  const tensor targets(tg.data(), shape{N});
  std::vector<float> d = bf16_values(logits.size(), 43), rl(static_cast<std::size_t>(N)), scratch(static_cast<std::size_t>(2 * N));
  std::vector<bf16> dh = to_bf16(d), rlh(rl.size()), scratchh(scratch.size());

  const double ce = ops::cross_entropy(be, t(d, ls), t(rl, {N}), t(logits, ls), targets, 1.0);
  const double ceh = ops::cross_entropy(be, t(dh, ls), t(rlh, {N}), t(logitsh, ls), targets, 1.0);
  CHECK(rounding_mismatches(rlh, rl) == 0);
  CHECK(rounding_mismatches(dh, d) == 0);
  // The mean of row losses each rounded to relative u/2.
  CHECK(std::abs(ceh - ce) <= 0.5 * bf16_u * ce);

  using loss_fn = double (*)(backend::cpu&, const tensor&, const tensor&, const tensor&, const tensor&, double);
  const std::pair<const char*, loss_fn> losses[] = {
      {"mse", [](backend::cpu& b, const tensor& ds, const tensor& sc, const tensor& s, const tensor& tt, double g) {
         return ops::mse_loss(b, ds, sc, s, tt, g);
       }},
      {"nmse", [](backend::cpu& b, const tensor& ds, const tensor& sc, const tensor& s, const tensor& tt, double g) {
         return ops::nmse_loss(b, ds, sc, s, tt, g);
       }},
      {"cosine", [](backend::cpu& b, const tensor& ds, const tensor& sc, const tensor& s, const tensor& tt, double g) {
         return ops::cosine_loss(b, ds, sc, s, tt, g);
       }},
      {"logit kl", [](backend::cpu& b, const tensor& ds, const tensor& sc, const tensor& s, const tensor& tt, double g) {
         return ops::logit_kl_loss(b, ds, sc, s, tt, 2.0, g);
       }},
  };
  for (const auto& entry : losses) {
    const char* name = entry.first;
    const loss_fn fn = entry.second;
    INFO(name);
    std::vector<float> ds = bf16_values(logits.size(), 44);
    std::vector<bf16> dsh = to_bf16(ds);
    const double l = fn(be, t(ds, ls), t(scratch, {2 * N}), t(logits, ls), t(teacher, ls), 0.5);
    const double lh = fn(be, t(dsh, ls), t(scratchh, {2 * N}), t(logitsh, ls), t(teacherh, ls), 0.5);
    if (std::string(name) != "nmse") CHECK(rounding_mismatches(dsh, ds) == 0);
    // Per-row partials rounded to relative u/2 each (for nmse also the reference sum, hence u).
    CHECK(std::abs(lh - l) <= bf16_u * std::abs(l));
    CHECK(lh > 0);
  }
}

TEST_CASE("bf16 attention (stored scores and probabilities) stays within a few units of bf16 roundoff of f32") {
  backend::cpu be;
  const index_t B = 2, T = 9, H = 4, KVH = 2, D = 16;
  const shape qs{B, T, H, D}, ks{B, T, KVH, D}, ps{B, H, T, T};
  std::vector<float> q = bf16_values(static_cast<std::size_t>(qs.numel()), 51), k = bf16_values(static_cast<std::size_t>(ks.numel()), 52),
                     v = bf16_values(static_cast<std::size_t>(ks.numel()), 53), g = bf16_values(q.size(), 54);
  std::vector<bf16> qh = to_bf16(q), kh = to_bf16(k), vh = to_bf16(v), gh = to_bf16(g);
  for (bool causal : {true, false}) {
    CAPTURE(causal);
    std::vector<float> out(q.size()), p(static_cast<std::size_t>(ps.numel())), dp(p.size()), dq(q.size()), dk(k.size()), dv(v.size());
    std::vector<bf16> outh(out.size()), ph(p.size()), dph(p.size()), dqh(q.size()), dkh(k.size()), dvh(v.size());
    ops::attention_forward(be, t(out, qs), t(p, ps), t(q, qs), t(k, ks), t(v, ks), causal);
    ops::attention_forward(be, t(outh, qs), t(ph, ps), t(qh, qs), t(kh, ks), t(vh, ks), causal);
    ops::attention_backward(be, t(dq, qs), t(dk, ks), t(dv, ks), t(dp, ps), t(g, qs), t(q, qs), t(k, ks), t(v, ks), t(p, ps), causal);
    ops::attention_backward(be, t(dqh, qs), t(dkh, ks), t(dvh, ks), t(dph, ps), t(gh, qs), t(qh, qs), t(kh, ks), t(vh, ks),
                            t(ph, ps), causal);
    // Each stored score moves its probability by up to |s| u/2 relative (|s| <= ~3 here, so mostly far
    // less), the stored probability and the stored output add u/2 each; errors of different entries
    // partly cancel in the products. Measured (relative to the largest entry): forward 0.5u to 0.8u,
    // backward 0.7u to 1.2u.
    const double fwd = test::rel_error(widen(outh), out), bwd_q = test::rel_error(widen(dqh), dq),
                 bwd_k = test::rel_error(widen(dkh), dk), bwd_v = test::rel_error(widen(dvh), dv);
    MESSAGE("attention bf16 vs f32, causal=", causal, ": out ", fwd / bf16_u, "u, dq ", bwd_q / bf16_u, "u, dk ", bwd_k / bf16_u,
            "u, dv ", bwd_v / bf16_u, "u");
    CHECK(fwd < 3 * bf16_u);
    CHECK(bwd_q < 4 * bf16_u);
    CHECK(bwd_k < 4 * bf16_u);
    CHECK(bwd_v < 4 * bf16_u);
    // Causal rows: the masked probabilities are exact zeros in bf16 too.
    if (causal) CHECK(static_cast<float>(ph[1]) == 0.0f);
  }
}

TEST_CASE("AdamW on bf16 parameters: an f32 master copy that follows the f32 optimiser exactly, rounded into the parameters") {
  backend::cpu be;
  const index_t n = 1000;
  std::vector<float> p32 = bf16_values(static_cast<std::size_t>(n), 61, 0.05);
  std::vector<bf16> p16 = to_bf16(p32);
  const optim::adamw_config cfg{.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  optim::adamw<backend::cpu> opt32(be, t(p32, {n}), cfg), opt16(be, t(p16, {n}), cfg);
  REQUIRE(opt16.m().type == dtype::f32);
  REQUIRE(opt16.master().type == dtype::f32);
  CHECK(opt32.master().data == nullptr);
  for (int step = 0; step < 5; ++step) {
    std::vector<float> g = bf16_values(static_cast<std::size_t>(n), 62 + static_cast<std::uint64_t>(step));
    std::vector<bf16> gh = to_bf16(g);
    opt32.step(t(g, {n}), 1e-2);
    opt16.step(t(gh, {n}), 1e-2);
    const float* master = opt16.master().ptr<float>();
    CHECK(std::memcmp(master, p32.data(), p32.size() * sizeof(float)) == 0);
    CHECK(rounding_mismatches(p16, p32) == 0);
  }
  // The saved state carries the master copy: a fresh optimiser over other values continues exactly.
  const std::vector<char> state = opt16.save_state();
  std::vector<bf16> other(p16.size(), bf16(0.0f));
  optim::adamw<backend::cpu> resumed(be, t(other, {n}), cfg);
  resumed.load_state(state);
  std::vector<float> g = bf16_values(static_cast<std::size_t>(n), 99);
  std::vector<bf16> gh = to_bf16(g);
  opt16.step(t(gh, {n}), 1e-2);
  resumed.step(t(gh, {n}), 1e-2);
  CHECK(std::memcmp(resumed.master().ptr<float>(), opt16.master().ptr<float>(), static_cast<std::size_t>(n) * sizeof(float)) == 0);
  CHECK(std::memcmp(other.data(), p16.data(), p16.size() * sizeof(bf16)) == 0);
  // reset_master takes the parameters as they are now.
  for (bf16& x : other) x = bf16(0.25f);
  resumed.reset_master();
  CHECK(resumed.master().ptr<float>()[7] == 0.25f);

  // Parameters written after the optimiser was built (a model initialised later) are what the first
  // step starts from.
  std::vector<bf16> late(p16.size(), bf16(0.0f));
  optim::adamw<backend::cpu> late_opt(be, t(late, {n}), cfg);
  std::vector<float> late32 = bf16_values(static_cast<std::size_t>(n), 70, 0.05);
  for (std::size_t i = 0; i < late.size(); ++i) late[i] = bf16(late32[i]);
  optim::adamw<backend::cpu> ref32(be, t(late32, {n}), cfg);
  late_opt.step(t(gh, {n}), 1e-2);
  ref32.step(t(g, {n}), 1e-2);
  CHECK(rounding_mismatches(late, late32) == 0);

  // A state saved from f32 parameters does not load into the bf16 optimiser, and the moments must be f32.
  CHECK_THROWS_WITH_AS(opt16.load_state(opt32.save_state()), doctest::Contains("adamw::load: state holds dtype f32, this optimiser has bf16"),
                       lwcl::error);
  std::vector<bf16> m16(static_cast<std::size_t>(n)), v16(static_cast<std::size_t>(n));
  CHECK_THROWS_WITH_AS(optim::adamw_step(be, t(p16, {n}), t(gh, {n}), t(m16, {n}), t(v16, {n}), cfg, 1, 1e-3),
                       doctest::Contains("adamw_step: m has dtype bf16, expected f32 (the compute type of bf16 parameters)"),
                       lwcl::error);
  std::vector<float> m32(static_cast<std::size_t>(n)), v32(static_cast<std::size_t>(n));
  CHECK_THROWS_WITH_AS(optim::adamw_step(be, t(p16, {n}), t(gh, {n}), t(m32, {n}), t(v32, {n}), cfg, 1, 1e-3),
                       doctest::Contains("adamw_step: bf16 parameters need an f32 master copy, none was given"), lwcl::error);
}

TEST_CASE("an op given an integer tensor names the dtypes it takes") {
  backend::cpu be;
  std::vector<std::int32_t> ints(8);
  CHECK_THROWS_WITH_AS(ops::scale(be, tensor(ints.data(), shape{8}), 2.0),
                       doctest::Contains("scale: dtype i32 is not supported here (expected f32, f64 or bf16)"), lwcl::error);
}
