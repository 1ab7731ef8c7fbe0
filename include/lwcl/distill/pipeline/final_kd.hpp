#pragma once
// The closing stage of a curriculum with final KD: the teacher reloaded, and end-to-end logit KD
// (train_e2e_kd) over the whole student for the plan's KD steps, or under a seconds budget for the time
// the visits left. Its quality curve joins the run's at the run's cost so far, its evaluations leave the
// run's clocks, and a checkpoint marks it done.

#include <algorithm>
#include <cstddef>

#include <nlohmann/json.hpp>

#include "lwcl/core/error.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/distill/e2e_kd.hpp"
#include "lwcl/distill/pipeline/resume.hpp"
#include "lwcl/distill/pipeline/run_state.hpp"
#include "lwcl/model/transformer.hpp"

namespace lwcl::distill {

template <class Backend, class CachePolicy, class Loss>
void final_kd(run_state<Backend, CachePolicy, Loss>& s, const teacher_loader<Backend>& load_teacher) {
  const auto& opt = s.opt;
  timer t;
  s.kept.clear();  // no visit follows: the segments' kept optimiser states are released before the teacher comes
  auto loaded = load_teacher();
  check(loaded != nullptr, "pipeline: the teacher source returned no model");
  auto* teacher = dynamic_cast<model::transformer<Backend>*>(loaded.get());
  check(teacher != nullptr, "pipeline: the final KD stage distils logits; the teacher is an encoder, which has none");
  teacher->freeze();
  auto net = s.st.to_transformer(s.be);
  s.peaks.fold();  // end-to-end KD restarts the tracker's peak of the compute tier
  e2e_options eo;
  eo.lr = opt.kd_lr > 0 ? opt.kd_lr : opt.lr;
  eo.min_lr = opt.kd_lr > 0 ? opt.kd_lr / 10 : opt.min_lr;
  eo.weight_decay = opt.weight_decay;
  eo.temperature = opt.kd_temperature;
  eo.clip = opt.clip;
  eo.micro_batches = opt.kd_micro_batches;
  eo.progress_bar = opt.progress_bar;
  if (s.seconds_budget()) {
    eo.steps = opt.max_visit_steps;
    eo.time_budget_seconds = std::max(1e-3, opt.total.amount - s.elapsed());
    eo.min_steps = 1;  // a closing stage asked for runs, even after visits that ran late on a loaded machine
  } else {
    eo.steps = s.plan.kd_steps;
  }
  if (opt.probe) {
    eo.probe = [&] { return opt.probe(student_state::of(*net)); };
    eo.eval_every = opt.eval_every;
    eo.probe_start = false;  // the student the last visit left is on the curve already
  }
  auto& res = s.res;
  const double wall0 = s.elapsed(), cpu0 = s.cpu_now(), flops0 = res.flops;
  const long step0 = res.segment_steps;
  const auto r = train_e2e_kd(*teacher, *net, s.loader, s.B, s.T, eo, nullptr);
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
  s.st = student_state::of(*net);
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
    rec["lr"] = eo.lr;
    rec["min_lr"] = eo.min_lr;
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
