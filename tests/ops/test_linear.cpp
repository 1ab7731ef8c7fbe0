// Linear: PyTorch oracle (f32 and f64, with and without bias), finite-difference gradients, accumulation,
// and argument checks.
#include <doctest/doctest.h>

#include <cmath>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/ops/linear.hpp"
#include "support/check.hpp"
#include "support/fixture.hpp"

using namespace lwcl;
using lwcl::test::rel_error;

namespace {

template <class T>
struct linear_case {
  test::fixture fx{"ops/linear.lwfx"};
  shape xs = fx.dims("x"), ws = fx.dims("weight"), os = fx.dims("out");
  index_t OC = ws[0], IC = ws[1];
  std::vector<T> x = fx.as<T>("x"), weight = fx.as<T>("weight"), bias = fx.as<T>("bias"), dout = fx.as<T>("dout");
  std::vector<T> out = std::vector<T>(static_cast<std::size_t>(os.numel()));
  std::vector<T> dx = std::vector<T>(x.size()), dweight = std::vector<T>(weight.size()), dbias = std::vector<T>(bias.size());
  backend::cpu be;

  void forward(bool with_bias = true) {
    ops::linear_forward(be, tensor(out.data(), os), tensor(x.data(), xs), tensor(weight.data(), ws),
                        with_bias ? tensor(bias.data(), {OC}) : tensor());
  }
  void backward(bool with_dinp = true, bool with_bias = true) {
    ops::linear_backward(be, with_dinp ? tensor(dx.data(), xs) : tensor(), tensor(dweight.data(), ws),
                         with_bias ? tensor(dbias.data(), {OC}) : tensor(), tensor(dout.data(), os), tensor(x.data(), xs),
                         tensor(weight.data(), ws));
  }
};

}  // namespace

TEST_CASE_TEMPLATE("linear matches PyTorch forward and backward", T, float, double) {
  linear_case<T> c;
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  c.forward();
  CHECK(rel_error(c.out, c.fx.f64("out")) < tol);
  c.forward(false);
  CHECK(rel_error(c.out, c.fx.f64("out_nobias")) < tol);
  c.backward();
  CHECK(rel_error(c.dx, c.fx.f64("dx")) < 10 * tol);
  CHECK(rel_error(c.dweight, c.fx.f64("dweight")) < 10 * tol);
  CHECK(rel_error(c.dbias, c.fx.f64("dbias")) < 10 * tol);
}

TEST_CASE("linear backward skips dinp and dbias when they are empty") {
  linear_case<double> c;
  c.backward(false, false);
  CHECK(rel_error(c.dweight, c.fx.f64("dweight")) < 1e-12);
  for (double v : c.dx) CHECK(v == 0.0);
  for (double v : c.dbias) CHECK(v == 0.0);
}

TEST_CASE("linear gradients match finite differences") {
  linear_case<double> c;
  c.backward();
  auto loss = [&] {
    c.forward();
    return test::dot(c.out, c.dout);
  };
  CHECK(test::gradcheck(c.x, c.dx, loss) < 1e-6);
  CHECK(test::gradcheck(c.weight, c.dweight, loss) < 1e-6);
  CHECK(test::gradcheck(c.bias, c.dbias, loss) < 1e-6);
}

TEST_CASE("linear backward accumulates into existing gradients") {
  linear_case<double> c;
  c.backward();
  const auto dx1 = c.dx, dw1 = c.dweight, db1 = c.dbias;
  c.backward();
  for (std::size_t i = 0; i < dx1.size(); ++i) CHECK(c.dx[i] == doctest::Approx(2 * dx1[i]));
  for (std::size_t i = 0; i < dw1.size(); ++i) CHECK(c.dweight[i] == doctest::Approx(2 * dw1[i]));
  for (std::size_t i = 0; i < db1.size(); ++i) CHECK(c.dbias[i] == doctest::Approx(2 * db1[i]));
}

TEST_CASE("linear accepts any number of leading axes") {
  // The same rows viewed as (N, IC) must give the same result as (B, T, IC).
  linear_case<double> c;
  c.forward();
  const auto out3 = c.out;
  const index_t N = c.xs.numel() / c.IC;
  ops::linear_forward(c.be, tensor(c.out.data(), {N, c.OC}), tensor(c.x.data(), {N, c.IC}), tensor(c.weight.data(), c.ws),
                      tensor(c.bias.data(), {c.OC}));
  CHECK(c.out == out3);
}

