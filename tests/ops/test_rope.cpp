// RoPE: Hugging Face rotate-half oracle from PyTorch (f32 and f64, two bases, a position offset),
// in-place use, finite-difference gradients, accumulation, and argument checks.
#include <doctest/doctest.h>

#include <string>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/ops/rope.hpp"
#include "support/check.hpp"
#include "support/fixture.hpp"

using namespace lwcl;
using lwcl::test::rel_error;

namespace {

template <class T>
struct rope_case {
  test::fixture fx;
  shape xs = fx.dims("x");
  double theta = fx.scalar("theta");
  index_t pos_offset = static_cast<index_t>(fx.ints("pos_offset").at(0));
  std::vector<T> x = fx.as<T>("x"), dout = fx.as<T>("dout");
  std::vector<T> out = std::vector<T>(x.size()), dx = std::vector<T>(x.size());
  backend::cpu be;

  explicit rope_case(const std::string& file) : fx(file) {}
  void forward() { ops::rope_forward(be, tensor(out.data(), xs), tensor(x.data(), xs), theta, pos_offset); }
  void backward() { ops::rope_backward(be, tensor(dx.data(), xs), tensor(dout.data(), xs), theta, pos_offset); }
};

const char* const rope_files[] = {"ops/rope_theta1e4.lwfx", "ops/rope_theta5e5.lwfx"};

}  // namespace

TEST_CASE_TEMPLATE("rope matches the Hugging Face formula in PyTorch", T, float, double) {
  for (const char* file : rope_files) {
    const std::string name = file;
    CAPTURE(name);
    rope_case<T> c(file);
    c.forward();
    c.backward();
    const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
    CHECK(rel_error(c.out, c.fx.f64("out")) < tol);
    CHECK(rel_error(c.dx, c.fx.f64("dx")) < 10 * tol);
  }
}

TEST_CASE("rope fixtures exercise a non-default base and a position offset") {
  rope_case<double> c("ops/rope_theta5e5.lwfx");
  CHECK(c.theta == 500000.0);
  CHECK(c.pos_offset > 0);
  // Without the offset the result must differ: the offset is really applied.
  c.pos_offset = 0;
  c.forward();
  CHECK(rel_error(c.out, c.fx.f64("out")) > 1e-2);
}

TEST_CASE("rope works in place") {
  rope_case<double> c("ops/rope_theta1e4.lwfx");
  c.forward();
  ops::rope_forward(c.be, tensor(c.x.data(), c.xs), tensor(c.x.data(), c.xs), c.theta, c.pos_offset);
  CHECK(c.x == c.out);
}

TEST_CASE("rope gradients match finite differences") {
  for (const char* file : rope_files) {
    const std::string name = file;
    CAPTURE(name);
    rope_case<double> c(file);
    c.backward();
    auto loss = [&] {
      c.forward();
      return test::dot(c.out, c.dout);
    };
    CHECK(test::gradcheck(c.x, c.dx, loss) < 1e-6);
  }
}

TEST_CASE("rope backward accumulates and inverts the forward") {
  rope_case<double> c("ops/rope_theta1e4.lwfx");
  c.backward();
  const auto once = c.dx;
  c.backward();
  for (std::size_t i = 0; i < once.size(); ++i) CHECK(c.dx[i] == doctest::Approx(2 * once[i]));
  // The rotation is orthogonal: backward applied to the forward's output gives back the input.
  c.forward();
  std::vector<double> back(c.x.size());
  ops::rope_backward(c.be, tensor(back.data(), c.xs), tensor(c.out.data(), c.xs), c.theta, c.pos_offset);
  CHECK(rel_error(back, c.x) < 1e-14);
}

TEST_CASE("rope rejects odd head dims, bad shapes and arguments") {
  backend::cpu be;
  std::vector<float> a(2 * 3 * 2 * 5), b(a.size());
  CHECK_THROWS_WITH_AS(ops::rope_forward(be, tensor(b.data(), {2, 3, 2, 5}), tensor(a.data(), {2, 3, 2, 5}), 10000.0),
                       doctest::Contains("rope_forward: head dim D = 5 is odd"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::rope_backward(be, tensor(b.data(), {2, 3, 2, 5}), tensor(a.data(), {2, 3, 2, 5}), 10000.0),
                       doctest::Contains("rope_backward: head dim D = 5 is odd"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::rope_forward(be, tensor(b.data(), {6, 10}), tensor(a.data(), {6, 10}), 10000.0),
                       doctest::Contains("rope_forward: inp has shape [6, 10], expected rank 4 [B, T, H, D]"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::rope_forward(be, tensor(b.data(), {2, 3, 5, 2}), tensor(a.data(), {2, 3, 2, 5}), 10000.0),
                       doctest::Contains("rope_forward: out has shape [2, 3, 5, 2], expected [2, 3, 2, 5]"), lwcl::error);
  std::vector<double> d(a.size());
  CHECK_THROWS_WITH_AS(ops::rope_forward(be, tensor(d.data(), {2, 3, 2, 5}), tensor(a.data(), {2, 3, 2, 5}), 10000.0),
                       doctest::Contains("rope_forward: out has dtype f64, expected f32"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::rope_forward(be, tensor(b.data(), {2, 3, 2, 5}), tensor(), 10000.0),
                       doctest::Contains("rope_forward: inp is empty"), lwcl::error);
  std::vector<float> e(2 * 3 * 2 * 4);
  CHECK_THROWS_WITH_AS(ops::rope_forward(be, tensor(e.data(), {2, 3, 2, 4}), tensor(e.data(), {2, 3, 2, 4}), 0.0),
                       doctest::Contains("rope_forward: theta = 0, expected a finite positive base"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::rope_forward(be, tensor(e.data(), {2, 3, 2, 4}), tensor(e.data(), {2, 3, 2, 4}), 10000.0, -1),
                       doctest::Contains("rope_forward: pos_offset = -1, expected >= 0"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::rope_forward(be, tensor(e.data() + 1, {1, 3, 2, 4}), tensor(e.data(), {1, 3, 2, 4}), 10000.0),
                       doctest::Contains("rope_forward: out partly overlaps inp"), lwcl::error);
  CHECK_THROWS_WITH_AS(ops::rope_backward(be, tensor(e.data(), {2, 3, 2, 4}), tensor(e.data(), {2, 3, 2, 4}), 10000.0),
                       doctest::Contains("rope_backward: dinp overlaps dout"), lwcl::error);
}
