// lwcl::math: each function keeps its argument's precision (a float kernel must not silently compute
// in double), and agrees with the standard library.
#include <doctest/doctest.h>

#include <cmath>
#include <initializer_list>
#include <limits>
#include <type_traits>

#include "lwcl/core/math.hpp"

using namespace lwcl;

static_assert(std::is_same_v<decltype(math::sqrt(1.0f)), float>);
static_assert(std::is_same_v<decltype(math::exp(1.0f)), float>);
static_assert(std::is_same_v<decltype(math::tanh(1.0f)), float>);
static_assert(std::is_same_v<decltype(math::pow(1.0f, 2.0f)), float>);
static_assert(std::is_same_v<decltype(math::sqrt(1.0)), double>);
static_assert(std::is_same_v<decltype(math::erf(1.0)), double>);
static_assert(std::is_same_v<decltype(math::max(1, 2)), int>);

TEST_CASE("lwcl::math agrees with the standard library in float and double") {
  for (double x : {0.25, 1.0, 2.5, 7.0}) {
    CAPTURE(x);
    const float xf = static_cast<float>(x);
    CHECK(math::sqrt(xf) == std::sqrt(xf));
    CHECK(math::exp(xf) == std::exp(xf));
    CHECK(math::log(xf) == std::log(xf));
    CHECK(math::tanh(xf) == std::tanh(xf));
    CHECK(math::erf(xf) == std::erf(xf));
    CHECK(math::cos(xf) == std::cos(xf));
    CHECK(math::sin(xf) == std::sin(xf));
    CHECK(math::pow(xf, 1.5f) == std::pow(xf, 1.5f));
    CHECK(math::abs(-xf) == xf);
    CHECK(math::sqrt(x) == std::sqrt(x));
    CHECK(math::exp(x) == std::exp(x));
    CHECK(math::log(x) == std::log(x));
    CHECK(math::tanh(x) == std::tanh(x));
    CHECK(math::erf(x) == std::erf(x));
    CHECK(math::pow(x, 1.5) == std::pow(x, 1.5));
    CHECK(math::abs(-x) == x);
  }
  CHECK(math::isfinite(1.0f));
  CHECK_FALSE(math::isfinite(std::numeric_limits<float>::infinity()));
  CHECK_FALSE(math::isfinite(std::numeric_limits<double>::quiet_NaN()));
  CHECK(math::max(2.0, 3.0) == 3.0);
  CHECK(math::min(2.0f, 3.0f) == 2.0f);
}
