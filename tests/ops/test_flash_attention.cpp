// Flash attention: forward, lse and backward against the materialised attention op (whose own oracle is
// PyTorch) on random inputs, for MHA and GQA, causal and bidirectional, at lengths that are and are not
// multiples of the tile; lse against a log-sum-exp computed here in double; finite-difference
// gradients; accumulation, determinism and argument checks.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/ops/attention.hpp"
#include "lwcl/ops/flash_attention.hpp"
#include "support/check.hpp"

using namespace lwcl;
using lwcl::test::rel_error;

namespace {

struct config {
  index_t B, L, H, KVH, D;
  bool causal;
  std::string str() const {
    return "B=" + std::to_string(B) + " T=" + std::to_string(L) + " H=" + std::to_string(H) + " KVH=" + std::to_string(KVH) +
           " D=" + std::to_string(D) + (causal ? " causal" : " bidirectional");
  }
};

// Both ops on the same inputs. The gradient buffers start from the same nonzero values, so the
// comparison also covers accumulation.
template <class T>
struct flash_case {
  config c;
  shape qs{c.B, c.L, c.H, c.D}, ks{c.B, c.L, c.KVH, c.D}, ps{c.B, c.H, c.L, c.L}, ls{c.B, c.H, c.L};
  std::uint64_t seed = static_cast<std::uint64_t>(c.B * 1000003 + c.L * 1009 + c.H * 101 + c.KVH * 11 + c.D + c.causal);
  std::vector<T> q = rand(qs, 1), k = rand(ks, 2), v = rand(ks, 3), dout = rand(qs, 4);
  std::vector<T> dq0 = rand(qs, 5), dk0 = rand(ks, 6), dv0 = rand(ks, 7);
  // materialised
  std::vector<T> out = filled(qs), probs = filled(ps), dprobs = filled(ps), dq = dq0, dk = dk0, dv = dv0;
  // flash; out and lse start from garbage, which the forward must overwrite
  std::vector<T> fout = filled(qs), lse = filled(ls), delta = filled(ls), fdq = dq0, fdk = dk0, fdv = dv0;
  backend::cpu be;

  explicit flash_case(config cfg) : c(cfg) {}

  std::vector<T> rand(const shape& s, std::uint64_t stream) const {
    return test::random_normal<T>(static_cast<std::size_t>(s.numel()), seed * 16 + stream);
  }
  static std::vector<T> filled(const shape& s) { return std::vector<T>(static_cast<std::size_t>(s.numel()), T(7)); }

  void reference() {
    ops::attention_forward(be, tensor(out.data(), qs), tensor(probs.data(), ps), tensor(q.data(), qs), tensor(k.data(), ks),
                           tensor(v.data(), ks), c.causal);
    ops::attention_backward(be, tensor(dq.data(), qs), tensor(dk.data(), ks), tensor(dv.data(), ks), tensor(dprobs.data(), ps),
                            tensor(dout.data(), qs), tensor(q.data(), qs), tensor(k.data(), ks), tensor(v.data(), ks),
                            tensor(probs.data(), ps), c.causal);
  }
  void forward() {
    ops::flash_attention_forward(be, tensor(fout.data(), qs), tensor(lse.data(), ls), tensor(q.data(), qs),
                                 tensor(k.data(), ks), tensor(v.data(), ks), c.causal);
  }
  void backward() {
    ops::flash_attention_backward(be, tensor(fdq.data(), qs), tensor(fdk.data(), ks), tensor(fdv.data(), ks),
                                  tensor(delta.data(), ls), tensor(dout.data(), qs), tensor(q.data(), qs), tensor(k.data(), ks),
                                  tensor(v.data(), ks), tensor(fout.data(), qs), tensor(lse.data(), ls), c.causal);
  }

