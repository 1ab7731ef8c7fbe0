// How a recovery's budget is parsed and shared among segment visits and the final KD stage: equally or
// by difficulty, with a minimum a visit, and under seconds by the pace measured.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/distill/pipeline/budget.hpp"

using namespace lwcl;
using namespace lwcl::distill;

TEST_CASE("plan_budget: steps shared equally over the visits, the first ones taking the remainder") {
  const auto p = plan_budget(parse_budget("steps:23"), 4, false, 0.2, 512, 1000);
  CHECK(p.visit_steps == std::vector<long>{6, 6, 6, 5});
  CHECK(p.kd_steps == 0);
  CHECK(p.visit_total() == 23);
}

TEST_CASE("plan_budget: the final KD's share comes off first, rounded to the nearest step") {
  const auto p = plan_budget(parse_budget("steps:100"), 7, true, 0.25, 512, 1000);
  CHECK(p.kd_steps == 25);
  CHECK(p.visit_total() == 75);
  CHECK(p.visit_steps == std::vector<long>{11, 11, 11, 11, 11, 10, 10});
  // 0.2 of 37 steps is 7.4: 7 KD steps, 30 for the visits.
  const auto q = plan_budget(parse_budget("steps:37"), 3, true, 0.2, 512, 1000);
  CHECK(q.kd_steps == 7);
  CHECK(q.visit_steps == std::vector<long>{10, 10, 10});
}

TEST_CASE("plan_budget: tokens are whole steps of batch tokens") {
  // 10000 tokens at 16 x 32 = 512 tokens a step: 19 whole steps.
  const auto p = plan_budget(parse_budget("tokens:10000"), 2, false, 0.2, 512, 1000);
  CHECK(p.visit_steps == std::vector<long>{10, 9});
}

TEST_CASE("plan_budget: under seconds every visit may run to its cap, and the KD stage is planned") {
  const auto p = plan_budget(parse_budget("seconds:30"), 3, true, 0.2, 512, 777);
  CHECK(p.visit_steps == std::vector<long>{777, 777, 777});
  CHECK(p.kd_steps == 1);
  CHECK(plan_budget(parse_budget("seconds:30"), 3, false, 0.2, 512, 777).kd_steps == 0);
}

TEST_CASE("plan_budget: fewer steps than visits is refused, naming both") {
  CHECK_THROWS_WITH_AS(plan_budget(parse_budget("steps:10"), 8, true, 0.5, 512, 1000),
                       doctest::Contains("a budget of 10 steps gives 5 segment steps for 8 segment visits"), lwcl::error);
}

TEST_CASE("plan_budget: a minimum of steps a visit is kept, or refused naming it") {
  CHECK(plan_budget(parse_budget("steps:24"), 4, false, 0.2, 512, 1000, 6).visit_steps == std::vector<long>{6, 6, 6, 6});
  CHECK_THROWS_WITH_AS(plan_budget(parse_budget("steps:23"), 4, false, 0.2, 512, 1000, 6),
                       doctest::Contains("23 segment steps for 4 segment visits of at least 6 steps"), lwcl::error);
  CHECK_THROWS_WITH_AS(plan_budget(parse_budget("steps:23"), 4, false, 0.2, 512, 1000, 0),
                       doctest::Contains("min_visit_steps is 0, expected at least 1"), lwcl::error);
}

TEST_CASE("share_steps: the minimum first, the rest by weight, whole steps that add up") {
  // Equal weights: as plan_budget, the first visits take the remainder.
  CHECK(share_steps(23, {1, 1, 1, 1}, 1) == std::vector<long>{6, 6, 6, 5});
  // 30 steps, minimum 2: 24 spare by weights 1:2:3 -> 4, 8, 12.
  CHECK(share_steps(30, {1, 2, 3}, 2) == std::vector<long>{6, 10, 14});
  // Remainders: 10 spare by 1:1:1 -> 3.33 each; the first takes the extra step.
  CHECK(share_steps(10, {1, 1, 1}, 0) == std::vector<long>{4, 3, 3});
  // A weight far below the others still gets the minimum.
  const auto s = share_steps(100, {1e-6, 1, 1}, 5);
  CHECK(s[0] == 5);
  CHECK(s[0] + s[1] + s[2] == 100);
  // All weights zero: equal.
  CHECK(share_steps(9, {0, 0, 0}, 1) == std::vector<long>{3, 3, 3});
  CHECK_THROWS_WITH_AS(share_steps(5, {1, 1, 1}, 2), doctest::Contains("5 steps cannot give 3 visits 2 steps each"), lwcl::error);
  CHECK_THROWS_WITH_AS(share_steps(9, {1, -1, 1}, 1), doctest::Contains("a weight of -1"), lwcl::error);
}

TEST_CASE("share_weights: equal is all ones; difficulty is the losses scaled to a mean of 1") {
  CHECK(share_weights(budget_share::equal, {0.5, 4, 2}) == std::vector<double>{1, 1, 1});
  const auto w = share_weights(budget_share::difficulty, {1, 2, 3});
  REQUIRE(w.size() == 3);
  CHECK(w[0] == doctest::Approx(0.5));
  CHECK(w[1] == doctest::Approx(1.0));
  CHECK(w[2] == doctest::Approx(1.5));
  CHECK_THROWS_WITH_AS(share_weights(budget_share::difficulty, {1, std::nan(""), 3}),
                       doctest::Contains("segment visit 1 has difficulty nan"), lwcl::error);
  CHECK(parse_budget_share("difficulty") == budget_share::difficulty);
  CHECK_THROWS_WITH_AS(parse_budget_share("by_loss"), doctest::Contains("'by_loss' is unknown; expected equal or difficulty"),
                       lwcl::error);
}

TEST_CASE("visit_time_share: equal weights give the equal share of the visits left; later phases count one each") {
  CHECK(visit_time_share({1, 1, 1}, 0) == doctest::Approx(1.0 / 3));
  CHECK(visit_time_share({1, 1}, 2) == doctest::Approx(1.0 / 4));
  // By difficulty: this visit weighs 1.5 of a phase summing to 3, with 3 visits after the phase.
  CHECK(visit_time_share({1.5, 0.5, 1.0}, 3) == doctest::Approx(1.5 / 6));
}

TEST_CASE("steps_for_seconds: the steps the time holds at the measured pace, within the minimum and the cap") {
  CHECK(steps_for_seconds(10, 0.25, 1, 1000) == 40);
  CHECK(steps_for_seconds(10, 0.25, 50, 1000) == 50);  // the minimum
  CHECK(steps_for_seconds(10, 1e-6, 1, 1000) == 1000);  // the cap
  CHECK(steps_for_seconds(10, 0, 1, 777) == 777);      // nothing measured: the cap
  CHECK(steps_for_seconds(-1, 0.5, 3, 777) == 3);      // no time left: the minimum
}
