#pragma once
// What a layer-wise recovery reports: one visit_report per segment trained, and the pipeline_result of
// the whole run (report.json), each with its JSON form; visit reports also travel in checkpoints.

#include <cmath>
#include <cstddef>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/cache/feature_cache.hpp"
#include "lwcl/core/config.hpp"
#include "lwcl/core/memory.hpp"
#include "lwcl/distill/pipeline/budget.hpp"

namespace lwcl::distill {

// One segment trained once within a phase.
struct visit_report {
  std::size_t phase = 0;
  index_t position = 0;         // in the phase's visiting order
  index_t segment = 0;          // index in the phase's segmentation
  index_t first = 0, last = 0;  // student layers [first, last)
  std::string order, inputs;    // the phase's policies
  double difficulty = std::numeric_limits<double>::quiet_NaN();  // initial local loss, where measured
  long planned_steps = 0, steps = 0;
  double loss_first = 0, loss_last = 0;
  double student_fraction_first = 0, student_fraction_last = 0;
  double seconds = 0, stall_seconds = 0;
  std::size_t compute_bytes = 0;   // declared: the segment's memory_use() plus its three input tensors
  std::size_t staging_bytes = 0;   // the prefetch ring
  std::size_t tracker_bytes = 0;   // the memory tracker's peak above the visit's start, backend tier

  nlohmann::json to_json() const {
    return {{"phase", phase},
            {"position", position},
            {"segment", segment},
            {"first", first},
            {"last", last},
            {"order", order},
            {"inputs", inputs},
            {"difficulty", std::isfinite(difficulty) ? nlohmann::json(difficulty) : nlohmann::json()},
            {"planned_steps", planned_steps},
            {"steps", steps},
            {"loss_first", loss_first},
            {"loss_last", loss_last},
            {"student_fraction_first", student_fraction_first},
            {"student_fraction_last", student_fraction_last},
            {"seconds", seconds},
            {"stall_seconds", stall_seconds},
            {"compute_bytes", compute_bytes},
            {"staging_bytes", staging_bytes},
            {"tracker_bytes", tracker_bytes}};
  }
  static visit_report from_json(const nlohmann::json& j) {
    visit_report v;
    v.phase = j.at("phase");
    v.position = j.at("position");
    v.segment = j.at("segment");
    v.first = j.at("first");
    v.last = j.at("last");
    v.order = j.at("order");
    v.inputs = j.at("inputs");
    if (!j.at("difficulty").is_null()) v.difficulty = j.at("difficulty");
    v.planned_steps = j.at("planned_steps");
    v.steps = j.at("steps");
    v.loss_first = j.at("loss_first");
    v.loss_last = j.at("loss_last");
    v.student_fraction_first = j.at("student_fraction_first");
    v.student_fraction_last = j.at("student_fraction_last");
    v.seconds = j.at("seconds");
    v.stall_seconds = j.at("stall_seconds");
    v.compute_bytes = j.at("compute_bytes");
    v.staging_bytes = j.at("staging_bytes");
    v.tracker_bytes = j.at("tracker_bytes");
    return v;
  }
};

struct pipeline_result {
  std::map<std::string, std::string> policies;
  std::vector<visit_report> visits;
  std::size_t phases = 0;
  budget total;
  long segment_steps = 0, kd_steps = 0;
  long tokens = 0;                   // (segment steps + KD steps) x batch tokens
  double seconds = 0;                // wall clock of the whole run (all processes, for a resumed one)
  double teacher_pass_seconds = 0, kd_seconds = 0, refresh_seconds = 0;
  double step_seconds = 0, stall_seconds = 0;  // inside visits; stall is time waiting for the prefetcher
  std::size_t peak_compute_bytes = 0;     // the largest visit's declared compute bytes
  std::size_t kd_peak_compute_bytes = 0;  // the final KD stage's (teacher and student resident), 0 without it
  std::size_t peak_cache_bytes = 0;       // the store's peak stored bytes plus the largest prefetch ring
  std::map<std::string, std::size_t> tracker_peak_bytes;  // memory tracker peak per tier during the run
  cache::cache_stats cache;
  bool resumed = false, teacher_loaded = false, budget_exhausted = false;
  // With pipeline_options::validation_ids: perplexity after recovery (with its protocol), and the
  // per-layer relative error against the teacher before and after.
  double val_ppl = 0;
  std::string val_protocol;
  std::vector<double> cumulative_error_before, cumulative_error;

  nlohmann::json to_json() const {
    nlohmann::json v = nlohmann::json::array();
    for (const auto& r : visits) v.push_back(r.to_json());
    return {{"policies", policies},
            {"budget", {{"unit", budget_unit_name(total.unit)}, {"amount", total.amount}}},
            {"phases", phases},
            {"visits", v},
            {"segment_steps", segment_steps},
            {"kd_steps", kd_steps},
            {"tokens", tokens},
            {"seconds", seconds},
            {"teacher_pass_seconds", teacher_pass_seconds},
            {"refresh_seconds", refresh_seconds},
            {"kd_seconds", kd_seconds},
            {"step_seconds", step_seconds},
            {"stall_seconds", stall_seconds},
            {"stall_fraction", step_seconds > 0 ? stall_seconds / step_seconds : 0.0},
            {"tokens_per_second", seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0},
            {"peak_compute_bytes", peak_compute_bytes},
            {"kd_peak_compute_bytes", kd_peak_compute_bytes},
            {"peak_cache_bytes", peak_cache_bytes},
            {"tracker_peak_bytes", tracker_peak_bytes},
            {"cache",
             {{"store", std::string(cache.store.store)},
              {"tier", std::string(tier_name(cache.store.memory_tier))},
              {"records", cache.store.records},
              {"stored_bytes", cache.store.stored_bytes},
              {"peak_stored_bytes", cache.store.peak_stored_bytes},
              {"raw_bytes", cache.store.raw_bytes},
              {"compression_ratio", cache.compression_ratio()},
              {"hits", cache.hits},
              {"misses", cache.misses},
              {"hit_rate", cache.hit_rate()},
              {"bytes_read", cache.bytes_read}}},
            {"resumed", resumed},
            {"teacher_loaded", teacher_loaded},
            {"budget_exhausted", budget_exhausted},
            {"val_ppl", val_ppl},
            {"val_protocol", val_protocol},
            {"cumulative_error_before", cumulative_error_before},
            {"cumulative_error", cumulative_error}};
  }
};

}  // namespace lwcl::distill