  // log sum_j exp(q_t . k_j / sqrt(D)) over the visible keys, in double with its own max shift.
  std::vector<double> lse_in_double() const {
    std::vector<double> r(static_cast<std::size_t>(ls.numel()));
    const index_t G = c.H / c.KVH;
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.D));
    for (index_t b = 0; b < c.B; ++b)
      for (index_t h = 0; h < c.H; ++h)
        for (index_t t = 0; t < c.L; ++t) {
          const index_t n = c.causal ? t + 1 : c.L;
          std::vector<double> s(static_cast<std::size_t>(n));
          for (index_t j = 0; j < n; ++j) {
            double dot = 0;
            for (index_t e = 0; e < c.D; ++e)
              dot += static_cast<double>(q[static_cast<std::size_t>(((b * c.L + t) * c.H + h) * c.D + e)]) *
                     static_cast<double>(k[static_cast<std::size_t>(((b * c.L + j) * c.KVH + h / G) * c.D + e)]);
            s[static_cast<std::size_t>(j)] = scale * dot;
          }
          const double m = *std::max_element(s.begin(), s.end());
          double sum = 0;
          for (double x : s) sum += std::exp(x - m);
          r[static_cast<std::size_t>((b * c.H + h) * c.L + t)] = m + std::log(sum);
        }
    return r;
  }
};

// MHA and GQA (and MQA), causal and bidirectional; T = 37 and 5 are not multiples of the tile (16),
// T = 32 is exactly two tiles, T = 1 has one key per row.
const config configs[] = {
    {2, 37, 4, 4, 8, true},  {2, 37, 4, 4, 8, false}, {2, 37, 6, 2, 16, true}, {2, 37, 6, 2, 16, false},
    {1, 32, 6, 3, 8, true},  {1, 5, 4, 1, 12, false}, {3, 1, 6, 2, 8, true},   {3, 1, 6, 2, 8, false},
};

}  // namespace

TEST_CASE_TEMPLATE("flash attention forward and backward equal the materialised attention op", T, float, double) {
  // f64: the two ops differ only in summation order. f32: by the rounding of scores, exponentials
  // and sums (a few ulp, growing with T), larger for gradients where dS = P (dP - Delta) cancels.
  const double fwd_tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  const double bwd_tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  for (const config& cfg : configs) {
    const std::string name = cfg.str();
    CAPTURE(name);
    flash_case<T> c(cfg);
    c.reference();
    c.forward();
    c.backward();
    CHECK(rel_error(c.fout, c.out) < fwd_tol);
    CHECK(rel_error(c.fdq, c.dq) < bwd_tol);
    CHECK(rel_error(c.fdk, c.dk) < bwd_tol);
    CHECK(rel_error(c.fdv, c.dv) < bwd_tol);
    // The gradients that were added are not negligible next to the starting values, except that with
    // one key per row the softmax is constant: q and k then get exactly nothing.
    if (cfg.L > 1) {
      CHECK(rel_error(c.fdq, c.dq0) > 1e-3);
      CHECK(rel_error(c.fdk, c.dk0) > 1e-3);
    } else {
      CHECK(c.fdq == c.dq0);
      CHECK(c.fdk == c.dk0);
    }
    CHECK(rel_error(c.fdv, c.dv0) > 1e-3);
  }
}

TEST_CASE_TEMPLATE("flash attention lse is the log-sum-exp of each row's scaled scores", T, float, double) {
  const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-14;
  for (const config& cfg : configs) {
    const std::string name = cfg.str();
    CAPTURE(name);
    flash_case<T> c(cfg);
    c.forward();
    CHECK(rel_error(c.lse, c.lse_in_double()) < tol);
  }
}

TEST_CASE("flash attention keeps the running max: scores far beyond exp's range stay finite") {
  // q scaled so that scores reach several thousand, where exp overflows even in double: each tile's
  // new maximum must rescale the earlier tiles' sums instead of exponentiating raw scores.
  for (bool causal : {true, false}) {
    CAPTURE(causal);
    flash_case<double> c({1, 40, 4, 2, 16, causal});
    for (double& x : c.q) x *= 800.0;
    c.reference();
    c.forward();
    c.backward();
    CHECK(rel_error(c.fout, c.out) < 1e-12);
    CHECK(rel_error(c.fdv, c.dv) < 1e-12);
    const auto want = c.lse_in_double();
    CHECK(*std::max_element(want.begin(), want.end()) > 1000.0);
    CHECK(rel_error(c.lse, want) < 1e-14);
  }
}

TEST_CASE("flash attention delta holds dout . out per query row") {
  flash_case<double> c({2, 37, 6, 2, 16, true});
  c.forward();
  c.backward();
  std::vector<double> want(c.delta.size());
  for (index_t b = 0; b < c.c.B; ++b)
    for (index_t h = 0; h < c.c.H; ++h)
      for (index_t t = 0; t < c.c.L; ++t) {
        double s = 0;
        for (index_t e = 0; e < c.c.D; ++e) {
          const auto at = static_cast<std::size_t>(((b * c.c.L + t) * c.c.H + h) * c.c.D + e);
          s += c.dout[at] * c.fout[at];
        }
        want[static_cast<std::size_t>((b * c.c.H + h) * c.c.L + t)] = s;
      }
  CHECK(rel_error(c.delta, want) < 1e-14);
}

