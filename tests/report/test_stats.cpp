// report::summarise, the one mean and sample standard deviation of the harness's seed summaries, tables
// and chart bands: against the textbook formulas, and exact for equal values.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "lwcl/report/stats.hpp"

using namespace lwcl;

TEST_CASE("summarise gives the mean and the sample standard deviation (n - 1)") {
  const std::vector<double> v = {2, 4, 4, 4, 5, 5, 7, 9};
  const auto s = report::summarise(v);
  CHECK(s.n == 8);
  CHECK(s.mean == doctest::Approx(5.0).epsilon(1e-15));
  // Sum of squared deviations 32, over n - 1 = 7.
  CHECK(s.sd == doctest::Approx(std::sqrt(32.0 / 7.0)).epsilon(1e-14));
  CHECK(report::cell(s, "%.2f") == "5.00 +- 2.14");
}

TEST_CASE("summarise of equal values is that value with a deviation of exactly 0; one value has no sd") {
  // 0.1 three times: a plain sum over n gives 0.10000000000000002; the shifted mean gives 0.1 exactly.
  const auto s = report::summarise({0.1, 0.1, 0.1});
  CHECK(s.mean == 0.1);
  CHECK(s.sd == 0.0);
  const auto one = report::summarise({3.5});
  CHECK(one.n == 1);
  CHECK(one.mean == 3.5);
  CHECK(one.sd == 0.0);
  CHECK(report::cell(one) == "3.500");
  const auto none = report::summarise({});
  CHECK(none.n == 0);
  CHECK(none.mean == 0.0);
}

TEST_CASE("summarise keeps its precision for values far from 0") {
  const auto s = report::summarise({1e9 + 1, 1e9 + 2, 1e9 + 3});
  CHECK(s.mean == 1e9 + 2);
  CHECK(s.sd == doctest::Approx(1.0).epsilon(1e-12));
}
