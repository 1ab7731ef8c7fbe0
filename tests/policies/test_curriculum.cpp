// Curriculum policies: visiting orders, input schedules and granularity growth on hand-worked cases,
// their composition into curriculum<Order, Inputs, Growth>, the two_stage default, and the checked
// calls that refuse a curriculum's bad output.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "lwcl/policies/curriculum/as_segmented.hpp"
#include "lwcl/policies/curriculum/curriculum.hpp"
#include "lwcl/policies/curriculum/doubling.hpp"
#include "lwcl/policies/curriculum/easy_to_hard.hpp"
#include "lwcl/policies/curriculum/front_to_back.hpp"
#include "lwcl/policies/curriculum/hard_to_easy.hpp"
#include "lwcl/policies/curriculum/ramp.hpp"
#include "lwcl/policies/curriculum/random.hpp"
#include "lwcl/policies/curriculum/student_inputs.hpp"
#include "lwcl/policies/curriculum/teacher_inputs.hpp"
#include "lwcl/policies/curriculum/two_stage.hpp"
#include "lwcl/policies/segmentation/growing.hpp"
#include "lwcl/policies/segmentation/uniform.hpp"

using namespace lwcl;
using policies::segment;
namespace cur = lwcl::policies::curriculum;

namespace {

using segments = std::vector<segment>;
using order = std::vector<index_t>;

model::model_config layers(index_t n) {
  return model::model_config::uniform(model::family::llama, 64, 32, 16, n, 2, 1, 32);
}

std::vector<index_t> sizes_of(const segments& s) {
  std::vector<index_t> out;
  for (const auto& x : s) out.push_back(x.size());
  return out;
}

}  // namespace

TEST_CASE("orders: front to back, easy to hard, hard to easy, ties in model order") {
  const std::vector<double> d{3, 1, 2, 1};
  CHECK(policies::visiting_order(cur::front_to_back{}, 4, {}) == order{0, 1, 2, 3});
  CHECK(policies::visiting_order(cur::front_to_back{}, 4, d) == order{0, 1, 2, 3});
  CHECK(policies::visiting_order(cur::easy_to_hard{}, 4, d) == order{1, 3, 2, 0});
  CHECK(policies::visiting_order(cur::hard_to_easy{}, 4, d) == order{0, 2, 1, 3});
  CHECK(policies::visiting_order(cur::easy_to_hard{}, 0, {}).empty());
  CHECK(cur::easy_to_hard::needs_difficulty);
  CHECK_FALSE(cur::front_to_back::needs_difficulty);
}

TEST_CASE("orders that need difficulties refuse missing, short or non-finite ones") {
  const std::vector<double> short_d{1, 2}, nan_d{1, NAN, 2};
  CHECK_THROWS_WITH_AS(policies::visiting_order(cur::easy_to_hard{}, 3, {}), doctest::Contains("one per segment (3)"),
                       error);
  CHECK_THROWS_WITH_AS(policies::visiting_order(cur::hard_to_easy{}, 3, short_d), doctest::Contains("got 2"), error);
  CHECK_THROWS_WITH_AS(policies::visiting_order(cur::easy_to_hard{}, 3, nan_d), doctest::Contains("segment 1"), error);
  // An order that ignores difficulties still refuses a list of the wrong length: it is a caller's bug.
  CHECK_THROWS_WITH_AS(policies::visiting_order(cur::front_to_back{}, 3, short_d), doctest::Contains("or none"), error);
}

TEST_CASE("random order: a permutation fixed by the seed, every permutation reachable") {
  const order a = policies::visiting_order(cur::random{.seed = 7}, 10, {});
  CHECK(a == policies::visiting_order(cur::random{.seed = 7}, 10, {}));
  CHECK(a != policies::visiting_order(cur::random{.seed = 8}, 10, {}));
  order sorted = a;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted == policies::visiting_order(cur::front_to_back{}, 10, {}));
  std::set<order> seen;
  for (std::uint64_t seed = 0; seed < 200; ++seed) seen.insert(cur::random{.seed = seed}.visiting_order(3, {}));
  CHECK(seen.size() == 6);
  CHECK(cur::random{}.visiting_order(1, {}) == order{0});
}

