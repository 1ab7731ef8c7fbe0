// Distillation losses (MSE, normalised MSE, cosine, logit KL at two temperatures): PyTorch oracle (f32 and
// f64), finite-difference gradients, grad_scale and accumulation, degenerate inputs, and argument checks.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/ops/distill_loss.hpp"
#include "support/check.hpp"
#include "support/fixture.hpp"

using namespace lwcl;
using lwcl::test::rel_error;

namespace {

// One loss as the tests drive it: (be, dstudent, scratch, student, teacher) -> loss.
using loss_fn = std::function<double(backend::cpu&, const tensor&, const tensor&, const tensor&, const tensor&)>;

struct named_loss {
  std::string name;  // fixture key
  bool logits;       // over the logits pair rather than the feature pair
  loss_fn run;
};

std::vector<named_loss> all_losses(double grad_scale = 1.0) {
  auto feature = [grad_scale](auto op) {
    return [=](backend::cpu& be, const tensor& ds, const tensor& scr, const tensor& s, const tensor& t) {
      return op(be, ds, scr, s, t, grad_scale);
    };
  };
  auto kl = [grad_scale](double tau) {
    return [=](backend::cpu& be, const tensor& ds, const tensor& scr, const tensor& s, const tensor& t) {
      return ops::logit_kl_loss(be, ds, scr, s, t, tau, grad_scale);
    };
  };
  return {
      {"mse", false, feature([](auto&... a) { return ops::mse_loss(a...); })},
      {"nmse", false, feature([](auto&... a) { return ops::nmse_loss(a...); })},
      {"cosine", false, feature([](auto&... a) { return ops::cosine_loss(a...); })},
      {"kl_tau1", true, kl(1.0)},
      {"kl_tau2.5", true, kl(2.5)},
  };
}

template <class T>
struct distill_case {
  test::fixture fx{"ops/distill_loss.lwfx"};
  shape fs = fx.dims("student"), ls = fx.dims("s_logits");
  std::vector<T> student = fx.as<T>("student"), teacher = fx.as<T>("teacher");
  std::vector<T> s_logits = fx.as<T>("s_logits"), t_logits = fx.as<T>("t_logits");
  std::vector<T> dfeat = std::vector<T>(student.size()), dlogits = std::vector<T>(s_logits.size());
  std::vector<T> scratch = std::vector<T>(2 * std::max(rows_of(fs), rows_of(ls)));
  backend::cpu be;

  static std::size_t rows_of(const shape& s) { return static_cast<std::size_t>(s.numel() / s.last()); }

  std::vector<T>& input(const named_loss& l) { return l.logits ? s_logits : student; }
  std::vector<T>& grad(const named_loss& l) { return l.logits ? dlogits : dfeat; }
  double run(const named_loss& l, bool with_grad = true) {
    const shape& s = l.logits ? ls : fs;
    std::vector<T>& x = input(l);
    std::vector<T>& t = l.logits ? t_logits : teacher;
    return l.run(be, with_grad ? tensor(grad(l).data(), s) : tensor(), tensor(scratch.data(), {static_cast<index_t>(scratch.size())}),
                 tensor(x.data(), s), tensor(t.data(), s));
  }
};

}  // namespace

TEST_CASE_TEMPLATE("distillation losses match PyTorch values and gradients", T, float, double) {
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  for (const auto& l : all_losses()) {
    CAPTURE(l.name);
    distill_case<T> c;
    const double loss = c.run(l);
    const double want = c.fx.scalar(l.name);
    CHECK(want > 1e-2);  // a loss that is not near zero, so the relative check means something
    CHECK(std::abs(loss - want) / want < tol);
    CHECK(rel_error(c.grad(l), c.fx.f64("d_" + l.name)) < 10 * tol);
  }
}

TEST_CASE("distillation loss gradients match finite differences") {
  for (const auto& l : all_losses()) {
    CAPTURE(l.name);
    distill_case<double> c;
    if (l.logits) {
      // Moderate logits: the fixture's peaked rows have KL gradient entries (q - p) / rows far below what
      // finite differences of an O(1) loss can resolve; the oracle test covers those rows.
      c.t_logits = test::random_normal<double>(c.t_logits.size(), 23);
      c.s_logits = test::random_normal<double>(c.s_logits.size(), 29);
    }
    c.run(l);
    const auto grad = c.grad(l);
    // Gradient entries are O(1e-3) (a mean over up to 120 elements) against O(1) losses: a 1e-4 step keeps
    // the losses' rounding noise (~1e-16 / step) far below them, with O(step^2) truncation error.
    CHECK(test::gradcheck(c.input(l), grad, [&] { return c.run(l, false); }, 1e-4, 60) < 1e-6);
  }
}