TEST_CASE("flash attention gradients match finite differences") {
  for (const config& cfg : {config{2, 19, 6, 2, 8, true}, config{1, 19, 4, 4, 8, false}, config{2, 1, 4, 2, 8, true}}) {
    const std::string name = cfg.str();
    CAPTURE(name);
    flash_case<double> c(cfg);
    std::fill(c.fdq.begin(), c.fdq.end(), 0.0);
    std::fill(c.fdk.begin(), c.fdk.end(), 0.0);
    std::fill(c.fdv.begin(), c.fdv.end(), 0.0);
    c.forward();
    c.backward();
    // The step of the attention test, for the same reason: small gradient entries against rounding.
    const double step = 1e-4;
    auto loss = [&] {
      c.forward();
      return test::dot(c.fout, c.dout);
    };
    CHECK(test::gradcheck(c.q, c.fdq, loss, step) < 1e-6);
    CHECK(test::gradcheck(c.k, c.fdk, loss, step) < 1e-6);
    CHECK(test::gradcheck(c.v, c.fdv, loss, step) < 1e-6);
  }
}

TEST_CASE("flash attention backward is deterministic across parallel runs") {
  // Large enough for both functors to be split over threads.
  flash_case<float> c({2, 160, 8, 2, 32, false});
  c.forward();
  const auto out1 = c.fout, lse1 = c.lse;
  std::fill(c.fdq.begin(), c.fdq.end(), 0.0f);
  std::fill(c.fdk.begin(), c.fdk.end(), 0.0f);
  std::fill(c.fdv.begin(), c.fdv.end(), 0.0f);
  c.backward();
  const auto dq1 = c.fdq, dk1 = c.fdk, dv1 = c.fdv;
  c.forward();
  std::fill(c.fdq.begin(), c.fdq.end(), 0.0f);
  std::fill(c.fdk.begin(), c.fdk.end(), 0.0f);
  std::fill(c.fdv.begin(), c.fdv.end(), 0.0f);
  c.backward();
  CHECK(c.fout == out1);
  CHECK(c.lse == lse1);
  CHECK(c.fdq == dq1);
  CHECK(c.fdk == dk1);
  CHECK(c.fdv == dv1);
}

TEST_CASE("flash attention under the causal mask gives later keys no gradient from earlier queries") {
  flash_case<double> c({1, 21, 4, 2, 8, true});
  std::fill(c.fdk.begin(), c.fdk.end(), 0.0);
  std::fill(c.fdv.begin(), c.fdv.end(), 0.0);
  // dout nonzero only at the first three tokens: keys 3.. are seen only by queries whose dout is 0.
  const index_t row_q = c.c.H * c.c.D, row_kv = c.c.KVH * c.c.D;
  std::fill(c.dout.begin() + 3 * row_q, c.dout.end(), 0.0);
  c.forward();
  c.backward();
  for (index_t t = 0; t < c.c.L; ++t)
    for (index_t e = 0; e < row_kv; ++e) {
      const auto at = static_cast<std::size_t>(t * row_kv + e);
      if (t >= 3) {
        CHECK(c.fdk[at] == 0.0);
        CHECK(c.fdv[at] == 0.0);
      }
    }
  CHECK(c.fdv[0] != 0.0);
}

