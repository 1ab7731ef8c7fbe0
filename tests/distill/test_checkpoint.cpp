// The pipeline's checkpoint state and its reports in JSON: what is written is what is read back (a
// visit without a measured difficulty as null and NaN again), and a checkpoint refuses a student of
// another size or a run with other settings, naming what differs.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <ostream>
#include <limits>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/core/error.hpp"
#include "lwcl/core/fs.hpp"
#include "lwcl/distill/pipeline/checkpoint.hpp"
#include "lwcl/distill/pipeline/result.hpp"

namespace fs = std::filesystem;
using namespace lwcl;
using namespace lwcl::distill;

namespace {

visit_report some_visit(double difficulty) {
  visit_report v;
  v.phase = 1;
  v.position = 2;
  v.segment = 3;
  v.first = 3;
  v.last = 5;
  v.order = "easy_to_hard";
  v.inputs = "ramp";
  v.difficulty = difficulty;
  v.planned_steps = 40;
  v.steps = 37;
  v.loss_first = 0.75;
  v.loss_last = 0.125;
  v.student_fraction_first = 0.25;
  v.student_fraction_last = 1;
  v.seconds = 1.5;
  v.stall_seconds = 0.0625;
  v.compute_bytes = 123456789012ull;
  v.staging_bytes = 4096;
  v.tracker_bytes = 8192;
  return v;
}

void check_same(const visit_report& a, const visit_report& b) {
  CHECK(a.phase == b.phase);
  CHECK(a.position == b.position);
  CHECK(a.segment == b.segment);
  CHECK(a.first == b.first);
  CHECK(a.last == b.last);
  CHECK(a.order == b.order);
  CHECK(a.inputs == b.inputs);
  CHECK((a.difficulty == b.difficulty || (std::isnan(a.difficulty) && std::isnan(b.difficulty))));
  CHECK(a.planned_steps == b.planned_steps);
  CHECK(a.steps == b.steps);
  CHECK(a.loss_first == b.loss_first);
  CHECK(a.loss_last == b.loss_last);
  CHECK(a.student_fraction_first == b.student_fraction_first);
  CHECK(a.student_fraction_last == b.student_fraction_last);
  CHECK(a.seconds == b.seconds);
  CHECK(a.stall_seconds == b.stall_seconds);
  CHECK(a.compute_bytes == b.compute_bytes);
  CHECK(a.staging_bytes == b.staging_bytes);
  CHECK(a.tracker_bytes == b.tracker_bytes);
}

}  // namespace

TEST_CASE("visit_report: JSON text and back, an unmeasured difficulty as null") {
  for (const double d : {0.3125, std::numeric_limits<double>::quiet_NaN()}) {
    const auto v = some_visit(d);
    const auto text = v.to_json().dump();
    const auto j = nlohmann::json::parse(text);
    CHECK(j.size() == 19);
    CHECK(j.at("difficulty").is_null() == std::isnan(d));
    CHECK(j.at("order") == "easy_to_hard");
    check_same(v, visit_report::from_json(j));
  }
}

TEST_CASE("pipeline_result: report.json holds the totals and the figures that follow") {
  pipeline_result r;
  r.visits = {some_visit(0.5), some_visit(std::numeric_limits<double>::quiet_NaN())};
  r.segment_steps = 74;
  r.kd_steps = 6;
  r.tokens = 80 * 512;
  r.step_seconds = 8;
  r.stall_seconds = 2;
  r.seconds = 10;
  r.teacher_loaded = true;
  r.total = {budget_unit::steps, 80};
  const auto j = nlohmann::json::parse(r.to_json().dump());
  CHECK(j.at("visits").size() == 2);
  CHECK(j.at("visits").at(1).at("difficulty").is_null());
  CHECK(j.at("segment_steps") == 74);
  CHECK(j.at("kd_steps") == 6);
  CHECK(j.at("stall_fraction").get<double>() == 0.25);
  CHECK(j.at("tokens_per_second").get<double>() == doctest::Approx(4096.0));
  CHECK(j.at("budget") == nlohmann::json({{"unit", "steps"}, {"amount", 80.0}}));
  CHECK(j.at("teacher_loaded") == true);
  CHECK(j.at("budget_exhausted") == false);
}

TEST_CASE("the fuzz seeds' checkpoint state (tests/data) has every field write_checkpoint writes") {
  const auto j = nlohmann::json::parse(read_text(std::string(LWCL_TEST_DATA_DIR) + "/pipeline_checkpoint_state.json"));
  const auto s = j.get<checkpoint_state>();
  CHECK(s.totals.visits.size() == 2);
  CHECK(s.totals.curve.size() == 1);
  CHECK(s.student_parameters == 123648);
  CHECK(nlohmann::json(s).dump() == j.dump());  // nothing missing, nothing extra
}

