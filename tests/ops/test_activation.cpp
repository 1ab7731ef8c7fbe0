// Activations (GELU tanh/erf, SiLU, SwiGLU): PyTorch oracle (f32 and f64), finite-difference gradients,
// accumulation, in-place forward, and argument checks.
#include <doctest/doctest.h>

#include <cmath>
#include <numbers>
#include <string>
#include <utility>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/ops/activation.hpp"
#include "support/check.hpp"
#include "support/fixture.hpp"

using namespace lwcl;
using lwcl::test::rel_error;

namespace {

template <class T>
struct act_case {
  test::fixture fx{"ops/activation.lwfx"};
  shape xs = fx.dims("x");
  std::vector<T> x = fx.as<T>("x"), gate = fx.as<T>("gate"), up = fx.as<T>("up"), dout = fx.as<T>("dout");
  std::vector<T> out = std::vector<T>(x.size()), dx = std::vector<T>(x.size()), dgate = std::vector<T>(x.size()),
                 dup = std::vector<T>(x.size());
  backend::cpu be;

  tensor t(std::vector<T>& v) { return tensor(v.data(), xs); }

  void gelu(ops::gelu_kind k) { ops::gelu_forward(be, t(out), t(x), k); }
  void gelu_back(ops::gelu_kind k) { ops::gelu_backward(be, t(dx), t(dout), t(x), k); }
  void silu() { ops::silu_forward(be, t(out), t(x)); }
  void silu_back() { ops::silu_backward(be, t(dx), t(dout), t(x)); }
  void swiglu() { ops::swiglu_forward(be, t(out), t(gate), t(up)); }
  void swiglu_back() { ops::swiglu_backward(be, t(dgate), t(dup), t(dout), t(gate), t(up)); }
};

// sum (out - base) * w: the same gradient as sum out * w, but elements that a perturbation leaves alone
// contribute exact zeros, so the finite differences are not drowned by the rounding of a large sum where
// the gradient is tiny (the saturated tails).
inline double dot_from(const std::vector<double>& out, const std::vector<double>& base, const std::vector<double>& w) {
  double s = 0;
  for (std::size_t i = 0; i < out.size(); ++i) s += (out[i] - base[i]) * w[i];
  return s;
}

template <class T>
double tolerance() {
  return std::is_same_v<T, float> ? 1e-5 : 1e-12;
}

}  // namespace

TEST_CASE_TEMPLATE("gelu (tanh and erf) matches PyTorch forward and backward", T, float, double) {
  const std::pair<ops::gelu_kind, std::string> kinds[] = {{ops::gelu_kind::tanh, "gelu_tanh"}, {ops::gelu_kind::erf, "gelu_erf"}};
  for (const auto& kn : kinds) {
    const ops::gelu_kind kind = kn.first;
    const std::string& name = kn.second;
    CAPTURE(name);
    act_case<T> c;
    c.gelu(kind);
    c.gelu_back(kind);
    CHECK(rel_error(c.out, c.fx.f64(name + "_out")) < tolerance<T>());
    CHECK(rel_error(c.dx, c.fx.f64(name + "_dx")) < 10 * tolerance<T>());
  }
}

TEST_CASE("the two gelu forms differ measurably") {
  // Guards against one kind silently running the other's formula: at x = 2 they differ by ~1e-4.
  backend::cpu be;
  double x = 2, a = 0, b = 0;
  ops::gelu_forward(be, tensor(&a, {1}), tensor(&x, {1}), ops::gelu_kind::tanh);
  ops::gelu_forward(be, tensor(&b, {1}), tensor(&x, {1}), ops::gelu_kind::erf);
  CHECK(std::abs(a - b) > 5e-5);
  CHECK(b == doctest::Approx(1.9544997361036416).epsilon(1e-14));
}

TEST_CASE("gelu keeps its relative precision in the left tail") {
  // 0.5 x (1 + erf(x / sqrt 2)) rounds to 0 at x = -10; the true value is -10 Phi(-10).
  backend::cpu be;
  double x = -10, y_erf = 0, y_tanh = 0;
  ops::gelu_forward(be, tensor(&y_erf, {1}), tensor(&x, {1}), ops::gelu_kind::erf);
  CHECK(y_erf == doctest::Approx(-10 * 7.6198530241605260659e-24).epsilon(1e-13));
  // Likewise 1 + tanh(u) at u ~ -43.7, where 0.5 (1 + tanh(u)) = sigmoid(2u) ~ exp(2u).
  ops::gelu_forward(be, tensor(&y_tanh, {1}), tensor(&x, {1}), ops::gelu_kind::tanh);
  const double u = std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x);
  CHECK(y_tanh == doctest::Approx(x * std::exp(2 * u)).epsilon(1e-13));
  CHECK(y_tanh < 0);
}

TEST_CASE_TEMPLATE("silu matches PyTorch forward and backward", T, float, double) {
  act_case<T> c;
  c.silu();
  c.silu_back();
  CHECK(rel_error(c.out, c.fx.f64("silu_out")) < tolerance<T>());
  CHECK(rel_error(c.dx, c.fx.f64("silu_dx")) < 10 * tolerance<T>());
}

TEST_CASE_TEMPLATE("swiglu matches PyTorch forward and backward", T, float, double) {
  act_case<T> c;
  c.swiglu();
  c.swiglu_back();
  CHECK(rel_error(c.out, c.fx.f64("swiglu_out")) < tolerance<T>());
  CHECK(rel_error(c.dgate, c.fx.f64("swiglu_dgate")) < 10 * tolerance<T>());
  CHECK(rel_error(c.dup, c.fx.f64("swiglu_dup")) < 10 * tolerance<T>());
}