TEST_CASE("flash attention rejects bad lse and delta shapes, indivisible heads and mixed dtypes") {
  backend::cpu be;
  const index_t B = 1, L = 3, D = 4;
  auto buf = [](index_t n) { return std::vector<float>(static_cast<std::size_t>(n)); };
  auto q = buf(B * L * 6 * D), k = buf(B * L * 4 * D), v = buf(B * L * 4 * D), out = buf(B * L * 6 * D);
  auto lse = buf(B * 6 * L), delta = buf(B * 6 * L), dq = buf(B * L * 6 * D), dk = buf(B * L * 4 * D), dv = buf(B * L * 4 * D);
  const shape qs{B, L, 6, D}, ks{B, L, 4, D}, ls{B, 6, L}, ks2{B, L, 2, D};
  CHECK_THROWS_WITH_AS(ops::flash_attention_forward(be, tensor(out.data(), qs), tensor(lse.data(), ls), tensor(q.data(), qs),
                                                    tensor(k.data(), ks), tensor(v.data(), ks), true),
                       doctest::Contains("flash_attention_forward: the 6 query heads (q [1, 3, 6, 4]) cannot be split evenly "
                                         "over the 4 kv heads"),
                       lwcl::error);
  CHECK_THROWS_WITH_AS(ops::flash_attention_backward(be, tensor(dq.data(), qs), tensor(dk.data(), ks), tensor(dv.data(), ks),
                                                     tensor(delta.data(), ls), tensor(out.data(), qs), tensor(q.data(), qs),
                                                     tensor(k.data(), ks), tensor(v.data(), ks), tensor(out.data(), qs),
                                                     tensor(lse.data(), ls), false),
                       doctest::Contains("flash_attention_backward: the 6 query heads"), lwcl::error);
  // From here on a valid GQA layout (KVH = 2).
  CHECK_THROWS_WITH_AS(ops::flash_attention_forward(be, tensor(out.data(), qs), tensor(lse.data(), {B, L, 6}),
                                                    tensor(q.data(), qs), tensor(k.data(), ks2), tensor(v.data(), ks2), true),
                       doctest::Contains("flash_attention_forward: lse has shape [1, 3, 6], expected [1, 6, 3]"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::flash_attention_forward(be, tensor(out.data(), qs), tensor(), tensor(q.data(), qs),
                                                    tensor(k.data(), ks2), tensor(v.data(), ks2), true),
                       doctest::Contains("flash_attention_forward: lse has shape [], expected [1, 6, 3]"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::flash_attention_backward(be, tensor(dq.data(), qs), tensor(dk.data(), ks2), tensor(dv.data(), ks2),
                                                     tensor(delta.data(), {B, 6, L - 1}), tensor(out.data(), qs),
                                                     tensor(q.data(), qs), tensor(k.data(), ks2), tensor(v.data(), ks2),
                                                     tensor(out.data(), qs), tensor(lse.data(), ls), false),
                       doctest::Contains("flash_attention_backward: delta has shape [1, 6, 2], expected [1, 6, 3]"),
                       lwcl::error);
  CHECK_THROWS_WITH_AS(ops::flash_attention_backward(be, tensor(dq.data(), qs), tensor(dk.data(), ks2), tensor(dv.data(), ks2),
                                                     tensor(delta.data(), ls), tensor(out.data(), qs), tensor(q.data(), qs),
                                                     tensor(k.data(), ks2), tensor(v.data(), ks2), tensor(out.data(), qs),
                                                     tensor(lse.data(), {B, 6, L + 1}), false),
                       doctest::Contains("flash_attention_backward: lse has shape [1, 6, 4], expected [1, 6, 3]"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::flash_attention_backward(be, tensor(dq.data(), qs), tensor(dk.data(), ks), tensor(dv.data(), ks2),
                                                     tensor(delta.data(), ls), tensor(out.data(), qs), tensor(q.data(), qs),
                                                     tensor(k.data(), ks2), tensor(v.data(), ks2), tensor(out.data(), qs),
                                                     tensor(lse.data(), ls), false),
                       doctest::Contains("flash_attention_backward: dk has shape [1, 3, 4, 4], expected [1, 3, 2, 4]"),
                       lwcl::error);
  std::vector<double> lse_d(lse.size()), delta_d(delta.size());
  CHECK_THROWS_WITH_AS(ops::flash_attention_forward(be, tensor(out.data(), qs), tensor(lse_d.data(), ls), tensor(q.data(), qs),
                                                    tensor(k.data(), ks2), tensor(v.data(), ks2), true),
                       doctest::Contains("flash_attention_forward: lse has dtype f64, expected f32"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::flash_attention_backward(be, tensor(dq.data(), qs), tensor(dk.data(), ks2), tensor(dv.data(), ks2),
                                                     tensor(delta_d.data(), ls), tensor(out.data(), qs), tensor(q.data(), qs),
                                                     tensor(k.data(), ks2), tensor(v.data(), ks2), tensor(out.data(), qs),
                                                     tensor(lse.data(), ls), false),
                       doctest::Contains("flash_attention_backward: delta has dtype f64, expected f32"), lwcl::error);
}
