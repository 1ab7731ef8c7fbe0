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
#include "lwcl/distill/curve.hpp"
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
  bool exact = false;              // ended after its first step: exactly 0 loss on the teacher's inputs

  nlohmann::json to_json() const;
  static visit_report from_json(const nlohmann::json& j);
};

namespace result_detail {

// visit_report's JSON form through nlohmann's type macro, on a copy whose difficulty an unmeasured
// visit (NaN) writes as null and reads back from null.
struct visit_fields : visit_report {};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(visit_fields, phase, position, segment, first, last, order, inputs, difficulty,
                                   planned_steps, steps, loss_first, loss_last, student_fraction_first,
                                   student_fraction_last, seconds, stall_seconds, compute_bytes, staging_bytes,
                                   tracker_bytes)

}  // namespace result_detail

inline nlohmann::json visit_report::to_json() const {
  nlohmann::json j = result_detail::visit_fields{*this};
  if (!std::isfinite(difficulty)) j["difficulty"] = nullptr;
  if (exact) j["exact"] = true;  // written only when set, so earlier reports and checkpoints read back alike
  return j;
}

inline visit_report visit_report::from_json(const nlohmann::json& j) {
  auto k = j;
  if (k.contains("difficulty") && k.at("difficulty").is_null()) k["difficulty"] = std::numeric_limits<double>::quiet_NaN();
  visit_report v = k.get<result_detail::visit_fields>();
  v.exact = k.value("exact", false);
  return v;
}

inline void to_json(nlohmann::json& j, const visit_report& v) { j = v.to_json(); }
inline void from_json(const nlohmann::json& j, visit_report& v) { v = visit_report::from_json(j); }

}  // namespace lwcl::distill

namespace lwcl::cache {
// A cache's figures as report.json gives them: the store's usage, its compression ratio and hit rate.
inline void to_json(nlohmann::json& j, const cache_stats& c) {
  j = {{"store", std::string(c.store.store)},
       {"tier", std::string(tier_name(c.store.memory_tier))},
       {"records", c.store.records},
       {"stored_bytes", c.store.stored_bytes},
       {"peak_stored_bytes", c.store.peak_stored_bytes},
       {"raw_bytes", c.store.raw_bytes},
       {"compression_ratio", c.compression_ratio()},
       {"hits", c.hits},
       {"misses", c.misses},
       {"hit_rate", c.hit_rate()},
       {"bytes_read", c.bytes_read}};
}
}  // namespace lwcl::cache

namespace lwcl::distill {

// What a run has done so far: the totals a checkpoint carries and a resumed run continues from.
struct run_totals {
  std::vector<visit_report> visits;
  long segment_steps = 0, kd_steps = 0;
  long tokens = 0;  // (segment steps + KD steps) x batch tokens
  double teacher_pass_seconds = 0, kd_seconds = 0, refresh_seconds = 0;
  double step_seconds = 0, stall_seconds = 0;  // inside visits; stall is time waiting for the prefetcher
  std::size_t peak_compute_bytes = 0;          // the largest visit's declared compute bytes
  std::size_t kd_peak_compute_bytes = 0;       // the final KD stage's (teacher and student resident), 0 without it
  bool teacher_loaded = false, budget_exhausted = false;
  // Model FLOPs of the work done (evaluation left out), forward counted once and a step's forward and
  // backward as three forwards, prune::layer_flops_per_token at the batch's sequence length: the teacher
  // pass (the teacher's blocks below the last boundary, per cached batch computed), difficulty
  // measurements (a forward of each measured segment), refreshes (the student's blocks between the
  // boundaries, per cached batch), segment steps (the segment's blocks, three forwards) and the final KD
  // stage (e2e_result::flops). cpu_seconds: the process's processor seconds over the run.
  double flops = 0, cpu_seconds = 0;
  // With pipeline_options::probe: the quality curve (before the first visit, after every visit, every
  // eval_every final KD steps and at the end), and the wall seconds its evaluations took, which no
  // other figure (seconds, cpu_seconds, the budget) counts.
  std::vector<curve_point> curve;
  double eval_seconds = 0;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(run_totals, visits, segment_steps, kd_steps, tokens, teacher_pass_seconds, kd_seconds,
                                   refresh_seconds, step_seconds, stall_seconds, peak_compute_bytes, kd_peak_compute_bytes,
                                   teacher_loaded, budget_exhausted, flops, cpu_seconds, curve, eval_seconds)

// The whole run (report.json): its totals, and what it was, where it ended, what it held.
struct pipeline_result : run_totals {
  std::map<std::string, std::string> policies;
  std::size_t phases = 0;
  budget total;
  double seconds = 0;                // wall clock of the whole run (all processes, for a resumed one; evaluations excluded)
  std::size_t peak_cache_bytes = 0;  // the store's peak stored bytes plus the largest prefetch ring
  std::map<std::string, std::size_t> tracker_peak_bytes;  // memory tracker peak per tier during the run
  // In this process's part of the run, from the memory tracker: the compute peak in the backend's tier
  // over the whole run (teacher pass, visits, final KD; the cache and staging left out), and the total
  // with the cache counted (on the host backend the tier's whole peak; on a device backend the compute
  // peak plus peak_cache_bytes, which live in another memory); both less what the tracker held when the
  // run began (the caller's models), as end-to-end KD counts. peak_resident_bytes: the process's peak
  // resident set over the run (Linux VmHWM, restarted when the run began; 0: not measured).
  std::size_t run_peak_compute_bytes = 0, run_peak_total_bytes = 0, peak_resident_bytes = 0;
  cache::cache_stats cache;
  bool resumed = false;
  // With pipeline_options::validation_ids: perplexity after recovery (with its protocol), and the
  // per-layer relative error against the teacher before and after.
  double val_ppl = 0;
  std::string val_protocol;
  std::vector<double> cumulative_error_before, cumulative_error;

  // The totals, plus the rest and the figures that follow from them.
  nlohmann::json to_json() const {
    nlohmann::json j = static_cast<const run_totals&>(*this);
    j.update({{"policies", policies},
              {"budget", total},
              {"phases", phases},
              {"seconds", seconds},
              {"stall_fraction", step_seconds > 0 ? stall_seconds / step_seconds : 0.0},
              {"tokens_per_second", seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0},
              {"peak_cache_bytes", peak_cache_bytes},
              {"tracker_peak_bytes", tracker_peak_bytes},
              {"run_peak_compute_bytes", run_peak_compute_bytes},
              {"run_peak_total_bytes", run_peak_total_bytes},
              {"peak_resident_bytes", peak_resident_bytes},
              {"cache", cache},
              {"resumed", resumed},
              {"val_ppl", val_ppl},
              {"val_protocol", val_protocol},
              {"cumulative_error_before", cumulative_error_before},
              {"cumulative_error", cumulative_error}});
    return j;
  }
};

}  // namespace lwcl::distill
