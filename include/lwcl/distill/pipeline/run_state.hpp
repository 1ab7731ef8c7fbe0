#pragma once
// run_state: what one layer-wise run holds while it runs. pipeline_run::execute makes it, passes it down
// to the parts of the run (teacher_pass.hpp, resume.hpp, final_kd.hpp and the visits in run.hpp), and it
// is gone when the run returns, so nothing carries over from one run to the next. In it: what the run was
// given, the feature cache and the student's features, the segmentation inputs it measured, the plan,
// the result so far, metrics and progress, the clocks and the memory peaks. Beside it, the small steps
// every part takes: a quality probe, a feature refresh, a memory sample.

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/cache/feature_cache.hpp"
#include "lwcl/core/checkpoint_dir.hpp"
#include "lwcl/core/memory.hpp"
#include "lwcl/core/metrics.hpp"
#include "lwcl/core/process_memory.hpp"
#include "lwcl/core/progress.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/data/loader.hpp"
#include "lwcl/distill/curve.hpp"
#include "lwcl/distill/pipeline/budget.hpp"
#include "lwcl/distill/pipeline/feature_feed.hpp"
#include "lwcl/distill/pipeline/kept_optimizer.hpp"
#include "lwcl/distill/pipeline/options.hpp"
#include "lwcl/distill/pipeline/result.hpp"
#include "lwcl/distill/pipeline/schedule.hpp"
#include "lwcl/distill/pipeline/student_features.hpp"
#include "lwcl/distill/segment_trainer.hpp"
#include "lwcl/distill/student_state.hpp"
#include "lwcl/model/weights.hpp"
#include "lwcl/policies/concepts.hpp"
#include "lwcl/prune/plan.hpp"

namespace lwcl::distill {

// Loads (or builds) the teacher, a decoder (model::transformer) or an encoder (model::encoder); called
// for the teacher pass and the final KD stage only, and the model is released after each, so it is never
// resident while segments train.
template <class Backend>
using teacher_loader = std::function<std::unique_ptr<model::weights<Backend>>()>;

namespace pipeline_detail {

// Where the prefetcher stages features: the cache policy's `staging` memory when it names one (pinned
// host memory under CUDA, so copies to the device are asynchronous), else the heap.
template <class P>
struct staging_of {
  using type = cache::heap_memory;
};
template <policies::stages_in_own_memory P>
struct staging_of<P> {
  using type = typename P::staging;
};

}  // namespace pipeline_detail

// Wall-clock and processor seconds of a run over all its processes (a resumed run adds what the
// interrupted ones spent), the quality probe's evaluations excluded.
struct run_clock {
  timer wall;
  cpu_timer cpu;
  double wall_before = 0, cpu_before = 0;  // the processes before a resumption
  double eval_wall = 0, eval_cpu = 0;      // this process's evaluations
  double elapsed() const { return wall_before + wall.seconds() - eval_wall; }
  double cpu_now() const { return cpu_before + cpu.seconds() - eval_cpu; }
};

// The memory tracker's peaks over a run. The parts of a run that reset the tracker's peaks fold them in
// here first.
template <class Backend>
struct run_peaks {
  std::map<int, std::size_t> by_tier;
  std::size_t compute = 0;  // the compute tier, the cache and staging it holds excluded
  std::size_t staging = 0;  // the prefetcher's staging ring
  void fold() {
    for (int t = 0; t < tier_count; ++t) by_tier[t] = std::max(by_tier[t], memory().peak(static_cast<tier>(t)));
    compute = std::max(compute, memory().peak_compute(Backend::memory_tier));
  }
};

template <class Backend, class CachePolicy, class Loss>
struct run_state {
  using backend_type = Backend;
  using store_type = typename CachePolicy::store;
  using staging_type = typename pipeline_detail::staging_of<CachePolicy>::type;
  using feed_type = feature_feed<Backend, store_type, staging_type>;
  using segment_type = segment_trainer<Backend, Loss>;

  run_state(Backend& backend, const pipeline_options& options, student_state& student,
            const std::vector<index_t>& boundaries, const data::batch_loader& batches, std::filesystem::path dir)
      : be(backend), opt(options), st(student), tlo(boundaries), loader(batches), B(batches.batch_size()),
        T(batches.seq_len()), run_dir(std::move(dir)), checkpoints(run_dir / "checkpoints", "ck_", 2) {}