TEST_CASE("input schedules: teacher 0, student 1, ramp linear between start and end") {
  CHECK(cur::teacher_inputs{}.student_fraction(0) == 0.0);
  CHECK(cur::teacher_inputs{}.student_fraction(1000) == 0.0);
  CHECK(cur::student_inputs{}.student_fraction(0) == 1.0);
  const cur::ramp r{.start = 10, .end = 20};
  CHECK(r.student_fraction(0) == 0.0);
  CHECK(r.student_fraction(10) == 0.0);
  CHECK(r.student_fraction(11) == doctest::Approx(0.1));
  CHECK(r.student_fraction(15) == 0.5);
  CHECK(r.student_fraction(20) == 1.0);
  CHECK(r.student_fraction(500) == 1.0);
  const cur::ramp step{.start = 5, .end = 5};  // a switch at step 5
  CHECK(step.student_fraction(4) == 0.0);
  CHECK(step.student_fraction(5) == 1.0);
  CHECK(cur::ramp{}.student_fraction(0) == 1.0);  // start = end = 0: student inputs from the first step
  CHECK_THROWS_WITH_AS((cur::ramp{.start = 20, .end = 10}.student_fraction(0)), doctest::Contains("0 <= start <= end"),
                       error);
  CHECK_THROWS_WITH_AS((cur::ramp{.start = -1, .end = 10}.student_fraction(0)), doctest::Contains("0 <= start <= end"),
                       error);
  CHECK_FALSE(cur::teacher_inputs::uses_student_inputs);
  CHECK(cur::ramp::uses_student_inputs);
}

TEST_CASE("growth: as_segmented keeps the segmentation's stages, doubling merges pairs up to the whole model") {
  const auto one = policies::segmentation_stages(policies::segmentation::uniform<1>{}, layers(8));
  CHECK(cur::as_segmented{}.stages(one) == one);
  const auto grown = cur::doubling{}.stages(one);
  REQUIRE(grown.size() == 4);
  CHECK(sizes_of(grown[0]) == std::vector<index_t>(8, 1));
  CHECK(sizes_of(grown[1]) == std::vector<index_t>{2, 2, 2, 2});
  CHECK(grown[2] == segments{{0, 4}, {4, 8}});
  CHECK(grown[3] == segments{{0, 8}});
  // An odd segment count: the last segment waits a stage.
  const policies::segment_stages five{{{0, 1}, {1, 3}, {3, 4}, {4, 6}, {6, 7}}};
  CHECK(cur::doubling{}.stages(five) ==
        policies::segment_stages{five[0], {{0, 3}, {3, 6}, {6, 7}}, {{0, 6}, {6, 7}}, {{0, 7}}});
  CHECK(cur::doubling{}.stages({{{0, 5}}}) == policies::segment_stages{{{0, 5}}});
  // doubling starts from the first stage of a segmentation that already grows.
  const auto g = policies::segmentation_stages(policies::segmentation::growing{}, layers(4));
  CHECK(cur::doubling{}.stages(g) == g);
  CHECK_THROWS_AS(cur::doubling{}.stages({}), error);
  CHECK_THROWS_AS(cur::as_segmented{}.stages({}), error);
}

TEST_CASE("curriculum<Order, Inputs, Growth> makes one phase per growth stage and dispatches to its axes") {
  using full = cur::curriculum<cur::easy_to_hard, cur::ramp, cur::doubling>;
  CHECK(full::name == "curriculum<easy_to_hard,ramp,doubling>");
  const full c{.order = {}, .inputs = {.start = 0, .end = 100}, .growth = {.final_kd = true}};
  const auto stages = policies::segmentation_stages(policies::segmentation::uniform<1>{}, layers(4));
  const auto phases = policies::curriculum_phases(c, stages, 4);
  REQUIRE(phases.size() == 3);  // 1, 2, 4 layers per segment
  CHECK(phases[1].segments == segments{{0, 2}, {2, 4}});
  for (std::size_t i = 0; i < phases.size(); ++i) {
    CHECK(phases[i].index == i);
    CHECK(phases[i].student_inputs);
    CHECK(phases[i].needs_difficulty);
    CHECK(phases[i].order == "easy_to_hard");
    CHECK(phases[i].inputs == "ramp");
  }
  const std::vector<double> d{0.5, 0.1};
  CHECK(policies::visiting_order(c, phases[1], d) == order{1, 0});
  CHECK(policies::student_fraction(c, phases[0], 25) == 0.25);
  CHECK(c.has_final_kd());
  CHECK_THROWS_WITH_AS(policies::visiting_order(c, phases[1], {}), doctest::Contains("one per segment (2)"), error);

  // The defaults: front to back on student inputs, the segmentation's own stages, no final KD.
  const cur::curriculum<> plain;
  CHECK(cur::curriculum<>::name == "curriculum<front_to_back,student_inputs,as_segmented>");
  const auto p = policies::curriculum_phases(plain, stages, 4);
  REQUIRE(p.size() == 1);
  CHECK(p[0].segments == stages[0]);
  CHECK_FALSE(p[0].needs_difficulty);
  CHECK(policies::visiting_order(plain, p[0], {}) == order{0, 1, 2, 3});
  CHECK(policies::student_fraction(plain, p[0], 0) == 1.0);
  CHECK_FALSE(plain.has_final_kd());
}

