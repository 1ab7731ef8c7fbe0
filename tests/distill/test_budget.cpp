// How a recovery's budget is parsed and shared among segment visits and the final KD stage.
#include <doctest/doctest.h>

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
