// RMSNorm: PyTorch oracle (f32 and f64), finite-difference gradients, accumulation, and argument checks.
#include <doctest/doctest.h>

#include <cmath>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/ops/rmsnorm.hpp"
#include "support/check.hpp"
#include "support/fixture.hpp"

using namespace lwcl;
using lwcl::test::rel_error;

namespace {

template <class T>
struct rms_case {
  test::fixture fx{"ops/rmsnorm.lwfx"};
  shape xs = fx.dims("x");
  index_t C = xs.last(), N = xs.numel() / C;
  double eps = fx.scalar("eps");
  std::vector<T> x = fx.as<T>("x"), weight = fx.as<T>("weight"), dout = fx.as<T>("dout");
  std::vector<T> out = std::vector<T>(x.size()), rstd = std::vector<T>(N);
  std::vector<T> dx = std::vector<T>(x.size()), dweight = std::vector<T>(C);
  backend::cpu be;

  void forward() {
    ops::rmsnorm_forward(be, tensor(out.data(), xs), tensor(rstd.data(), {N}), tensor(x.data(), xs), tensor(weight.data(), {C}), eps);
  }
  void backward() {
    ops::rmsnorm_backward(be, tensor(dx.data(), xs), tensor(dweight.data(), {C}), tensor(dout.data(), xs), tensor(x.data(), xs),
                          tensor(weight.data(), {C}), tensor(rstd.data(), {N}));
  }
};

}  // namespace

TEST_CASE_TEMPLATE("rmsnorm matches PyTorch forward and backward", T, float, double) {
  rms_case<T> c;
  c.forward();
  c.backward();
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  CHECK(rel_error(c.out, c.fx.f64("out")) < tol);
  CHECK(rel_error(c.dx, c.fx.f64("dx")) < 10 * tol);
  CHECK(rel_error(c.dweight, c.fx.f64("dweight")) < 10 * tol);
  // The saved statistic is the reciprocal RMS of each row.
  const auto x = c.fx.f64("x");
  std::vector<double> want(static_cast<std::size_t>(c.N));
  for (index_t r = 0; r < c.N; ++r) {
    double ms = 0;
    for (index_t i = 0; i < c.C; ++i) ms += x[static_cast<std::size_t>(r * c.C + i)] * x[static_cast<std::size_t>(r * c.C + i)];
    want[static_cast<std::size_t>(r)] = 1 / std::sqrt(ms / static_cast<double>(c.C) + c.eps);
  }
  CHECK(rel_error(c.rstd, want) < tol);
}

TEST_CASE("rmsnorm gradients match finite differences") {
  rms_case<double> c;
  c.forward();
  c.backward();
  auto loss = [&] {
    c.forward();
    return test::dot(c.out, c.dout);
  };
  CHECK(test::gradcheck(c.x, c.dx, loss) < 1e-6);
  CHECK(test::gradcheck(c.weight, c.dweight, loss) < 1e-6);
}

TEST_CASE("rmsnorm backward accumulates into existing gradients") {
  rms_case<double> c;
  c.forward();
  c.backward();
  const auto dx1 = c.dx;
  const auto dw1 = c.dweight;
  c.backward();
  for (std::size_t i = 0; i < dx1.size(); ++i) CHECK(c.dx[i] == doctest::Approx(2 * dx1[i]));
  for (std::size_t i = 0; i < dw1.size(); ++i) CHECK(c.dweight[i] == doctest::Approx(2 * dw1[i]));
}

TEST_CASE("rmsnorm rejects mismatched shapes, dtypes and empty input") {
  rms_case<float> c;
  std::vector<float> short_weight(static_cast<std::size_t>(c.C - 1));
  CHECK_THROWS_WITH_AS(ops::rmsnorm_forward(c.be, tensor(c.out.data(), c.xs), tensor(c.rstd.data(), {c.N}), tensor(c.x.data(), c.xs),
                                            tensor(short_weight.data(), {c.C - 1}), c.eps),
                       doctest::Contains("rmsnorm_forward: weight has shape [23], expected [24]"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::rmsnorm_forward(c.be, tensor(c.out.data(), c.xs), tensor(c.rstd.data(), {c.N - 1}),
                                            tensor(c.x.data(), c.xs), tensor(c.weight.data(), {c.C}), c.eps),
                       doctest::Contains("rmsnorm_forward: rstd has shape [9] (9 elements), expected 10 elements"), lwcl::error);
  std::vector<double> wd(static_cast<std::size_t>(c.C));
  CHECK_THROWS_WITH_AS(ops::rmsnorm_forward(c.be, tensor(c.out.data(), c.xs), tensor(c.rstd.data(), {c.N}), tensor(c.x.data(), c.xs),
                                            tensor(wd.data(), {c.C}), c.eps),
                       doctest::Contains("rmsnorm_forward: weight has dtype f64, expected f32"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::rmsnorm_forward(c.be, tensor(c.out.data(), c.xs), tensor(c.rstd.data(), {c.N}), tensor(),
                                            tensor(c.weight.data(), {c.C}), c.eps),
                       doctest::Contains("rmsnorm_forward: inp is empty"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::rmsnorm_backward(c.be, tensor(c.dx.data(), c.xs), tensor(c.dweight.data(), {c.C}),
                                             tensor(c.dout.data(), {c.N, c.C}), tensor(c.x.data(), c.xs),
                                             tensor(c.weight.data(), {c.C}), tensor(c.rstd.data(), {c.N})),
                       doctest::Contains("rmsnorm_backward: dout has shape [10, 24], expected [2, 5, 24]"), lwcl::error);
  std::vector<double> dwd(static_cast<std::size_t>(c.C));
  CHECK_THROWS_WITH_AS(ops::rmsnorm_backward(c.be, tensor(c.dx.data(), c.xs), tensor(dwd.data(), {c.C}), tensor(c.dout.data(), c.xs),
                                             tensor(c.x.data(), c.xs), tensor(c.weight.data(), {c.C}), tensor(c.rstd.data(), {c.N})),
                       doctest::Contains("rmsnorm_backward: dweight has dtype f64, expected f32"), lwcl::error);
}
