#pragma once
// The closing stage of a curriculum with final KD: the teacher reloaded, and the whole student trained
// end to end, a decoder by logit KD (train_e2e_kd; with kd_hidden_mse also the last hidden states' MSE),
// an encoder by end-to-end distillation on kd_encoder_objective (train_e2e_encoder), for the plan's KD
// steps, or under a seconds budget for the time the visits left. Its quality curve joins the run's at
// the run's cost so far, its evaluations leave the run's clocks, its step records (loss, tracker bytes,
// resident set) join the run's metrics file with "stage": "final_kd", and a checkpoint marks it done. The
// feature cache, which nothing reads again, is emptied before it starts unless it lives on disk, and the
// student's host copy of its parameters is released while the stage trains the student it was built into.

#include <algorithm>
#include <cstddef>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/core/error.hpp"
#include "lwcl/core/memory.hpp"
#include "lwcl/core/metrics.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/distill/e2e_encoder.hpp"
#include "lwcl/distill/e2e_kd.hpp"
#include "lwcl/distill/pipeline/resume.hpp"
#include "lwcl/distill/pipeline/run_state.hpp"
#include "lwcl/model/encoder.hpp"
#include "lwcl/model/transformer.hpp"

namespace lwcl::distill {

namespace pipeline_detail {

// The closing stage's peak and final learning rates: kd_lr and a tenth of it, or the visits' own.
inline std::pair<double, double> closing_rates(const pipeline_options& opt) {
  return opt.kd_lr > 0 ? std::pair{opt.kd_lr, opt.kd_lr / 10} : std::pair{opt.lr, opt.min_lr};
}

// The closing stage's optimiser and budget, whichever trainer runs it.
template <class Backend, class CachePolicy, class Loss>
void closing_loop_options(const run_state<Backend, CachePolicy, Loss>& s, e2e_loop_options& eo) {
  const auto& opt = s.opt;
  std::tie(eo.lr, eo.min_lr) = closing_rates(opt);
  eo.weight_decay = opt.weight_decay;
  eo.clip = opt.clip;
  eo.warmup_steps = opt.kd_warmup_steps;
  eo.micro_batches = opt.kd_micro_batches;
  eo.progress_bar = opt.progress_bar;
  if (s.seconds_budget()) {
    eo.steps = opt.max_visit_steps;
    eo.time_budget_seconds = std::max(1e-3, opt.total.amount - s.elapsed());
    eo.min_steps = 1;  // a closing stage asked for runs, even after visits that ran late on a loaded machine
  } else {
    eo.steps = s.plan.kd_steps;
  }
  // Its step records join the run's metrics file, on the run's step count and clock.
  eo.metrics_stage = "final_kd";
  eo.global_step_offset = s.res.segment_steps;
  eo.seconds_offset = s.elapsed();
  if (opt.probe) {
    eo.eval_every = opt.eval_every;
    eo.eval_every_seconds = opt.eval_every_seconds;
    eo.probe_start = false;  // the student the last visit left is on the curve already
  }
}

// Trains `net`, built from `st`, by `train`, with st's host copy of the parameters released meanwhile
// (a double a parameter, twice the student's f32 weights, that nothing reads while net holds them) and
// written back from net when it returns or throws.
template <class Net, class Train>
auto train_in_place(student_state& st, const Net& net, Train&& train) {
  std::vector<double>().swap(st.params);
  try {
    auto r = train();
    st = student_state::of(net);
    return r;
  } catch (...) {
    st = student_state::of(net);
    throw;
  }
}

}  // namespace pipeline_detail

template <class Backend, class CachePolicy, class Loss>
void final_kd(run_state<Backend, CachePolicy, Loss>& s, const teacher_loader<Backend>& load_teacher) {
  const auto& opt = s.opt;
  timer t;
  s.kept.clear();  // no visit follows: the segments' kept optimiser states are released before the teacher comes
  // Nor does anything read the cached features again: a cache in memory (host, pinned or device) is
  // emptied before the teacher comes, so that the stage holds end-to-end KD's memory and not that plus the
  // cache. A cache on disk is left for a resumed run to find.
  using store_type = typename run_state<Backend, CachePolicy, Loss>::store_type;
  nlohmann::json released;
  if constexpr (store_type::memory_tier != tier::disk) {
    const std::size_t cache_before = s.cache->stats().store.stored_bytes;
    const std::size_t tracked_before = memory().current(store_type::memory_tier);
    for (const auto& k : s.cache->keys()) s.cache->erase(k);
    const std::size_t tracked_after = memory().current(store_type::memory_tier);
    released = {{"cache_bytes", cache_before - s.cache->stats().store.stored_bytes},
                {"tracker_bytes", tracked_before > tracked_after ? tracked_before - tracked_after : 0}};
  }
  auto loaded = load_teacher();
  check(loaded != nullptr, "pipeline: the teacher source returned no model");
  loaded->freeze();
  auto& res = s.res;
  const double wall0 = s.elapsed(), cpu0 = s.cpu_now(), flops0 = res.flops;
  const long step0 = res.segment_steps;
  e2e_result r;
  metrics_writer* records = s.metrics.is_open() ? &s.metrics : nullptr;
  nlohmann::json stage;  // what the metrics record says of the stage's loss
  if (auto* teacher = dynamic_cast<model::transformer<Backend>*>(loaded.get())) {
    check(!s.st.is_encoder(), "pipeline: the teacher is a decoder and the student an encoder");
    auto net = s.st.to_transformer(s.be);
    s.peaks.fold();  // end-to-end KD restarts the tracker's peak of the compute tier
    e2e_options eo;
    pipeline_detail::closing_loop_options(s, eo);
    eo.temperature = opt.kd_temperature;
    eo.hidden_mse_weight = opt.kd_hidden_mse;
    if (opt.probe) eo.probe = [&] { return opt.probe(student_state::of(*net)); };
    r = pipeline_detail::train_in_place(s.st, *net,
                                        [&] { return train_e2e_kd(*teacher, *net, s.loader, s.B, s.T, eo, records); });
    stage = {{"objective", "logits"}, {"hidden_mse", eo.hidden_mse_weight}, {"temperature", eo.temperature}};
  } else if (auto* encoder_teacher = dynamic_cast<model::encoder<Backend>*>(loaded.get())) {
    check(s.st.is_encoder(), "pipeline: the teacher is an encoder and the student a decoder");
    auto net = s.st.to_encoder(s.be);
    s.peaks.fold();
    e2e_encoder_options eo;
    pipeline_detail::closing_loop_options(s, eo);
    eo.objective = opt.kd_encoder_objective;
    if (opt.probe) eo.probe = [&] { return opt.probe(student_state::of(*net)); };
    r = pipeline_detail::train_in_place(s.st, *net,
                                        [&] { return train_e2e_encoder(*encoder_teacher, *net, s.loader, s.B, s.T, eo, records); });
    stage = {{"objective", std::string(objective_name(eo.objective))}};
  } else {
    fail("pipeline: the teacher source returned a model that is neither a decoder nor an encoder");
  }
  loaded.reset();
  for (std::size_t i = 0; i < r.curve.size(); ++i) {
    auto q = r.curve[i];
    q.step += step0;
    q.seconds += wall0;
    q.cpu_seconds += cpu0;
    q.flops += flops0;
    res.curve.push_back(q);
    if (s.metrics.is_open()) s.metrics.write(eval_record(q));
  }
  s.clock.eval_wall += r.eval_seconds;
  s.clock.eval_cpu += r.eval_cpu_seconds;
  res.eval_seconds += r.eval_seconds;
  res.kd_steps = r.steps;
  res.tokens += r.tokens;
  res.flops += r.flops;
  res.kd_peak_compute_bytes = r.peak_compute_bytes;
  res.kd_seconds = t.seconds() - r.eval_seconds;
  res.budget_exhausted = res.budget_exhausted || r.budget_exhausted;
  if (s.metrics.is_open()) {
    nlohmann::json rec;
    rec["event"] = "final_kd";
    rec["steps"] = r.steps;
    rec["loss_first"] = r.loss_first;
    rec["loss_last"] = r.loss_last;
    const auto [lr, min_lr] = pipeline_detail::closing_rates(opt);
    rec["lr"] = lr;
    rec["min_lr"] = min_lr;
    rec["warmup_steps"] = opt.kd_warmup_steps;
    rec.update(stage);
    if (!released.is_null()) rec["released"] = released;
    rec["peak_compute_bytes"] = r.peak_compute_bytes;
    rec["seconds"] = r.seconds;
    s.metrics.write(rec);
  }
  run_position done;
  done.phase = s.phases.size();
  done.kd_done = true;
  save_checkpoint(s, done);
}

}  // namespace lwcl::distill
