// gemm::onednn_bf16 (backend/host/gemm_onednn_bf16.hpp) and LWCL_GEMM_PRECISION: on a CPU with
// AVX512-BF16 or AMX, every transpose combination, odd sizes, padded leading dimensions and alpha/beta
// against a double-precision GEMM of the operands rounded to bf16 (the same products: f32 accumulation's
// rounding alone) and against the exact f32 operands within bf16's rounding bound; one primitive per shape,
// reused; an empty inner dimension; a 10-step descent on a linear least-squares problem that follows the
// f32 one within bf16 rounding. The precision's decision with scripted machines: bf16 where the CPU has
// it, refused with the reason elsewhere, against a forced provider and for an unknown value; --dtype in
// LWCL_GEMM_PRECISION's place (request_precision: checked at once, refused once the GEMMs have decided).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lwcl/backend/host/gemm_choice.hpp"
#include "lwcl/backend/host/gemm_naive.hpp"
#include "lwcl/tensor/dtype.hpp"
#include "support/check.hpp"

using namespace lwcl;
using gemm::choice::provider;

namespace {

gemm::choice::machine machine_with(std::vector<std::string> features) {
  gemm::choice::machine m;
  m.hostname = "test-host";
  m.cpu_model = "Test CPU";
  m.features = std::move(features);
  m.onednn_isa = "cpu_isa_test";
  return m;
}

gemm::choice::inputs inputs_on(const gemm::choice::machine& m) {
  gemm::choice::inputs in;
  in.host = m;
  in.threads = 2;
  in.providers = {provider::openblas, provider::onednn};
  in.measure = [](const std::vector<provider>&) -> std::vector<gemm::choice::timing> {
    FAIL("a bf16 decision measures nothing");
    return {};
  };
  return in;
}

}  // namespace

TEST_CASE("LWCL_GEMM_PRECISION: bf16 where the CPU has AVX512-BF16 or AMX, refused with the reason elsewhere") {
  for (const auto& features : {std::vector<std::string>{"avx2", "avx512f", "avx512_bf16"},
                               std::vector<std::string>{"avx2", "avx512f", "amx_tile"}}) {
    auto in = inputs_on(machine_with(features));
    in.precision = "bf16";
    const auto d = gemm::choice::decide(in);
    CHECK(d.bf16);
    CHECK(d.p == provider::onednn);
    CHECK(!d.measured);
    CHECK(d.origin == "LWCL_GEMM_PRECISION=bf16");
    CHECK(gemm::choice::describe(d).rfind("lwcl gemm: onednn bf16 (bf16 operands, f32 accumulation", 0) == 0);
    in.forced = "onednn";  // forcing the provider bf16 runs on is no contradiction
    CHECK(gemm::choice::decide(in).bf16);
  }
  auto in = inputs_on(machine_with({"avx2", "fma", "avx512f"}));
  in.precision = "bf16";
  CHECK_THROWS_WITH_AS(gemm::choice::decide(in),
                       "LWCL_GEMM_PRECISION=bf16 needs a CPU with AVX512-BF16 or AMX; this one (Test CPU) has neither",
                       lwcl::error);
  in = inputs_on(machine_with({"avx512_bf16"}));
  in.precision = "bf16";
  in.forced = "openblas";
  CHECK_THROWS_WITH_AS(gemm::choice::decide(in),
                       "LWCL_GEMM_PRECISION=bf16 runs on oneDNN, but LWCL_GEMM=openblas forces another provider",
                       lwcl::error);
  in.forced = "";
  in.providers = {provider::openblas};
  CHECK_THROWS_WITH_AS(gemm::choice::decide(in), doctest::Contains("which is not compiled into this program"),
                       lwcl::error);
  in.precision = "fp16";
  CHECK_THROWS_WITH_AS(gemm::choice::decide(in), "LWCL_GEMM_PRECISION=fp16: expected f32 or bf16", lwcl::error);
  for (const char* f32 : {"", "f32"}) {  // f32: the usual decision (here the only provider, not measured)
    in.precision = f32;
    const auto d = gemm::choice::decide(in);
    CHECK(!d.bf16);
    CHECK(d.p == provider::openblas);
  }
}