TEST_CASE("linear rejects mismatched shapes, dtypes, empty and overlapping tensors") {
  linear_case<float> c;
  const tensor x(c.x.data(), c.xs), w(c.weight.data(), c.ws), b(c.bias.data(), {c.OC}), out(c.out.data(), c.os);
  std::vector<float> wide(static_cast<std::size_t>(c.OC * (c.IC + 1)));
  CHECK_THROWS_WITH_AS(ops::linear_forward(c.be, out, x, tensor(wide.data(), {c.OC, c.IC + 1}), b),
                       doctest::Contains("linear_forward: weight has shape [10, 13], expected [OC, 12]"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::linear_forward(c.be, tensor(c.out.data(), {2, 5, 9}), x, w, b),
                       doctest::Contains("linear_forward: out has shape [2, 5, 9], expected [2, 5, 10]"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::linear_forward(c.be, out, x, w, tensor(c.bias.data(), {c.OC - 1})),
                       doctest::Contains("linear_forward: bias has shape [9], expected [10]"), lwcl::error);
  std::vector<double> bd(static_cast<std::size_t>(c.OC));
  CHECK_THROWS_WITH_AS(ops::linear_forward(c.be, out, x, w, tensor(bd.data(), {c.OC})),
                       doctest::Contains("linear_forward: bias has dtype f64, expected f32"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::linear_forward(c.be, out, tensor(), w, b), doctest::Contains("linear_forward: inp is empty"),
                       lwcl::error);
  // Square weight, out written over inp: BLAS would silently read its own output.
  std::vector<float> sq(static_cast<std::size_t>(c.IC * c.IC));
  CHECK_THROWS_WITH_AS(ops::linear_forward(c.be, x, x, tensor(sq.data(), {c.IC, c.IC}), tensor()),
                       doctest::Contains("linear_forward: out overlaps inp"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::linear_backward(c.be, tensor(c.dx.data(), c.xs), tensor(c.dweight.data(), {c.OC, c.IC - 1}),
                                            tensor(), tensor(c.dout.data(), c.os), x, w),
                       doctest::Contains("linear_backward: dweight has shape [10, 11], expected [10, 12]"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::linear_backward(c.be, tensor(c.dx.data(), c.xs), tensor(c.dweight.data(), c.ws), tensor(),
                                            tensor(c.dout.data(), {2, 5, 11}), x, w),
                       doctest::Contains("linear_backward: dout has shape [2, 5, 11], expected [2, 5, 10]"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::linear_backward(c.be, tensor(c.dx.data(), c.xs), tensor(), tensor(), tensor(c.dout.data(), c.os), x, w),
                       doctest::Contains("linear_backward: dweight has shape [], expected [10, 12]"), lwcl::error);
}

TEST_CASE("linear_gelu_forward is linear_forward then gelu_forward, keeping the pre-activation, and checks its arguments") {
  linear_case<double> c;
  const tensor x(c.x.data(), c.xs), w(c.weight.data(), c.ws), b(c.bias.data(), {c.OC});
  for (const auto kind : {ops::gelu_kind::tanh, ops::gelu_kind::erf}) {
    std::vector<double> pre(c.out.size()), out(c.out.size()), ref_out(c.out.size());
    ops::linear_gelu_forward(c.be, tensor(out.data(), c.os), tensor(pre.data(), c.os), x, w, b, kind);
    c.forward();
    CHECK(pre == c.out);
    ops::gelu_forward(c.be, tensor(ref_out.data(), c.os), tensor(c.out.data(), c.os), kind);
    CHECK(out == ref_out);
    // The PyTorch fixture's linear output, through the GELU formula in double.
    const std::vector<double> want = c.fx.f64("out");
    for (std::size_t i = 0; i < want.size(); i += 7) {
      const double z = want[i];
      const double g = kind == ops::gelu_kind::erf
                           ? 0.5 * z * std::erfc(-z / std::sqrt(2.0))
                           : 0.5 * z * (1 + std::tanh(std::sqrt(2.0 / 3.141592653589793) * (z + 0.044715 * z * z * z)));
      CHECK(out[i] == doctest::Approx(g).epsilon(1e-12));
    }
  }
  std::vector<double> pre(c.out.size()), out(c.out.size());
  CHECK_THROWS_WITH_AS(ops::linear_gelu_forward(c.be, tensor(out.data(), {2, 5, 9}), tensor(pre.data(), c.os), x, w, b,
                                                ops::gelu_kind::tanh),
                       doctest::Contains("linear_gelu_forward: out has shape [2, 5, 9], expected [2, 5, 10]"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::linear_gelu_forward(c.be, tensor(pre.data(), c.os), tensor(pre.data(), c.os), x, w, b,
                                                ops::gelu_kind::tanh),
                       doctest::Contains("linear_gelu_forward: out overlaps pre"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::linear_gelu_forward(c.be, tensor(out.data(), c.os), tensor(pre.data(), {2, 5, 9}), x, w, b,
                                                ops::gelu_kind::tanh),
                       doctest::Contains("linear_gelu_forward: pre has shape [2, 5, 9], expected [2, 5, 10]"), lwcl::error);
}
