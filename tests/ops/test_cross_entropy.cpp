// Cross-entropy: PyTorch oracle (f32 and f64) including ignored rows and huge logits, finite-difference
// gradients, grad_scale and accumulation, the all-ignored batch, and argument and target-range checks.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/ops/cross_entropy.hpp"
#include "support/check.hpp"
#include "support/fixture.hpp"

using namespace lwcl;
using lwcl::test::rel_error;

namespace {

template <class T>
struct ce_case {
  test::fixture fx{"ops/cross_entropy.lwfx"};
  shape ls = fx.dims("logits");
  index_t N = ls[0], V = ls[1];
  std::vector<T> logits = fx.as<T>("logits");
  std::vector<std::int32_t> targets = to_i32(fx.ints("targets"));
  std::vector<T> dlogits = std::vector<T>(logits.size()), row_loss = std::vector<T>(static_cast<std::size_t>(N));
  backend::cpu be;

  static std::vector<std::int32_t> to_i32(const std::vector<std::int64_t>& v) { return {v.begin(), v.end()}; }

  double run(bool with_grad = true, double grad_scale = 1.0) {
    return ops::cross_entropy(be, with_grad ? tensor(dlogits.data(), ls) : tensor(), tensor(row_loss.data(), {N}),
                              tensor(logits.data(), ls), tensor(targets.data(), {N}), grad_scale);
  }
};

}  // namespace

TEST_CASE_TEMPLATE("cross_entropy matches PyTorch loss, row losses and gradient", T, float, double) {
  ce_case<T> c;
  const double loss = c.run();
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  CHECK(std::abs(loss - c.fx.scalar("loss")) / c.fx.scalar("loss") < tol);
  CHECK(rel_error(c.row_loss, c.fx.f64("row_loss")) < tol);
  CHECK(rel_error(c.dlogits, c.fx.f64("dlogits")) < 10 * tol);
  // Ignored rows: zero loss and no gradient at all.
  for (index_t r : {1, 6}) {
    CHECK(c.targets[static_cast<std::size_t>(r)] < 0);
    CHECK(c.row_loss[static_cast<std::size_t>(r)] == 0);
    for (index_t i = 0; i < c.V; ++i) CHECK(c.dlogits[static_cast<std::size_t>(r * c.V + i)] == 0);
  }
  for (auto v : c.dlogits) CHECK(std::isfinite(static_cast<double>(v)));
}

TEST_CASE("cross_entropy gradient matches finite differences") {
  // Well-conditioned logits (the fixture's huge and peaked rows are for the oracle test): here every
  // gradient entry is a probability over the row count, >= ~1e-5, while the loss is O(1), so the step is
  // 1e-4 rather than 1e-6 to keep the loss's rounding noise (~1e-16 / step) well below the smallest entry;
  // the truncation error of central differences is O(step^2).
  const index_t N = 8, V = 13;
  auto logits = test::random_normal<double>(static_cast<std::size_t>(N * V), 17, 1.5);
  std::vector<std::int32_t> targets = {3, 0, -1, 12, 7, 7, 5, 1};
  std::vector<double> dlogits(logits.size()), row_loss(static_cast<std::size_t>(N));
  backend::cpu be;
  auto run = [&](bool with_grad) {
    return ops::cross_entropy(be, with_grad ? tensor(dlogits.data(), {N, V}) : tensor(), tensor(row_loss.data(), {N}),
                              tensor(logits.data(), {N, V}), tensor(targets.data(), {N}));
  };
  run(true);
  CHECK(test::gradcheck(logits, dlogits, [&] { return run(false); }, 1e-4, logits.size()) < 1e-6);
}

