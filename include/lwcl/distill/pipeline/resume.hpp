#pragma once
// Where a layer-wise run starts and how it leaves a point to resume from. start_or_resume opens the run
// at its latest checkpoint (resume) or afresh; save_checkpoint writes one after every visit, every
// checkpoint_every steps within a visit, and after the final KD stage. A run killed at any moment resumes
// bitwise under step and token budgets: the student, the visit's segment and optimiser (and the
// segments' kept optimiser states), the feature versions, the totals, the measured segmentation inputs
// and metrics.jsonl all come back as they were.

#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/core/metrics.hpp"
#include "lwcl/distill/pipeline/checkpoint.hpp"
#include "lwcl/distill/pipeline/result.hpp"
#include "lwcl/distill/pipeline/run_state.hpp"

namespace lwcl::distill {

// The run's place in its curriculum, as a checkpoint records it: the next step is step `visit_step` of
// visit `position` of phase `phase`, in that phase's `order` (with its measured `difficulty`).
struct run_position {
  std::size_t phase = 0;
  index_t position = 0;
  long visit_step = 0;
  std::vector<index_t> order;
  std::vector<double> difficulty;
  bool kd_done = false;  // the final KD stage has run
};

// A checkpoint of the run at `at`: with `seg` (mid-visit) the segment's parameters and optimiser and
// `partial`, the visit's report so far.
template <class Backend, class CachePolicy, class Loss>
void save_checkpoint(run_state<Backend, CachePolicy, Loss>& s, const run_position& at,
                     const typename run_state<Backend, CachePolicy, Loss>::segment_type* seg = nullptr,
                     const visit_report& partial = {}) {
  checkpoint_state c;
  c.metrics_records = s.metrics.records();
  c.phase = at.phase;
  c.position = at.position;
  c.visit_step = at.visit_step;
  c.order = at.order;
  c.difficulty = at.difficulty;
  c.kd_done = at.kd_done;
  if (seg) c.partial = partial.to_json();
  c.totals = s.res;
  c.totals.cpu_seconds = s.cpu_now();
  c.seconds = s.elapsed();
  c.peak_staging_bytes = s.peaks.staging;
  c.student_parameters = s.st.params.size();
  c.fingerprint = s.fingerprint;
  c.segmentation_inputs = nlohmann::json::object();
  if (!s.measured.layer_difficulty.empty()) c.segmentation_inputs["layer_difficulty"] = s.measured.layer_difficulty;
  s.sf->save_versions(c.feature_versions);
  const auto name = checkpoint_name(s.res.segment_steps, at.phase, at.position);
  const auto dir = s.checkpoints.start(name);
  write_checkpoint(dir, c, s.st.params, seg);
  if (s.opt.keep_optimizer_state) s.kept.save(dir / "optimizers.bin");
  s.checkpoints.commit(name);  // `latest`, written last; the newest two checkpoints remain
}

// Opens the run where it starts. Resuming (opt.resume, with a checkpoint): the student, totals, feature
// versions and measured segmentation inputs as the latest checkpoint left them, metrics.jsonl cut to its
// records, and the position to go on from. Otherwise the beginning: checkpoints and whatever an earlier
// run left in a directory-backed cache are dropped, and nullopt.
template <class Backend, class CachePolicy, class Loss>
std::optional<run_position> start_or_resume(run_state<Backend, CachePolicy, Loss>& s) {
  const auto metrics_path = s.run_dir / "metrics.jsonl";
  std::optional<run_position> at;
  if (s.opt.resume && s.checkpoints.latest()) {
    const auto dir = *s.checkpoints.latest();
    const checkpoint_state c = read_checkpoint(dir, s.st.params, s.fingerprint);
    static_cast<run_totals&>(s.res) = c.totals;
    s.clock.cpu_before = c.totals.cpu_seconds;
    s.clock.wall_before = c.seconds;
    s.sf->restore_versions(c.feature_versions);
    s.partial = c.partial;
    s.peaks.staging = c.peak_staging_bytes;
    s.resumed_from = dir;
    if (s.opt.keep_optimizer_state) s.kept.load(dir / "optimizers.bin");
    if (c.segmentation_inputs.contains("layer_difficulty"))
      s.measured.layer_difficulty = c.segmentation_inputs.at("layer_difficulty").get<std::vector<double>>();
    at = run_position{c.phase, c.position, c.visit_step, c.order, c.difficulty, c.kd_done};
    s.res.resumed = true;
    truncate_metrics_records(metrics_path, c.metrics_records);
  } else {
    s.checkpoints.forget();
    for (const auto& k : s.cache->keys()) s.cache->erase(k);
    truncate_metrics(metrics_path, "global_step", 0);
  }
  s.metrics.open(metrics_path.string(), at.has_value());
  return at;
}

}  // namespace lwcl::distill