TEST_CASE("--dtype takes LWCL_GEMM_PRECISION's place and names itself in the decision and the refusals") {
  auto in = inputs_on(machine_with({"avx2", "avx512f", "avx512_bf16"}));
  in.precision = "bf16";
  in.precision_source = "--dtype";
  const auto d = gemm::choice::decide(in);
  CHECK(d.bf16);
  CHECK(d.origin == "--dtype bf16");
  in.host = machine_with({"avx2", "avx512f"});
  CHECK_THROWS_WITH_AS(gemm::choice::decide(in), "--dtype bf16 needs a CPU with AVX512-BF16 or AMX; this one (Test CPU) has neither",
                       lwcl::error);
  in.precision = "f16";
  CHECK_THROWS_WITH_AS(gemm::choice::decide(in), "--dtype f16: expected f32 or bf16", lwcl::error);

  // request_precision checks at once on this machine and build, and leaves nothing behind when it refuses.
  auto& r = gemm::choice::requested_precision();
  const auto before = r;
  CHECK_THROWS_WITH_AS(gemm::choice::request_precision("f16", "--dtype"), "--dtype f16: expected f32 or bf16", lwcl::error);
  CHECK(r.value == before.value);
  CHECK(r.source == before.source);
  const auto host = gemm::choice::this_machine();
  const auto compiled = gemm::choice::compiled_in();
  const bool bf16_here = host.has_bf16() && std::find(compiled.begin(), compiled.end(), provider::onednn) != compiled.end();
  if (!bf16_here) {
    CHECK_THROWS_WITH_AS(gemm::choice::request_precision("bf16", "--dtype"), doctest::Contains("--dtype bf16"), lwcl::error);
    CHECK(r.source == before.source);
  }
  // Once the GEMMs have decided, a request for the other precision is refused; the same one is no change.
  auto& decided = gemm::choice::decided_bf16();
  const auto was = decided;
  decided = false;
  CHECK_NOTHROW(gemm::choice::request_precision("f32", "--dtype"));
  CHECK(r.value == "f32");
  CHECK(r.source == "--dtype");
  if (bf16_here)
    CHECK_THROWS_WITH_AS(gemm::choice::request_precision("bf16", "--dtype"),
                         "--dtype bf16: the GEMMs of this process already run in f32 (the precision is chosen before the "
                         "first GEMM)",
                         lwcl::error);
  decided = was;
  r = before;
}

#if LWCL_GEMM_WITH_ONEDNN

namespace {

bool cpu_has_bf16() { return gemm::choice::this_machine().has_bf16(); }

float round_bf16(float x) { return static_cast<float>(bf16(x)); }

struct bf16_case {
  bool ta, tb;
  index_t M, N, K, pad;
};

}  // namespace