TEST_CASE("cross_entropy scales and accumulates its gradient, and can skip it") {
  ce_case<double> c;
  const double full = c.run();
  const auto once = c.dlogits;
  const double again = c.run(true, 0.25);
  CHECK(again == full);
  for (std::size_t i = 0; i < once.size(); ++i) CHECK(c.dlogits[i] == doctest::Approx(1.25 * once[i]));
  auto before = c.dlogits;
  CHECK(c.run(false) == full);
  CHECK(c.dlogits == before);
}

TEST_CASE("cross_entropy over a batch whose targets are all ignored is 0 with no gradient") {
  ce_case<float> c;
  std::fill(c.targets.begin(), c.targets.end(), -100);
  CHECK(c.run() == 0.0);
  for (auto v : c.dlogits) CHECK(v == 0.0f);
  for (auto v : c.row_loss) CHECK(v == 0.0f);
}

TEST_CASE("cross_entropy accepts (B, T, V) logits with (B, T) targets") {
  ce_case<double> c;
  const double flat = c.run(false);
  const index_t B = 2, T = c.N / 2;
  CHECK(ops::cross_entropy(c.be, tensor(), tensor(c.row_loss.data(), {c.N}), tensor(c.logits.data(), {B, T, c.V}),
                           tensor(c.targets.data(), {B, T})) == flat);
}

TEST_CASE("cross_entropy rejects bad targets, mismatched shapes, dtypes and empty input") {
  ce_case<float> c;
  const index_t N = c.N, V = c.V;
  c.targets[4] = static_cast<std::int32_t>(V);
  CHECK_THROWS_WITH_AS(c.run(), doctest::Contains("cross_entropy: target 37 at row 4 is outside the vocabulary [0, 37)"), lwcl::error);
  c.targets[4] = 0;
  CHECK_THROWS_WITH_AS(ops::cross_entropy(c.be, tensor(c.dlogits.data(), {N, V - 1}), tensor(c.row_loss.data(), {N}),
                                          tensor(c.logits.data(), c.ls), tensor(c.targets.data(), {N})),
                       doctest::Contains("cross_entropy: dlogits has shape [10, 36], expected [10, 37]"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::cross_entropy(c.be, tensor(), tensor(c.row_loss.data(), {N}), tensor(c.logits.data(), c.ls),
                                          tensor(c.targets.data(), {N - 1})),
                       doctest::Contains("cross_entropy: targets has shape [9] (9 elements), expected one per row of logits [10, 37] (10)"),
                       lwcl::error);
  CHECK_THROWS_WITH_AS(ops::cross_entropy(c.be, tensor(), tensor(c.row_loss.data(), {N - 1}), tensor(c.logits.data(), c.ls),
                                          tensor(c.targets.data(), {N})),
                       doctest::Contains("cross_entropy: row_loss has shape [9] (9 elements), expected 10 elements"), lwcl::error);
  std::vector<double> row_loss_d(static_cast<std::size_t>(N));
  CHECK_THROWS_WITH_AS(ops::cross_entropy(c.be, tensor(), tensor(row_loss_d.data(), {N}), tensor(c.logits.data(), c.ls),
                                          tensor(c.targets.data(), {N})),
                       doctest::Contains("cross_entropy: row_loss has dtype f64, expected f32"), lwcl::error);
  std::vector<std::int64_t> wide(static_cast<std::size_t>(N));
  CHECK_THROWS_WITH_AS(ops::cross_entropy(c.be, tensor(), tensor(c.row_loss.data(), {N}), tensor(c.logits.data(), c.ls),
                                          tensor(wide.data(), dtype::f64, {N})),
                       doctest::Contains("cross_entropy: targets has dtype f64, expected i32"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::cross_entropy(c.be, tensor(), tensor(c.row_loss.data(), {N}), tensor(), tensor(c.targets.data(), {N})),
                       doctest::Contains("cross_entropy: logits is empty"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::cross_entropy(c.be, tensor(), tensor(c.row_loss.data(), {N}), tensor(c.logits.data(), c.ls), tensor()),
                       doctest::Contains("cross_entropy: targets is empty"), lwcl::error);
}
