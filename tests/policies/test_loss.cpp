// Loss policies: each single loss gives exactly what its ops/distill_loss.hpp function gives (value and
// accumulated gradient), and weighted_sum gives the weighted sum of its terms' values and gradients.
#include <doctest/doctest.h>

#include <functional>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/policies/loss/cosine.hpp"
#include "lwcl/policies/loss/logit_kl.hpp"
#include "lwcl/policies/loss/mse.hpp"
#include "lwcl/policies/loss/nmse.hpp"
#include "lwcl/policies/loss/weighted_sum.hpp"
#include "support/check.hpp"

using namespace lwcl;
namespace loss = lwcl::policies::loss;

namespace {

// Student and teacher features of shape (2, 3, 8) in f64, a gradient buffer that starts non-zero (the
// losses accumulate), and scratch.
struct pair_case {
  shape sh{2, 3, 8};
  std::vector<double> s = test::random_normal<double>(48, 1), t = test::random_normal<double>(48, 2);
  std::vector<double> scratch = std::vector<double>(12);
  backend::cpu be;

  tensor student() { return tensor(s.data(), sh); }
  tensor teacher() { return tensor(t.data(), sh); }
  tensor view(std::vector<double>& v) { return tensor(v.data(), sh); }

  // The loss value and the gradient it accumulates onto a buffer of 0.25s.
  std::pair<double, std::vector<double>> run(const std::function<double(const tensor&, const tensor&)>& f) {
    std::vector<double> g(s.size(), 0.25);
    const double v = f(view(g), tensor(scratch.data(), shape{12}));
    return {v, g};
  }
};

}  // namespace

TEST_CASE("single losses forward to ops with the same value and gradient") {
  pair_case c;
  const double scale = 0.7;
  auto check_same = [&](auto policy, auto op) {
    CAPTURE(decltype(policy)::name);
    const auto [pv, pg] = c.run([&](const tensor& g, const tensor& scr) {
      return policy.compute(c.be, g, scr, c.student(), c.teacher(), scale);
    });
    const auto [ov, og] = c.run([&](const tensor& g, const tensor& scr) { return op(g, scr); });
    CHECK(pv == ov);
    CHECK(pg == og);
    CHECK(pv > 0);
  };
  check_same(loss::mse{}, [&](const tensor& g, const tensor& scr) {
    return ops::mse_loss(c.be, g, scr, c.student(), c.teacher(), scale);
  });
  check_same(loss::nmse{}, [&](const tensor& g, const tensor& scr) {
    return ops::nmse_loss(c.be, g, scr, c.student(), c.teacher(), scale);
  });
  check_same(loss::cosine{}, [&](const tensor& g, const tensor& scr) {
    return ops::cosine_loss(c.be, g, scr, c.student(), c.teacher(), scale);
  });
  check_same(loss::logit_kl{.temperature = 2.5}, [&](const tensor& g, const tensor& scr) {
    return ops::logit_kl_loss(c.be, g, scr, c.student(), c.teacher(), 2.5, scale);
  });
  // Without dstudent, only the value.
  CHECK(loss::mse{}.compute(c.be, tensor(), tensor(c.scratch.data(), shape{12}), c.student(), c.teacher()) ==
        ops::mse_loss(c.be, tensor(), tensor(c.scratch.data(), shape{12}), c.student(), c.teacher()));
}

TEST_CASE("weighted_sum adds its terms' values and gradients with their weights") {
  pair_case c;
  const loss::weighted_sum<loss::mse, loss::cosine> w{.weights = {0.5, 2.0}};
  const auto [wv, wg] =
      c.run([&](const tensor& g, const tensor& scr) { return w.compute(c.be, g, scr, c.student(), c.teacher(), 0.3); });
  const auto [mv, mg] = c.run([&](const tensor& g, const tensor& scr) {
    return ops::mse_loss(c.be, g, scr, c.student(), c.teacher(), 0.3 * 0.5);
  });
  const auto [cv, cg] = c.run([&](const tensor& g, const tensor& scr) {
    return ops::cosine_loss(c.be, g, scr, c.student(), c.teacher(), 0.3 * 2.0);
  });
  CHECK(wv == doctest::Approx(0.5 * mv + 2.0 * cv).epsilon(1e-14));
  std::vector<double> expect(wg.size());
  for (std::size_t i = 0; i < expect.size(); ++i) expect[i] = mg[i] + cg[i] - 0.25;  // one 0.25 start, not two
  CHECK(test::rel_error(wg, expect) < 1e-14);

  // Default weights are 1; a zero weight drops its term (here an all-zero teacher nmse would refuse).
  const loss::weighted_sum<loss::mse, loss::nmse> d{};
  CHECK(d.weights[0] == 1.0);
  CHECK(d.weights[1] == 1.0);
  std::vector<double> zeros(c.t.size(), 0.0);
  const loss::weighted_sum<loss::mse, loss::nmse> mse_only{.weights = {1.0, 0.0}};
  const tensor scr(c.scratch.data(), shape{12});
  CHECK(mse_only.compute(c.be, tensor(), scr, c.student(), c.view(zeros)) ==
        ops::mse_loss(c.be, tensor(), scr, c.student(), c.view(zeros)));
  CHECK_THROWS_AS(d.compute(c.be, tensor(), scr, c.student(), c.view(zeros)), error);

  // Negative or non-finite weights are refused, naming the weight.
  const loss::weighted_sum<loss::mse, loss::cosine> bad{.weights = {1.0, -1.0}};
  CHECK_THROWS_WITH_AS(bad.compute(c.be, tensor(), scr, c.student(), c.teacher()), doctest::Contains("weight 1 is -1"),
                       error);
}

TEST_CASE("loss names and targets") {
  CHECK(loss::mse::name == "mse");
  CHECK(loss::nmse::name == "nmse");
  CHECK(loss::cosine::name == "cosine");
  CHECK(loss::logit_kl::name == "logit_kl");
  CHECK(loss::weighted_sum<loss::mse, loss::nmse, loss::cosine>::name == "weighted_sum<mse,nmse,cosine>");
  CHECK(loss::weighted_sum<loss::logit_kl>::target == policies::loss_target::logits);
  CHECK(loss::weighted_sum<loss::cosine>::target == policies::loss_target::features);
}

static_assert(policies::loss_policy<loss::mse> && policies::loss_policy<loss::nmse> &&
              policies::loss_policy<loss::cosine> && policies::loss_policy<loss::logit_kl> &&
              policies::loss_policy<loss::weighted_sum<loss::mse, loss::cosine>>);