TEST_CASE("checkpoint_state: written and read back whole; a checkpoint of another student or run is refused") {
  const fs::path dir = fs::temp_directory_path() / "lwcl_test_checkpoint_state";
  fs::remove_all(dir);
  fs::create_directories(dir);

  checkpoint_state c;
  c.metrics_records = 91;
  c.phase = 1;
  c.position = 3;
  c.visit_step = 17;
  c.order = {3, 2, 1, 0};
  c.difficulty = {0.5, 0.25, 2, 1};
  c.kd_done = false;
  c.partial = some_visit(0.25).to_json();
  c.totals.visits = {some_visit(std::numeric_limits<double>::quiet_NaN())};
  c.totals.segment_steps = 57;
  c.totals.tokens = 57 * 256;
  c.totals.refresh_seconds = 0.375;
  c.totals.peak_compute_bytes = 31000000;
  c.totals.budget_exhausted = true;
  c.seconds = 12.5;
  c.peak_staging_bytes = 98304;
  c.student_parameters = 5;
  c.fingerprint = {{"budget", "80 steps"}, {"lr", 0.002}};
  c.segmentation_inputs = {{"layer_difficulty", {1.0, 2.0}}};
  c.feature_versions = {{"layer_version", {1, 2, 0}}, {"version_counter", 2}};
  const std::vector<double> params = {1.0, -2.5, 3.25, 1e-300, -0.0};
  const struct no_segment {
    void save_state(std::ostream&) const {}
  }* none = nullptr;
  write_checkpoint(dir, c, params, none);
  CHECK(fs::exists(dir / "student.bin"));
  CHECK_FALSE(fs::exists(dir / "segment.bin"));

  std::vector<double> back(5, 0.0);
  const auto r = read_checkpoint(dir, back, c.fingerprint);
  CHECK(std::memcmp(back.data(), params.data(), sizeof(double) * 5) == 0);
  CHECK(r.metrics_records == 91);
  CHECK(r.phase == 1);
  CHECK(r.position == 3);
  CHECK(r.visit_step == 17);
  CHECK(r.order == c.order);
  CHECK(r.difficulty == c.difficulty);
  CHECK(r.kd_done == false);
  check_same(visit_report::from_json(r.partial), some_visit(0.25));
  REQUIRE(r.totals.visits.size() == 1);
  check_same(r.totals.visits[0], c.totals.visits[0]);
  CHECK(r.totals.segment_steps == 57);
  CHECK(r.totals.tokens == 57 * 256);
  CHECK(r.totals.refresh_seconds == 0.375);
  CHECK(r.totals.peak_compute_bytes == 31000000);
  CHECK(r.totals.budget_exhausted == true);
  CHECK(r.totals.teacher_loaded == false);
  CHECK(r.seconds == 12.5);
  CHECK(r.peak_staging_bytes == 98304);
  CHECK(r.segmentation_inputs == c.segmentation_inputs);
  CHECK(r.feature_versions == c.feature_versions);

  std::vector<double> six(6, 0.0);
  CHECK_THROWS_WITH_AS(read_checkpoint(dir, six, c.fingerprint),
                       doctest::Contains("holds 5 student parameters, this student has 6"), lwcl::error);
  CHECK_THROWS_WITH_AS(read_checkpoint(dir, back, {{"budget", "90 steps"}}),
                       doctest::Contains("was made with budget = \"80 steps\", this run has \"90 steps\""), lwcl::error);
  CHECK_THROWS_WITH_AS(read_checkpoint(dir, back, {{"seed", 7}}),
                       doctest::Contains("was made with seed = (none), this run has 7"), lwcl::error);
  fs::resize_file(dir / "student.bin", 16);
  CHECK_THROWS_WITH_AS(read_checkpoint(dir, back, c.fingerprint), doctest::Contains("is shorter than the student's"),
                       lwcl::error);
  // Damaged files are errors naming them: a student.bin too long or holding a NaN, a state.json that is
  // not JSON or not of the checkpoint's shape.
  write_checkpoint(dir, c, params, none);
  fs::resize_file(dir / "student.bin", 48);
  CHECK_THROWS_WITH_AS(read_checkpoint(dir, back, c.fingerprint),
                       doctest::Contains("student.bin' is longer than the student's 5 parameters"), lwcl::error);
  std::vector<double> poisoned = params;
  poisoned[2] = std::numeric_limits<double>::quiet_NaN();
  write_checkpoint(dir, c, poisoned, none);
  CHECK_THROWS_WITH_AS(read_checkpoint(dir, back, c.fingerprint),
                       doctest::Contains("holds nan at parameter 2; the checkpoint is damaged"), lwcl::error);
  // A float where an integer belongs (nlohmann would cast it, undefined out of range).
  write_text_atomic(dir / "state.json", R"({"metrics_records": 1e300})");
  CHECK_THROWS_WITH_AS(read_checkpoint(dir, back, c.fingerprint), doctest::Contains("metrics_records is 1e+300, expected an integer"),
                       lwcl::error);
  auto j = nlohmann::json(c);
  j["totals"]["visits"][0]["steps"] = -2.5;
  write_text_atomic(dir / "state.json", j.dump());
  CHECK_THROWS_WITH_AS(read_checkpoint(dir, back, c.fingerprint),
                       doctest::Contains("totals.visits[0].steps is -2.5, expected an integer"), lwcl::error);
  write_checkpoint(dir, c, params, none);
  for (const char* bad : {"{\"phase\": \"one\"}", "{not json", "[]", ""}) {
    CAPTURE(bad);
    write_text_atomic(dir / "state.json", bad);
    CHECK_THROWS_WITH_AS(read_checkpoint(dir, back, c.fingerprint), doctest::Contains("state.json' is not a checkpoint state"),
                         lwcl::error);
  }
  fs::remove_all(dir);
}