  // What the run was given.
  Backend& be;
  const pipeline_options& opt;
  student_state& st;              // recovered in place
  const std::vector<index_t>& tlo;  // the layer map: student boundary i reads teacher boundary tlo[i]
  const data::batch_loader& loader;
  index_t B, T;
  std::filesystem::path run_dir;

  // What it holds.
  checkpoint_dir checkpoints;
  std::unique_ptr<cache::feature_cache<store_type>> cache;
  std::optional<student_features<Backend, store_type>> sf;
  metrics_writer metrics;
  std::unique_ptr<progress> bar;
  kept_optimizer kept;  // the segments' optimiser states between their visits (opt.keep_optimizer_state)

  // What it measured and planned.
  segmentation_inputs measured;
  std::vector<policies::curriculum_phase> phases;
  budget_plan plan;
  bool layerwise_spent = false;  // a seconds budget's layer-wise share is used up
  double teacher_pass_flops = 0;  // what this process's teacher pass computed (0: the cache held every batch)
  // What the tracker held before the run began (the caller's models): left out of the run's peaks, as
  // end-to-end KD leaves out what it did not allocate, so that both count what the method itself holds.
  std::size_t held_compute = 0;
  std::map<int, std::size_t> held_by_tier;

  // What it has done.
  pipeline_result res;
  nlohmann::json partial;      // the report of the visit under way, as a resumed checkpoint left it
  nlohmann::json fingerprint;  // what a checkpoint must match to be resumed
  std::optional<std::filesystem::path> resumed_from;
  long steps_this_process = 0;
  run_clock clock;
  run_peaks<Backend> peaks;

  double elapsed() const { return clock.elapsed(); }
  double cpu_now() const { return clock.cpu_now(); }
  // Whether a visit queues the next step's feature copies ahead (unset: on device backends only).
  bool upload_ahead() const { return opt.upload_ahead.value_or(Backend::is_device); }
  bool seconds_budget() const { return opt.total.unit == budget_unit::seconds; }
};

// A point of the quality curve for the student as it stands (with a probe), its evaluation's time
// taken out of the run's clocks.
template <class State>
void probe_quality(State& s) {
  if (!s.opt.probe) return;
  curve_point q{s.res.segment_steps + s.res.kd_steps, s.elapsed(), s.cpu_now(), s.res.flops, 0.0};
  const double wall0 = s.clock.eval_wall;
  q.ppl = run_probe([&] { return s.opt.probe(s.st); }, s.clock.eval_wall, s.clock.eval_cpu, "pipeline", q.step);
  s.res.eval_seconds += s.clock.eval_wall - wall0;
  s.res.curve.push_back(q);
  if (s.metrics.is_open()) s.metrics.write(eval_record(q));
}

// The student feature at boundary a made current before a visit reads it, the refresh recorded.
template <class State>
void refresh(State& s, index_t a) {
  const auto r = s.sf->refresh(a);
  if (!r) return;
  s.res.refresh_seconds += r->seconds;
  s.res.flops += static_cast<double>(s.opt.feature_batches * s.B * s.T) *
                 prune::layers_flops_per_token(s.st.config, r->from, r->boundary, s.T);
  if (s.metrics.is_open()) {
    // Filled field by field: nvcc's front end rejects a nested braced list here.
    nlohmann::json rec;
    rec["event"] = "refresh";
    rec["boundary"] = r->boundary;
    rec["from"] = r->from;
    rec["version"] = r->version;
    rec["seconds"] = r->seconds;
    s.metrics.write(rec);
  }
}

// Bytes held now: compute (the backend's tier, less what the cache and the staging ring hold there),
// the cache's stored bytes, the staging ring, the tracker's raw count of the backend's tier, and the
// process's resident set (0 where /proc cannot be read).
template <class State>
nlohmann::json memory_sample(const State& s, std::size_t staging) {
  using S = std::remove_cvref_t<State>;
  constexpr tier ct = S::backend_type::memory_tier;
  const std::size_t tracked = memory().current(ct);
  const std::size_t cache = s.cache->stats().store.stored_bytes;
  std::size_t other = 0;
  if (S::store_type::memory_tier == ct) other += cache;
  if (S::staging_type::memory_tier == ct) other += staging;
  const auto rss = process_resident_split();
  return {{"compute", tracked > other ? tracked - other : 0}, {"cache", cache}, {"staging", staging}, {"tracker", tracked},
          {"resident", rss.total}, {"resident_anon", rss.anon}, {"resident_file", rss.file}};
}

}  // namespace lwcl::distill