TEST_CASE("distillation losses scale and accumulate their gradients") {
  const auto plain = all_losses(), scaled = all_losses(-0.5);
  for (std::size_t k = 0; k < plain.size(); ++k) {
    CAPTURE(plain[k].name);
    distill_case<double> c;
    const double loss = c.run(plain[k]);
    const auto once = c.grad(plain[k]);
    CHECK(c.run(scaled[k]) == loss);
    for (std::size_t i = 0; i < once.size(); ++i) CHECK(c.grad(plain[k])[i] == doctest::Approx(0.5 * once[i]));
    const auto before = c.grad(plain[k]);
    CHECK(c.run(plain[k], false) == loss);
    CHECK(c.grad(plain[k]) == before);
  }
}

TEST_CASE("distillation losses vanish when the student equals the teacher") {
  for (const auto& l : all_losses()) {
    CAPTURE(l.name);
    distill_case<double> c;
    if (l.logits)
      c.s_logits = c.t_logits;
    else
      c.student = c.teacher;
    CHECK(std::abs(c.run(l)) < 1e-12);
    for (double g : c.grad(l)) CHECK(std::abs(g) < 1e-12);
  }
}

TEST_CASE("logit_kl_loss ignores a constant shift of either side's logits") {
  distill_case<double> c;
  const named_loss kl = all_losses()[4];
  const double base = c.run(kl, false);
  for (auto& v : c.s_logits) v += 300.0;
  for (auto& v : c.t_logits) v -= 700.0;
  CHECK(c.run(kl, false) == doctest::Approx(base).epsilon(1e-10));
}

TEST_CASE("cosine_loss treats a zero row like PyTorch (cos 0) and stays finite") {
  backend::cpu be;
  std::vector<double> s = {0, 0, 0, 1, 2, 3}, t = {1, 2, 3, 0, 0, 0}, ds(6), scratch(4);
  const double loss = ops::cosine_loss(be, tensor(ds.data(), {2, 3}), tensor(scratch.data(), {4}), tensor(s.data(), {2, 3}),
                                       tensor(t.data(), {2, 3}));
  CHECK(loss == doctest::Approx(1.0));
  for (double g : ds) CHECK(std::isfinite(g));
  // The zero student row moves towards the teacher's direction (t / eps, scaled by -1/rows).
  CHECK(ds[0] < 0);
}

TEST_CASE("distillation losses reject bad arguments") {
  distill_case<float> c;
  const shape fs = c.fs;
  const index_t rows = fs.numel() / fs.last();
  const tensor s(c.student.data(), fs), t(c.teacher.data(), fs), scr(c.scratch.data(), {2 * rows});
  CHECK_THROWS_WITH_AS(ops::mse_loss(c.be, tensor(), scr, s, tensor(c.teacher.data(), {rows, fs.last()})),
                       doctest::Contains("mse_loss: teacher has shape [10, 12], expected [2, 5, 12]"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::nmse_loss(c.be, tensor(c.dfeat.data(), {fs.numel()}), scr, s, t),
                       doctest::Contains("nmse_loss: dstudent has shape [120], expected [2, 5, 12]"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::cosine_loss(c.be, tensor(), tensor(c.scratch.data(), {2 * rows - 1}), s, t),
                       doctest::Contains("cosine_loss: scratch has shape [19] (19 elements), expected at least 2 * rows = 20 elements"),
                       lwcl::error);
  std::vector<double> td(c.teacher.size());
  CHECK_THROWS_WITH_AS(ops::mse_loss(c.be, tensor(), scr, s, tensor(td.data(), fs)),
                       doctest::Contains("mse_loss: teacher has dtype f64, expected f32 (the dtype of student)"), lwcl::error);
  std::vector<double> scratch_d(c.scratch.size());
  CHECK_THROWS_WITH_AS(ops::logit_kl_loss(c.be, tensor(), tensor(scratch_d.data(), {2 * rows}), s, t),
                       doctest::Contains("logit_kl_loss: scratch has dtype f64, expected f32"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::logit_kl_loss(c.be, tensor(), scr, tensor(), t), doctest::Contains("logit_kl_loss: student is empty"),
                       lwcl::error);
  CHECK_THROWS_WITH_AS(ops::logit_kl_loss(c.be, tensor(), scr, s, t, 0.0),
                       doctest::Contains("logit_kl_loss: temperature is 0, expected a value > 0"), lwcl::error);
  std::vector<float> zeros(c.teacher.size());
  CHECK_THROWS_WITH_AS(ops::nmse_loss(c.be, tensor(), scr, s, tensor(zeros.data(), fs)),
                       doctest::Contains("nmse_loss: the teacher [2, 5, 12] is all zeros"), lwcl::error);
}
