// clip_grad_norm: torch.nn.utils.clip_grad_norm_'s rule (scale by max_norm / (norm + 1e-6) when that
// is below 1), the norm it returns, the parallel path, and non-finite gradients stopping the run.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/optim/clip.hpp"
#include "support/check.hpp"

using namespace lwcl;
using optim::clip_grad_norm;

TEST_CASE_TEMPLATE("clip_grad_norm scales gradients whose norm exceeds max_norm", T, float, double) {
  backend::cpu be;
  std::vector<T> g = {T(3), T(0), T(-4)};
  const double norm = clip_grad_norm(be, tensor(g.data(), {3}), 1.0);
  CHECK(norm == 5.0);
  const double coef = 1.0 / (5.0 + 1e-6);
  CHECK(g[0] == static_cast<T>(T(3) * static_cast<T>(coef)));
  CHECK(g[1] == T(0));
  CHECK(g[2] == static_cast<T>(T(-4) * static_cast<T>(coef)));
  CHECK(std::sqrt(test::dot(g, g)) == doctest::Approx(5.0 * coef).epsilon(std::is_same_v<T, float> ? 1e-6 : 1e-14));
}

TEST_CASE_TEMPLATE("clip_grad_norm leaves gradients within max_norm untouched", T, float, double) {
  backend::cpu be;
  std::vector<T> g = {T(0.3), T(-0.4), T(1.2)};
  const auto before = g;
  const double norm = clip_grad_norm(be, tensor(g.data(), {3}), 2.0);
  CHECK(norm == doctest::Approx(1.3).epsilon(1e-6));
  CHECK(std::memcmp(g.data(), before.data(), g.size() * sizeof(T)) == 0);
}

TEST_CASE("clip_grad_norm follows PyTorch's 1e-6 guard at the boundary") {
  backend::cpu be;
  // norm == max_norm: torch still multiplies by max_norm / (norm + 1e-6) < 1.
  std::vector<double> g = {3, 4};
  CHECK(clip_grad_norm(be, tensor(g.data(), {2}), 5.0) == 5.0);
  CHECK(g[0] == 3 * (5.0 / (5.0 + 1e-6)));
  CHECK(g[0] < 3);
}

TEST_CASE("clip_grad_norm over a large buffer (parallel path) matches a serial reference") {
  backend::cpu be;
  auto g = test::random_normal<double>(300001, 42, 0.01);
  double ref = 0;
  for (double x : g) ref += x * x;
  ref = std::sqrt(ref);
  const auto before = g;
  const double norm = clip_grad_norm(be, tensor(g.data(), {static_cast<index_t>(g.size())}), 1.0);
  CHECK(norm == doctest::Approx(ref).epsilon(1e-12));
  REQUIRE(norm > 1.0);
  const double coef = 1.0 / (norm + 1e-6);
  for (std::size_t i = 0; i < g.size(); i += 997) CHECK(g[i] == before[i] * coef);
  CHECK(std::sqrt(test::dot(g, g)) == doctest::Approx(norm * coef).epsilon(1e-12));
}

TEST_CASE_TEMPLATE("clip_grad_norm stops on a non-finite norm and leaves the gradient as it was", T, float, double) {
  backend::cpu be;
  std::vector<T> g = {T(1), T(NAN), T(2)};
  CHECK_THROWS_WITH_AS(clip_grad_norm(be, tensor(g.data(), {3}), 1.0),
                       doctest::Contains("clip_grad_norm: gradient norm is nan (non-finite)"), lwcl::error);
  CHECK(g[0] == T(1));
  CHECK(g[2] == T(2));
  g[1] = T(INFINITY);
  CHECK_THROWS_WITH_AS(clip_grad_norm(be, tensor(g.data(), {3}), 1.0), doctest::Contains("clip_grad_norm: gradient norm is inf"),
                       lwcl::error);
}

TEST_CASE("clip_grad_norm reports a norm that overflows as non-finite") {
  backend::cpu be;
  std::vector<double> g = {1e200, 1e200};
  CHECK_THROWS_WITH_AS(clip_grad_norm(be, tensor(g.data(), {2}), 1.0), doctest::Contains("gradient norm is inf"), lwcl::error);
}

TEST_CASE("clip_grad_norm rejects bad arguments") {
  backend::cpu be;
  std::vector<float> g = {1, 2};
  CHECK_THROWS_WITH_AS(clip_grad_norm(be, tensor(g.data(), {2}), 0.0),
                       doctest::Contains("clip_grad_norm: max_norm is 0, expected a finite value > 0"), lwcl::error);
  CHECK_THROWS_WITH_AS(clip_grad_norm(be, tensor(g.data(), {2}), -1.0), doctest::Contains("clip_grad_norm: max_norm is -1"),
                       lwcl::error);
  CHECK_THROWS_WITH_AS(clip_grad_norm(be, tensor(), 1.0), doctest::Contains("clip_grad_norm: grad is empty"), lwcl::error);
  std::vector<std::int32_t> gi = {1, 2};
  CHECK_THROWS_WITH_AS(clip_grad_norm(be, tensor(gi.data(), {2}), 1.0),
                       doctest::Contains("clip_grad_norm: dtype i32 is not supported"), lwcl::error);
}
