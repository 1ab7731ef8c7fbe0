// cosine_schedule: the rate at chosen steps (values from Python's math module), the rates of the
// optimiser fixture, shape of the curve, and rejected configurations.
#include <doctest/doctest.h>

#include <cmath>
#include <numbers>
#include <utility>

#include "lwcl/optim/schedule.hpp"
#include "support/fixture.hpp"

using namespace lwcl;
using optim::cosine_schedule;

TEST_CASE("cosine_schedule warms up linearly, decays by cosine, then holds the floor") {
  const cosine_schedule s{1e-3, 1e-4, 10, 110};
  // step -> rate, computed with Python: min + 0.5 * (max - min) * (1 + cos(pi * t)).
  const std::pair<long, double> expected[] = {
      {1, 0.0001},   {5, 0.0005},   {10, 0.001},
      {11, 0.0009997779521645793},  {35, 0.0008681980515339464},
      {60, 0.00055}, {85, 0.00023180194846605365},
      {109, 0.00010022204783542078}, {110, 0.0001},
      {111, 0.0001}, {1000, 0.0001}};
  for (const auto& e : expected) {
    const long step = e.first;
    CAPTURE(step);
    CHECK(s.lr(step) == doctest::Approx(e.second).epsilon(1e-14));
  }
  for (long step = 11; step <= 120; ++step) CHECK(s.lr(step) <= s.lr(step - 1));
  for (long step = 2; step <= 10; ++step) CHECK(s.lr(step) > s.lr(step - 1));
}

TEST_CASE("cosine_schedule matches the rates of the optimiser fixture") {
  test::fixture fx{"optim/adamw.lwfx"};
  const auto cfg = fx.f64("config");  // max_lr, min_lr, warmup, total, ...
  const cosine_schedule s{cfg[0], cfg[1], static_cast<long>(cfg[2]), static_cast<long>(cfg[3])};
  const auto lrs = fx.f64("lr");
  REQUIRE(lrs.size() == 10);
  CHECK(static_cast<long>(lrs.size()) > s.total_steps);  // the fixture reaches the constant tail
  for (std::size_t i = 0; i < lrs.size(); ++i) {
    CAPTURE(i);
    CHECK(s.lr(static_cast<long>(i + 1)) == doctest::Approx(lrs[i]).epsilon(1e-15));
  }
}

TEST_CASE("cosine_schedule edge configurations") {
  SUBCASE("no warm-up: the cosine starts at step 1") {
    const cosine_schedule s{2.0, 0.5, 0, 4};
    CHECK(s.lr(1) == doctest::Approx(0.5 + 0.75 * (1 + std::cos(std::numbers::pi / 4))));
    CHECK(s.lr(4) == 0.5);
  }
  SUBCASE("no decay phase: warm-up straight into the floor") {
    const cosine_schedule s{2.0, 0.5, 4, 4};
    CHECK(s.lr(2) == 1.0);
    CHECK(s.lr(4) == 2.0);
    CHECK(s.lr(5) == 0.5);
  }
  SUBCASE("a constant rate") {
    const cosine_schedule s{0.1, 0.1, 0, 0};
    CHECK(s.lr(1) == 0.1);
    CHECK(s.lr(100) == 0.1);
  }
}

TEST_CASE("cosine_schedule rejects bad configurations") {
  CHECK_THROWS_WITH_AS((cosine_schedule{1e-3, 1e-4, 10, 5}.lr(1)),
                       doctest::Contains("cosine_schedule: total_steps (5) is less than warmup_steps (10)"), lwcl::error);
  CHECK_THROWS_WITH_AS((cosine_schedule{-1e-3, 1e-4, 10, 50}.lr(1)),
                       doctest::Contains("cosine_schedule: max_lr is -0.001, expected a finite value >= 0"), lwcl::error);
  CHECK_THROWS_WITH_AS((cosine_schedule{1e-3, -1e-4, 10, 50}.lr(1)), doctest::Contains("cosine_schedule: min_lr is -0.0001"),
                       lwcl::error);
  CHECK_THROWS_WITH_AS((cosine_schedule{1e-3, 1e-4, -1, 50}.lr(1)), doctest::Contains("cosine_schedule: warmup_steps is -1"),
                       lwcl::error);
  CHECK_THROWS_WITH_AS((cosine_schedule{NAN, 1e-4, 1, 50}.lr(1)), doctest::Contains("cosine_schedule: max_lr is nan"),
                       lwcl::error);
  CHECK_THROWS_WITH_AS((cosine_schedule{1e-3, 1e-4, 10, 50}.lr(0)),
                       doctest::Contains("cosine_schedule: step 0 is not 1-based"), lwcl::error);
  CHECK_NOTHROW(cosine_schedule{1e-3, 1e-4, 10, 50}.validate());
}
