// LayerNorm: PyTorch oracle (f32 and f64), finite-difference gradients, and argument checks.
#include <doctest/doctest.h>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/ops/layernorm.hpp"
#include "support/check.hpp"
#include "support/fixture.hpp"

using namespace lwcl;
using lwcl::test::rel_error;

namespace {

template <class T>
struct ln_case {
  test::fixture fx{"ops/layernorm.lwfx"};
  shape xs = fx.dims("x");
  index_t C = xs.last(), N = xs.numel() / C;
  std::vector<T> x = fx.as<T>("x"), weight = fx.as<T>("weight"), bias = fx.as<T>("bias"), dout = fx.as<T>("dout");
  std::vector<T> out = std::vector<T>(x.size()), mean = std::vector<T>(N), rstd = std::vector<T>(N);
  std::vector<T> dx = std::vector<T>(x.size()), dweight = std::vector<T>(C), dbias = std::vector<T>(C);
  backend::cpu be;

  void forward() {
    ops::layernorm_forward(be, tensor(out.data(), xs), tensor(mean.data(), {N}), tensor(rstd.data(), {N}), tensor(x.data(), xs),
                           tensor(weight.data(), {C}), tensor(bias.data(), {C}));
  }
  void backward() {
    ops::layernorm_backward(be, tensor(dx.data(), xs), tensor(dweight.data(), {C}), tensor(dbias.data(), {C}),
                            tensor(dout.data(), xs), tensor(x.data(), xs), tensor(weight.data(), {C}), tensor(mean.data(), {N}),
                            tensor(rstd.data(), {N}));
  }
};

}  // namespace

TEST_CASE_TEMPLATE("layernorm matches PyTorch forward and backward", T, float, double) {
  ln_case<T> c;
  c.forward();
  c.backward();
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  CHECK(rel_error(c.out, c.fx.f64("out")) < tol);
  CHECK(rel_error(c.dx, c.fx.f64("dx")) < 10 * tol);
  CHECK(rel_error(c.dweight, c.fx.f64("dweight")) < 10 * tol);
  CHECK(rel_error(c.dbias, c.fx.f64("dbias")) < 10 * tol);
}

TEST_CASE("layernorm gradients match finite differences") {
  ln_case<double> c;
  c.forward();
  c.backward();
  auto loss = [&] {
    c.forward();
    return test::dot(c.out, c.dout);
  };
  CHECK(test::gradcheck(c.x, c.dx, loss) < 1e-6);
  CHECK(test::gradcheck(c.weight, c.dweight, loss) < 1e-6);
  CHECK(test::gradcheck(c.bias, c.dbias, loss) < 1e-6);
}

TEST_CASE("layernorm backward accumulates into existing gradients") {
  ln_case<double> c;
  c.forward();
  c.backward();
  const auto once = c.dx;
  c.backward();
  for (std::size_t i = 0; i < once.size(); ++i) CHECK(c.dx[i] == doctest::Approx(2 * once[i]));
}

TEST_CASE("layernorm rejects mismatched shapes and dtypes") {
  ln_case<float> c;
  std::vector<float> short_weight(static_cast<std::size_t>(c.C - 1));
  CHECK_THROWS_WITH_AS(ops::layernorm_forward(c.be, tensor(c.out.data(), c.xs), tensor(c.mean.data(), {c.N}),
                                              tensor(c.rstd.data(), {c.N}), tensor(c.x.data(), c.xs),
                                              tensor(short_weight.data(), {c.C - 1}), tensor()),
                       doctest::Contains("layernorm_forward: weight has shape [23], expected [24]"), lwcl::error);
  std::vector<double> wd(static_cast<std::size_t>(c.C));
  CHECK_THROWS_WITH_AS(ops::layernorm_forward(c.be, tensor(c.out.data(), c.xs), tensor(c.mean.data(), {c.N}),
                                              tensor(c.rstd.data(), {c.N}), tensor(c.x.data(), c.xs), tensor(wd.data(), {c.C}),
                                              tensor()),
                       doctest::Contains("layernorm_forward: weight has dtype f64, expected f32"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::layernorm_forward(c.be, tensor(c.out.data(), c.xs), tensor(c.mean.data(), {c.N}),
                                              tensor(c.rstd.data(), {c.N}), tensor(), tensor(c.weight.data(), {c.C}), tensor()),
                       doctest::Contains("layernorm_forward: inp is empty"), lwcl::error);
}