TEST_CASE("gemm::onednn_bf16 equals a double GEMM of the bf16-rounded operands, within bf16 rounding of the "
          "exact one") {
  if (!cpu_has_bf16()) {
    MESSAGE("this CPU has neither AVX512-BF16 nor AMX: the bf16 GEMM is not run here");
    return;
  }
  const std::vector<bf16_case> sizes = {{false, false, 1, 1, 1, 0},   {false, false, 7, 5, 3, 0},
                                        {false, false, 13, 17, 11, 3}, {false, false, 33, 1, 65, 1},
                                        {false, false, 64, 48, 80, 0}, {false, false, 257, 263, 131, 2}};
  std::uint64_t seed = 500;
  double worst_same = 0, worst_bound = 0;
  struct run_case {
    bf16_case c;
    float alpha, beta;
  };
  std::vector<run_case> cases;  // every size in every transpose combination, with three (alpha, beta)
  for (const auto& base : sizes)
    for (int t = 0; t < 4; ++t)
      for (const auto& ab : {std::pair{1.0f, 0.0f}, std::pair{0.75f, -1.25f}, std::pair{-2.0f, 1.0f}})
        cases.push_back({{(t & 1) != 0, (t & 2) != 0, base.M, base.N, base.K, base.pad}, ab.first, ab.second});
  for (const auto& rc : cases) {
    const bf16_case& c = rc.c;
    const float alpha = rc.alpha, beta = rc.beta;
    const bool ta = c.ta, tb = c.tb;
    CAPTURE(ta);
    CAPTURE(tb);
    CAPTURE(c.M);
    CAPTURE(c.N);
    CAPTURE(c.K);
    CAPTURE(alpha);
    CAPTURE(beta);
    const index_t rows_a = ta ? c.K : c.M, cols_a = ta ? c.M : c.K;
    const index_t rows_b = tb ? c.N : c.K, cols_b = tb ? c.K : c.N;
    const index_t lda = cols_a + c.pad, ldb = cols_b + c.pad, ldc = c.N + c.pad;
    const auto A = test::random_normal<float>(static_cast<std::size_t>(rows_a * lda), seed++);
    const auto B = test::random_normal<float>(static_cast<std::size_t>(rows_b * ldb), seed++);
    const auto C0 = test::random_normal<float>(static_cast<std::size_t>(c.M * ldc), seed++);
    auto C = C0;
    gemm::onednn_bf16::run(ta, tb, c.M, c.N, c.K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
    // The same products in double: the operands rounded as the provider rounds them.
    std::vector<double> Ar(A.size()), Br(B.size()), Ax(A.begin(), A.end()), Bx(B.begin(), B.end());
    std::transform(A.begin(), A.end(), Ar.begin(), [](float x) { return double(round_bf16(x)); });
    std::transform(B.begin(), B.end(), Br.begin(), [](float x) { return double(round_bf16(x)); });
    std::vector<double> same(C0.begin(), C0.end()), exact(C0.begin(), C0.end());
    gemm::naive::run(ta, tb, c.M, c.N, c.K, double(alpha), Ar.data(), lda, Br.data(), ldb, double(beta),
                     same.data(), ldc);
    gemm::naive::run(ta, tb, c.M, c.N, c.K, double(alpha), Ax.data(), lda, Bx.data(), ldb, double(beta),
                     exact.data(), ldc);
    for (index_t i = 0; i < c.M; ++i)
      for (index_t j = 0; j < ldc; ++j) {
        const auto at = static_cast<std::size_t>(i * ldc + j);
        if (j >= c.N) {  // padding comes back untouched
          CHECK(C[at] == C0[at]);
          continue;
        }
        // sum_k |a_ik b_kj|: the scale of the products' rounding.
        double mag = 0;
        for (index_t k = 0; k < c.K; ++k) {
          const index_t ia = ta ? k * lda + i : i * lda + k, ib = tb ? j * ldb + k : k * ldb + j;
          mag += std::fabs(Ax[static_cast<std::size_t>(ia)] * Bx[static_cast<std::size_t>(ib)]);
        }
        const double scale = std::fabs(alpha) * mag + std::fabs(beta * C0[at]) + 1e-30;
        // f32 accumulation over K terms (and the alpha/beta update): a few K units of 2^-24.
        const double e_same = std::fabs(C[at] - same[at]) / scale;
        CHECK(e_same <= double(c.K + 4) * 0x1p-24);
        // Each operand within bf16's unit roundoff u = 2^-8 (8 significant bits, to nearest) of its
        // value: each product within 2u + u^2 of the exact one.
        const double e_exact = std::fabs(C[at] - exact[at]) / scale;
        CHECK(e_exact <= 0x1p-7 + 0x1p-16 + double(c.K + 4) * 0x1p-24);
        worst_same = std::max(worst_same, e_same);
        worst_bound = std::max(worst_bound, e_exact);
      }
  }
  MESSAGE("gemm::onednn_bf16: largest error against the rounded operands ", worst_same, ", against the exact ones ",
          worst_bound, " (of sum |alpha a b| + |beta c|); oneDNN implementation ",
          gemm::onednn_bf16::last_implementation());
}

TEST_CASE("gemm::onednn_bf16 keeps one primitive per shape; an empty inner dimension scales C by beta") {
  if (!cpu_has_bf16()) {
    MESSAGE("this CPU has neither AVX512-BF16 nor AMX: the bf16 GEMM is not run here");
    return;
  }
  const auto A = test::random_normal<float>(64 * 96, 1), B = test::random_normal<float>(96 * 32, 2);
  std::vector<float> C(64 * 32);
  const std::size_t before = gemm::onednn_bf16::plans_held();
  gemm::onednn_bf16::run(false, false, 64, 32, 96, 1.0f, A.data(), 96, B.data(), 32, 0.0f, C.data(), 32);
  const std::vector<float> first = C;
  CHECK(gemm::onednn_bf16::plans_held() == before + 1);
  const std::string impl = gemm::onednn_bf16::last_implementation();
  CHECK(!impl.empty());
  MESSAGE("oneDNN's bf16 matmul on this CPU: ", impl);
  gemm::onednn_bf16::run(false, false, 64, 32, 96, 1.0f, A.data(), 96, B.data(), 32, 0.0f, C.data(), 32);
  CHECK(gemm::onednn_bf16::plans_held() == before + 1);  // reused
  CHECK(C == first);                                       // and deterministic
  std::vector<float> wide(64 * 96);
  gemm::onednn_bf16::run(false, true, 64, 96, 32, 1.0f, A.data(), 32, B.data(), 32, 0.0f, wide.data(), 96);
  CHECK(gemm::onednn_bf16::plans_held() == before + 2);  // another shape, another primitive

  float D[4] = {1, 2, 3, 4};
  gemm::onednn_bf16::run(false, false, 2, 2, 0, 1.0f, A.data(), 2, B.data(), 2, 3.0f, D, 2);
  CHECK(std::vector<float>(D, D + 4) == std::vector<float>{3, 6, 9, 12});
  float E[1] = {5};
  gemm::onednn_bf16::run(false, false, 0, 1, 1, 1.0f, A.data(), 1, B.data(), 1, 0.0f, E, 1);
  CHECK(E[0] == 5);
}

TEST_CASE("10 steps of gradient descent with bf16 GEMMs follow the f32 ones within bf16 rounding") {
  if (!cpu_has_bf16()) {
    MESSAGE("this CPU has neither AVX512-BF16 nor AMX: the bf16 GEMM is not run here");
    return;
  }
  // Least squares min_W |X W - Y|^2 / (2 n): forward P = X W, residual R = P - Y, gradient G = X^T R / n,
  // W -= lr G. Every product a GEMM (the forward in N N, the gradient in T N), f32 everywhere else.
  const index_t n = 256, d = 64, o = 32;
  const auto X = test::random_normal<float>(static_cast<std::size_t>(n * d), 11);
  const auto Wt = test::random_normal<float>(static_cast<std::size_t>(d * o), 12);
  std::vector<float> Y(static_cast<std::size_t>(n * o));
  gemm::openblas::run(false, false, n, o, d, 1.0f, X.data(), d, Wt.data(), o, 0.0f, Y.data(), o);
  auto descend = [&](auto gemm_run) {
    std::vector<float> W(static_cast<std::size_t>(d * o), 0.0f), R(Y.size()), G(W.size());
    std::vector<double> losses;
    for (int step = 0; step < 10; ++step) {
      gemm_run(false, false, n, o, d, 1.0f, X.data(), d, W.data(), o, 0.0f, R.data(), o);
      double loss = 0;
      for (std::size_t i = 0; i < R.size(); ++i) {
        R[i] -= Y[i];
        loss += double(R[i]) * R[i];
      }
      losses.push_back(loss / (2.0 * double(n)));
      gemm_run(true, false, d, o, n, 1.0f / float(n), X.data(), d, R.data(), o, 0.0f, G.data(), o);
      for (std::size_t i = 0; i < W.size(); ++i) W[i] -= 0.5f * G[i];
    }
    return losses;
  };
  const auto f32 = descend([](auto... a) { gemm::openblas::run(a...); });
  const auto b16 = descend([](auto... a) { gemm::onednn_bf16::run(a...); });
  CHECK(f32.back() < 0.5 * f32.front());  // the problem descends
  for (std::size_t s = 0; s < f32.size(); ++s) {
    CAPTURE(s);
    CHECK(std::fabs(b16[s] - f32[s]) <= 2e-2 * f32[s]);  // bf16's 2^-8 per product, compounded over the steps
  }
  MESSAGE("loss after 10 steps: f32 ", f32.back(), ", bf16 GEMMs ", b16.back());
}

#endif  // LWCL_GEMM_WITH_ONEDNN