TEST_CASE("activation gradients match finite differences") {
  act_case<double> c;
  for (auto kind : {ops::gelu_kind::tanh, ops::gelu_kind::erf}) {
    CAPTURE(static_cast<int>(kind));
    std::fill(c.dx.begin(), c.dx.end(), 0.0);
    c.gelu_back(kind);
    c.gelu(kind);
    const auto base = c.out;
    CHECK(test::gradcheck(c.x, c.dx, [&] {
            c.gelu(kind);
            return dot_from(c.out, base, c.dout);
          }) < 1e-6);
  }
  std::fill(c.dx.begin(), c.dx.end(), 0.0);
  c.silu_back();
  c.silu();
  const auto silu_base = c.out;
  CHECK(test::gradcheck(c.x, c.dx, [&] {
          c.silu();
          return dot_from(c.out, silu_base, c.dout);
        }) < 1e-6);
  c.swiglu_back();
  c.swiglu();
  const auto swiglu_base = c.out;
  auto swiglu_loss = [&] {
    c.swiglu();
    return dot_from(c.out, swiglu_base, c.dout);
  };
  CHECK(test::gradcheck(c.gate, c.dgate, swiglu_loss) < 1e-6);
  CHECK(test::gradcheck(c.up, c.dup, swiglu_loss) < 1e-6);
}

TEST_CASE("activation backward ops accumulate, and forward ops may run in place") {
  act_case<double> c;
  c.gelu_back(ops::gelu_kind::tanh);
  const auto once = c.dx;
  c.gelu_back(ops::gelu_kind::tanh);
  for (std::size_t i = 0; i < once.size(); ++i) CHECK(c.dx[i] == doctest::Approx(2 * once[i]));
  c.swiglu_back();
  const auto dgate1 = c.dgate, dup1 = c.dup;
  c.swiglu_back();
  for (std::size_t i = 0; i < dgate1.size(); ++i) {
    CHECK(c.dgate[i] == doctest::Approx(2 * dgate1[i]));
    CHECK(c.dup[i] == doctest::Approx(2 * dup1[i]));
  }
  c.silu();
  const auto separate = c.out;
  ops::silu_forward(c.be, c.t(c.x), c.t(c.x));
  CHECK(c.x == separate);
}

TEST_CASE("silu and swiglu stay finite in the saturated tails") {
  backend::cpu be;
  std::vector<float> x = {-200.f, -90.f, 90.f, 200.f}, y(4), dy = {1, 1, 1, 1}, dx(4), up = {1, 1, 1, 1}, dup(4);
  const shape s{4};
  ops::silu_forward(be, tensor(y.data(), s), tensor(x.data(), s));
  ops::silu_backward(be, tensor(dx.data(), s), tensor(dy.data(), s), tensor(x.data(), s));
  ops::swiglu_backward(be, tensor(dx.data(), s), tensor(dup.data(), s), tensor(dy.data(), s), tensor(x.data(), s), tensor(up.data(), s));
  for (int i = 0; i < 4; ++i) {
    CHECK(std::isfinite(y[i]));
    CHECK(std::isfinite(dx[i]));
    CHECK(std::isfinite(dup[i]));
  }
  CHECK(y[0] == doctest::Approx(0.0));
  CHECK(y[3] == doctest::Approx(200.0));
}

TEST_CASE("activations reject mismatched shapes, dtypes and empty input") {
  act_case<float> c;
  const shape flat{c.xs.numel()};
  CHECK_THROWS_WITH_AS(ops::gelu_forward(c.be, tensor(c.out.data(), flat), c.t(c.x), ops::gelu_kind::tanh),
                       doctest::Contains("gelu_forward: out has shape [336], expected [3, 7, 16]"), lwcl::error);
  std::vector<double> xd(c.x.size());
  CHECK_THROWS_WITH_AS(ops::gelu_backward(c.be, c.t(c.dx), tensor(xd.data(), c.xs), c.t(c.x), ops::gelu_kind::erf),
                       doctest::Contains("gelu_backward: dout has dtype f64, expected f32"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::silu_forward(c.be, c.t(c.out), tensor()), doctest::Contains("silu_forward: inp is empty"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::silu_backward(c.be, tensor(c.dx.data(), flat), c.t(c.dout), c.t(c.x)),
                       doctest::Contains("silu_backward: dinp has shape [336], expected [3, 7, 16]"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::swiglu_forward(c.be, c.t(c.out), c.t(c.gate), tensor(c.up.data(), flat)),
                       doctest::Contains("swiglu_forward: up has shape [336], expected [3, 7, 16]"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::swiglu_forward(c.be, c.t(c.out), tensor(), c.t(c.up)), doctest::Contains("swiglu_forward: gate is empty"),
                       lwcl::error);
  CHECK_THROWS_WITH_AS(ops::swiglu_backward(c.be, c.t(c.dgate), tensor(xd.data(), c.xs), c.t(c.dout), c.t(c.gate), c.t(c.up)),
                       doctest::Contains("swiglu_backward: dup has dtype f64, expected f32"), lwcl::error);
  std::vector<std::int32_t> xi(c.x.size());
  CHECK_THROWS_WITH_AS(ops::gelu_forward(c.be, tensor(xi.data(), c.xs), tensor(xi.data(), c.xs), ops::gelu_kind::tanh),
                       doctest::Contains("gelu_forward: dtype i32 is not supported here"), lwcl::error);
}