TEST_CASE("two_stage: teacher inputs in any order, then front to back on student inputs, per stage") {
  const cur::two_stage<> c{};
  CHECK(cur::two_stage<>::name == "two_stage");
  const auto stages = policies::segmentation_stages(policies::segmentation::uniform<2>{}, layers(6));
  const auto phases = policies::curriculum_phases(c, stages, 6);
  REQUIRE(phases.size() == 2);
  CHECK(phases[0].segments == stages[0]);
  CHECK(phases[1].segments == stages[0]);
  CHECK_FALSE(phases[0].student_inputs);  // independent: may run in parallel
  CHECK(phases[1].student_inputs);
  CHECK(phases[0].inputs == "teacher_inputs");
  CHECK(phases[1].inputs == "student_inputs");
  CHECK(phases[1].order == "front_to_back");
  for (index_t step : {0, 10, 1000}) {
    CHECK(policies::student_fraction(c, phases[0], step) == 0.0);
    CHECK(policies::student_fraction(c, phases[1], step) == 1.0);
  }
  CHECK(policies::visiting_order(c, phases[1], {}) == order{0, 1, 2});
  CHECK_FALSE(c.has_final_kd());
  CHECK(cur::two_stage<>{.final_kd = true}.has_final_kd());

  // Stage 1's order is free; easy_to_hard there, and stage 2 stays front to back.
  const cur::two_stage<cur::easy_to_hard> e{};
  CHECK(cur::two_stage<cur::easy_to_hard>::name == "two_stage<easy_to_hard>");
  const auto pe = policies::curriculum_phases(e, stages, 6);
  CHECK(pe[0].needs_difficulty);
  CHECK_FALSE(pe[1].needs_difficulty);
  const std::vector<double> d{3, 1, 2};
  CHECK(policies::visiting_order(e, pe[0], d) == order{1, 2, 0});
  CHECK(policies::visiting_order(e, pe[1], d) == order{0, 1, 2});

  // A growing segmentation: both phases for every stage, finest first.
  const auto g = policies::segmentation_stages(policies::segmentation::growing{}, layers(4));
  const auto pg = policies::curriculum_phases(c, g, 4);
  REQUIRE(pg.size() == 6);
  CHECK(pg[4].segments == segments{{0, 4}});
  CHECK_FALSE(pg[4].student_inputs);
  CHECK(pg[5].student_inputs);
}

namespace {

// A curriculum whose output breaks the rules, to show the checked calls catch it.
struct broken_curriculum {
  static constexpr std::string_view name = "broken";
  std::vector<policies::curriculum_phase> phases(const policies::segment_stages& s) const {
    policies::curriculum_phase p;
    p.index = 1;
    p.segments = s.front();
    return {p};
  }
  std::vector<index_t> visiting_order(const policies::curriculum_phase&, std::span<const double>) const {
    return {0, 0};
  }
  double student_fraction(const policies::curriculum_phase&, index_t) const { return 1.5; }
  bool has_final_kd() const { return false; }
};
static_assert(policies::curriculum_policy<broken_curriculum>);

}  // namespace

TEST_CASE("checked curriculum calls refuse bad phases, orders and shares") {
  const broken_curriculum b;
  const policies::segment_stages s{{{0, 1}, {1, 2}}};
  CHECK_THROWS_WITH_AS(policies::curriculum_phases(b, s, 2), doctest::Contains("carries index 1, expected 0"), error);
  policies::curriculum_phase p;
  p.segments = s[0];
  CHECK_THROWS_WITH_AS(policies::visiting_order(b, p, {}), doctest::Contains("segment 0 twice"), error);
  CHECK_THROWS_WITH_AS(policies::student_fraction(b, p, 0), doctest::Contains("expected a value in [0, 1]"), error);
  CHECK_THROWS_WITH_AS(policies::student_fraction(cur::two_stage<>{}, p, -1), doctest::Contains("step -1"), error);
  CHECK_THROWS_WITH_AS(policies::check_permutation({0, 2}, 2, "t"), doctest::Contains("outside [0, 2)"), error);
  CHECK_THROWS_WITH_AS(policies::check_permutation({0}, 2, "t"), doctest::Contains("1 entries"), error);
}

// Concept conformance, and kinds that must not be mistaken for each other.
static_assert(policies::order_policy<cur::front_to_back> && policies::order_policy<cur::easy_to_hard> &&
              policies::order_policy<cur::hard_to_easy> && policies::order_policy<cur::random>);
static_assert(policies::input_schedule<cur::teacher_inputs> && policies::input_schedule<cur::ramp> &&
              policies::input_schedule<cur::student_inputs>);
static_assert(policies::growth_policy<cur::as_segmented> && policies::growth_policy<cur::doubling>);
static_assert(policies::curriculum_policy<cur::two_stage<>> &&
              policies::curriculum_policy<cur::two_stage<cur::random>>);
static_assert(policies::curriculum_policy<cur::curriculum<cur::random, cur::teacher_inputs, cur::doubling>>);
static_assert(!policies::curriculum_policy<cur::easy_to_hard> && !policies::order_policy<cur::ramp>);
static_assert(!policies::segmentation_policy<cur::two_stage<>> &&
              !policies::curriculum_policy<policies::segmentation::growing>);
