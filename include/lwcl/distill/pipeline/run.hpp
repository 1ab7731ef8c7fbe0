#pragma once
// pipeline_run: one layer-wise recovery from start to finish. execute() makes the run's state (run_state.hpp), passes
// it down and drops it when it returns, so nothing carries over from one run to the next. A run: (1) the teacher pass
// (teacher_pass.hpp) caches the teacher's boundary features of `feature_batches` training batches, after which the
// teacher is released; (2) every phase of the curriculum visits its segments in order, each visit training one segment,
// alone in compute memory, on features fed by a feature_feed, student features refreshed when stale (student_features);
// (3) an optional final KD stage (final_kd.hpp) reloads the teacher. Checkpoints (resume.hpp) let a killed run resume
// bitwise under step and token budgets. The run is a template of the backend, the cache policy and the loss only; the
// segmentation and curriculum reach it through run_schedule (schedule.hpp), which it reads and never writes, so every
// bundle that shares those three shares one compiled run.

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/core/error.hpp"
#include "lwcl/core/fs.hpp"
#include "lwcl/core/memory.hpp"
#include "lwcl/core/process_memory.hpp"
#include "lwcl/core/progress.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/data/loader.hpp"
#include "lwcl/distill/pipeline/budget.hpp"
#include "lwcl/distill/pipeline/evaluation.hpp"
#include "lwcl/distill/pipeline/final_kd.hpp"
#include "lwcl/distill/pipeline/options.hpp"
#include "lwcl/distill/pipeline/result.hpp"
#include "lwcl/distill/pipeline/resume.hpp"
#include "lwcl/distill/pipeline/run_state.hpp"
#include "lwcl/distill/pipeline/schedule.hpp"
#include "lwcl/distill/pipeline/setup.hpp"
#include "lwcl/distill/pipeline/teacher_pass.hpp"
#include "lwcl/distill/pipeline/visit_plan.hpp"
#include "lwcl/distill/report.hpp"
#include "lwcl/distill/segment_trainer.hpp"
#include "lwcl/distill/student_state.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/ops/elementwise.hpp"
#include "lwcl/optim/schedule.hpp"
#include "lwcl/prune/plan.hpp"

namespace lwcl::distill {

template <class Backend, class CachePolicy, class Loss>
class pipeline_run {
 public:
  using cache_policy_type = CachePolicy;
  using loss_type = Loss;
  using state_type = run_state<Backend, CachePolicy, Loss>;
  using store_type = typename state_type::store_type;
  using staging_type = typename state_type::staging_type;
  using feed_type = typename state_type::feed_type;
  using segment_type = typename state_type::segment_type;
  using net_type = model::transformer<Backend>;
  using teacher_source = teacher_loader<Backend>;

  // A run recovering `student` in place, checked with validate_run() first: the bundle's segmentation
  // and curriculum behind `schedule`, its cache policy and loss, and its slots' names (`policies`,
  // written into config.json and report.json).
  pipeline_run(Backend& be, const run_schedule& schedule, CachePolicy cache, Loss loss,
               std::map<std::string, std::string> policies, const pipeline_options& opt, student_state& student,
               std::vector<index_t> boundaries, const data::batch_loader& loader, std::filesystem::path run_dir)
      : be_(be), sched_(schedule), cache_policy_(std::move(cache)), loss_(std::move(loss)),
        names_(labelled_policies(policies, opt.policy_labels)), opt_(opt), st_(student), tlo_(std::move(boundaries)),
        loader_(loader), run_dir_(std::move(run_dir)) {}

  pipeline_result execute(const teacher_source& load_teacher);

 private:
  // Whether each phase's visits read student inputs at any step.
  std::vector<bool> reads_student(const state_type& s) const {
    std::vector<bool> out;
    for (const auto& ph : s.phases)
      out.push_back(sched_.student_fraction(ph, 0) > 0 || sched_.student_fraction(ph, static_cast<index_t>(opt_.max_visit_steps)) > 0);
    return out;
  }

  // ---- budget ----
  double layerwise_seconds() const { return opt_.total.amount * (sched_.has_final_kd() ? 1.0 - opt_.final_kd_share : 1.0); }

  // ---- difficulty ----
  // Each segment's local loss on batch 0 before training, on the inputs its first step would read.
  std::vector<double> measure_difficulty(state_type& s, const policies::curriculum_phase& ph);
  std::vector<double> initial_losses(state_type& s, const std::vector<policies::segment>& segments, double r);
  // The runtime inputs the segmentation reads from the run (segmentation_inputs): balanced_difficulty's
  // per-layer difficulties (each layer's initial local loss on teacher inputs), unless a resumed run
  // restored the interrupted run's; memory_budget's batch shape and dtype.
  void measure_segmentation_inputs(state_type& s);
  // The input of a segment starting at boundary a for batch k at student share r, read directly
  // (outside the prefetcher): teacher features into xt, student features into xs, mixed into xt.
  tensor prepare_input(state_type& s, index_t a, index_t k, double r, const tensor& xt, const tensor& xs);

  // ---- one visit ----
  void visit(state_type& s, std::size_t p, index_t pos, const std::vector<index_t>& order,
             const std::vector<double>& difficulty, long s0);
  // The report of a visit as it starts: which segment, and (resuming at step s0 > 0) what the
  // interrupted process had recorded of it.
  visit_report start_report(const state_type& s, std::size_t p, index_t pos, index_t k,
                            const std::vector<double>& difficulty, long s0) const;
  // One step's metrics record and progress.
  void record_step(state_type& s, const visit_report& rep, std::size_t p, index_t pos, index_t batch, double loss,
                   double lr, std::size_t staging);
  // A visit's closing accounting: its memory and time into the run's totals, the trained segment back
  // into the student, the report into the results and metrics, and the checkpoint after it.
  void finish_visit(state_type& s, visit_report& rep, segment_type& seg, std::size_t p, index_t pos,
                    const std::vector<index_t>& order, const std::vector<double>& difficulty, std::size_t base);
  // The run's closing: its totals and memory peaks into the result, the student saved, the recovery
  // evaluated, report.json and the plots written.
  void finish_run(state_type& s, bool rss, const student_state& initial, const teacher_source& load_teacher);

  Backend& be_;
  const run_schedule& sched_;  // the segmentation and curriculum
  CachePolicy cache_policy_;
  Loss loss_;
  std::map<std::string, std::string> names_;  // slot -> policy name, with pipeline_options::policy_labels
  const pipeline_options& opt_;
  student_state& st_;
  std::vector<index_t> tlo_;
  const data::batch_loader& loader_;
  std::filesystem::path run_dir_;
};

// ---- the run, member by member ----

template <class Backend, class CachePolicy, class Loss>
pipeline_result pipeline_run<Backend, CachePolicy, Loss>::execute(const teacher_source& load_teacher) {
  const student_state initial = opt_.validation_ids.empty() ? student_state{} : st_;
  check(!opt_.fake_quant || !sched_.has_final_kd(), "pipeline: fake quantisation (", opt_.fake_quant ? opt_.fake_quant->describe() : "",
        ") trains the layer-wise visits, and the curriculum closes with logit KD on the whole student, which does not "
        "fake-quantise: pick a curriculum without final KD");
  state_type s(be_, opt_, st_, tlo_, loader_, run_dir_);
  s.res.policies = names_;
  s.res.total = opt_.total;

  write_run_config(run_dir_ / "config.json", s.res.policies, opt_, loader_, st_, tlo_);
  s.cache = cache_policy_.open(run_dir_);
  s.sf.emplace(be_, *s.cache, st_, tlo_, s.B, s.T, opt_.feature_batches);

  // Where to start: a checkpoint, or the beginning.
  s.fingerprint = run_fingerprint(opt_, loader_, tlo_, s.res.policies, st_.type);
  const std::optional<run_position> at = start_or_resume(s);

  memory().reset_peaks();
  s.held_compute = memory().current_compute(Backend::memory_tier);
  for (int t = 0; t < tier_count; ++t) s.held_by_tier[t] = memory().current(static_cast<tier>(t));
  const bool rss = reset_peak_resident();

  teacher_pass(s, load_teacher);
  measure_segmentation_inputs(s);
  s.phases = sched_.phases(st_.config, s.measured);
  s.res.phases = s.phases.size();
  s.plan = distill::plan_budget(opt_.total, visits_total(s), sched_.has_final_kd(), opt_.final_kd_share, s.B * s.T,
                                opt_.max_visit_steps, opt_.min_visit_steps);

  if (at && opt_.log)
    std::fprintf(opt_.log, "pipeline: resuming at phase %zu, visit %lld, step %ld (%ld segment steps done)\n", at->phase,
                 static_cast<long long>(at->position), at->visit_step, s.res.segment_steps);

  if (opt_.progress_bar) {
    const bool secs = s.seconds_budget();
    s.bar = std::make_unique<progress>("lwcl", secs ? static_cast<long>(opt_.total.amount) : s.plan.visit_total());
    if (!secs) {
      s.bar->starts_at(s.res.segment_steps);  // resumed: the time left from this process's steps
      s.bar->update(s.res.segment_steps);
    }
  }

  if (!at) probe_quality(s);  // the pruned student, at the teacher pass's cost
  for (std::size_t p = at ? at->phase : 0; p < s.phases.size() && !s.layerwise_spent; ++p) {
    const auto& ph = s.phases[p];
    const bool here = at && p == at->phase;  // the phase the run resumes in
    std::vector<index_t> order;
    std::vector<double> difficulty;
    if (here && !at->order.empty()) {
      order = at->order;
      difficulty = at->difficulty;
    } else {
      if (ph.needs_difficulty || opt_.share == budget_share::difficulty) difficulty = measure_difficulty(s, ph);
      order = sched_.visiting_order(ph, difficulty);
    }
    if (opt_.share == budget_share::difficulty && !s.seconds_budget()) share_phase_steps(s, p, order, difficulty);
    for (index_t pos = here ? at->position : 0; pos < static_cast<index_t>(order.size()) && !s.layerwise_spent; ++pos)
      visit(s, p, pos, order, difficulty, here && pos == at->position ? at->visit_step : 0);
  }
  if (s.bar) s.bar->finish();
  s.bar.reset();
  if (s.res.segment_steps == 0 && s.res.budget_exhausted && opt_.log)
    std::fprintf(opt_.log,
                 "pipeline: the budget of %s was used up before any segment trained (teacher pass %.1f s, difficulty "
                 "measurements and refreshes %.1f s); the student is unchanged: raise the budget\n",
                 opt_.total.str().c_str(), s.res.teacher_pass_seconds, s.elapsed() - s.res.teacher_pass_seconds);

  if (sched_.has_final_kd() && !(at && at->kd_done) && s.plan.kd_steps > 0) {
    if (s.seconds_budget() && s.elapsed() >= opt_.total.amount)
      s.res.budget_exhausted = true;  // the teacher pass and the visits took the whole budget
    else
      final_kd(s, load_teacher);
  }
  finish_run(s, rss, initial, load_teacher);
  return s.res;
}

template <class Backend, class CachePolicy, class Loss>
void pipeline_run<Backend, CachePolicy, Loss>::finish_run(state_type& s, bool rss, const student_state& initial,
                                                          const teacher_source& load_teacher) {
  namespace fs = std::filesystem;
  auto& res = s.res;
  s.peaks.fold();
  for (int t = 0; t < tier_count; ++t)
    res.tracker_peak_bytes[std::string(tier_name(static_cast<tier>(t)))] = s.peaks.by_tier[t];
  res.cache = s.cache->stats();
  res.peak_cache_bytes = static_cast<std::size_t>(res.cache.store.peak_stored_bytes) + s.peaks.staging;
  const auto less_held = [](std::size_t peak, std::size_t held) { return peak > held ? peak - held : 0; };
  res.run_peak_compute_bytes = less_held(s.peaks.compute, s.held_compute);
  constexpr int ct = static_cast<int>(Backend::memory_tier);
  res.run_peak_total_bytes = Backend::is_device ? res.run_peak_compute_bytes + res.peak_cache_bytes
                                                : less_held(s.peaks.by_tier[ct], s.held_by_tier[ct]);
  res.peak_resident_bytes = rss ? peak_resident_bytes() : 0;
  res.seconds = s.elapsed();
  res.cpu_seconds = s.cpu_now();
  s.cache.reset();
  s.metrics.close();
  if (opt_.save_student) {
    const fs::path dir = run_dir_ / "student";
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (st_.is_encoder())
      checkpoint::save_hf(*st_.to_encoder(be_), dir.string(), opt_.student_as);  // a BertModel folder, as the teacher came
    else
      checkpoint::save_hf(*st_.to_transformer(be_), dir.string(), opt_.student_as);
  }
  if (!opt_.validation_ids.empty()) evaluate_recovery(be_, opt_, s.B, s.T, tlo_, load_teacher, st_, initial, res);
  write_text_atomic(run_dir_ / "report.json", res.to_json().dump(2) + "\n");
  if (opt_.plots) {
    plot_pipeline_metrics(run_dir_ / "metrics.jsonl", run_dir_);
    if (!res.cumulative_error.empty())
      plot_cumulative_error({{"before recovery", res.cumulative_error_before}, {"after", res.cumulative_error}},
                            run_dir_ / "cumulative_error.png");
  }
}
template <class Backend, class CachePolicy, class Loss>
std::vector<double> pipeline_run<Backend, CachePolicy, Loss>::measure_difficulty(state_type& s,
                                                                                 const policies::curriculum_phase& ph) {
  const double r = sched_.student_fraction(ph, 0);
  auto d = initial_losses(s, ph.segments, r);
  if (s.metrics.is_open()) s.metrics.write({{"event", "difficulty"}, {"phase", ph.index}, {"difficulty", d}});
  return d;
}

template <class Backend, class CachePolicy, class Loss>
std::vector<double> pipeline_run<Backend, CachePolicy, Loss>::initial_losses(
    state_type& s, const std::vector<policies::segment>& segments, double r) {
  std::vector<double> d;
  optim::adamw_config oc;
  const auto shape = s.sf->feature_shape();
  owned_tensor<Backend> xt(be_, st_.type, shape), xs(be_, st_.type, shape), y(be_, st_.type, shape);
  for (const auto& sg : segments) {
    if (r > 0) refresh(s, sg.first);
    const tensor x = prepare_input(s, sg.first, 0, r, xt.view(), xs.view());
    s.sf->load(s.sf->teacher_item(s.sf->teacher_out(sg.last), 0), y.view());
    segment_type seg(be_, st_.config, sg.first, sg.last, st_.layout, st_.params, st_.type, oc, loss_, opt_.clip);
    if (opt_.fake_quant) seg.set_fake_quant(*opt_.fake_quant);
    d.push_back(seg.loss(x, y.view()));
    s.res.flops += static_cast<double>(s.B * s.T) * prune::layers_flops_per_token(st_.config, sg.first, sg.last, s.T);
  }
  return d;
}

template <class Backend, class CachePolicy, class Loss>
void pipeline_run<Backend, CachePolicy, Loss>::measure_segmentation_inputs(state_type& s) {
  auto& in = s.measured;
  if (sched_.measures_layer_difficulty() && in.layer_difficulty.empty()) {
    std::vector<policies::segment> layers;
    for (index_t l = 0; l < st_.config.n_layers(); ++l) layers.push_back({l, l + 1});
    in.layer_difficulty = initial_losses(s, layers, 0.0);
    if (s.metrics.is_open()) {
      nlohmann::json rec;
      rec["event"] = "layer_difficulty";
      rec["difficulty"] = in.layer_difficulty;
      s.metrics.write(rec);
    }
  }
  in.batch = s.B;
  in.seq = s.T;
  in.type = st_.type;
  in.input_tensors = 3 * feed_type::set_count(s.upload_ahead());
}

template <class Backend, class CachePolicy, class Loss>
tensor pipeline_run<Backend, CachePolicy, Loss>::prepare_input(state_type& s, index_t a, index_t k, double r,
                                                               const tensor& xt, const tensor& xs) {
  if (r < 1) s.sf->load(s.sf->teacher_item(s.sf->teacher_in(a), k), xt);
  if (r > 0) s.sf->load(s.sf->student_item(a, k), xs);
  if (r <= 0) return xt;
  if (r >= 1) return xs;
  ops::mix(be_, xt, xt, xs, r);
  return xt;
}

template <class Backend, class CachePolicy, class Loss>
visit_report pipeline_run<Backend, CachePolicy, Loss>::start_report(const state_type& s, std::size_t p, index_t pos,
                                                                    index_t k, const std::vector<double>& difficulty,
                                                                    long s0) const {
  const auto& ph = s.phases[p];
  const auto sg = ph.segments[static_cast<std::size_t>(k)];
  visit_report rep;
  rep.phase = p;
  rep.position = pos;
  rep.segment = k;
  rep.first = sg.first;
  rep.last = sg.last;
  rep.order = std::string(ph.order);
  rep.inputs = std::string(ph.inputs);
  if (!difficulty.empty()) rep.difficulty = difficulty[static_cast<std::size_t>(k)];
  if (s0 > 0 && !s.partial.is_null()) {
    const auto prev = visit_report::from_json(s.partial);
    rep.loss_first = prev.loss_first;
    rep.student_fraction_first = prev.student_fraction_first;
    rep.seconds = prev.seconds;
    rep.stall_seconds = prev.stall_seconds;
  }
  return rep;
}

template <class Backend, class CachePolicy, class Loss>
void pipeline_run<Backend, CachePolicy, Loss>::visit(state_type& s, std::size_t p, index_t pos,
                                                     const std::vector<index_t>& order,
                                                     const std::vector<double>& difficulty, long s0) {
  const auto& ph = s.phases[p];
  const index_t k = order[static_cast<std::size_t>(pos)];
  const auto sg = ph.segments[static_cast<std::size_t>(k)];
  const index_t g = global_visit(s, p, pos);
  long planned = s.plan.visit_steps[static_cast<std::size_t>(g)];
  const bool secs = s.seconds_budget();
  visit_report rep = start_report(s, p, pos, k, difficulty, s0);

  std::vector<double> share(static_cast<std::size_t>(planned));
  for (long i = 0; i < planned; ++i)
    share[static_cast<std::size_t>(i)] = sched_.student_fraction(ph, static_cast<index_t>(i));
  if (std::any_of(share.begin(), share.end(), [](double r) { return r > 0; })) refresh(s, sg.first);
  release_dead_features(s, reads_student(s), p, pos, order, sg.first);

  // The deadline of this visit under a seconds budget, and the steps its schedule is planned for.
  double deadline = 0;
  long lr_steps = planned;
  if (secs) {
    const auto t = plan_visit_time(s, layerwise_seconds(), p, pos, order, difficulty, sg, s0, planned);
    deadline = t.deadline;
    lr_steps = t.lr_steps;
    if (s.elapsed() >= layerwise_seconds()) {
      s.res.budget_exhausted = true;  // this visit and the ones after it get no steps
      s.layerwise_spent = true;
      return;
    }
  }

  // Compute memory of this visit, measured by the tracker from here.
  s.peaks.fold();
  const std::size_t base = memory().current(Backend::memory_tier);
  memory().reset_peak(Backend::memory_tier);

  optim::adamw_config oc;
  oc.lr = opt_.lr;
  oc.weight_decay = opt_.weight_decay;
  segment_type seg(be_, st_.config, sg.first, sg.last, st_.layout, st_.params, st_.type, oc, loss_, opt_.clip);
  if (opt_.fake_quant) seg.set_fake_quant(*opt_.fake_quant);
  if (opt_.keep_optimizer_state) s.kept.restore(seg);  // a mid-visit checkpoint's state (next line) replaces it
  if (s0 > 0) read_segment_state(*s.resumed_from, seg, s0);
  optim::cosine_schedule lr_at{opt_.lr, opt_.min_lr, warmup_of(opt_, std::max(1L, lr_steps)), std::max(1L, lr_steps)};
  timer vt, estimate;  // vt restarts at each checkpoint; estimate times the visit's first steps
  double stall = 0;
  {
    feed_type fd(be_, *s.cache, *s.sf, sg.first, sg.last, s0, planned, share, opt_.prefetch, s.upload_ahead(), st_.type,
                 opt_.running_batches ? s.res.segment_steps - s0 : 0);
    for (long i = s0; i < planned && !rep.exact; ++i) {
      if (opt_.halt_after_steps > 0 && s.steps_this_process >= opt_.halt_after_steps) throw pipeline_halted{};
      if (secs) {
        if (s.elapsed() >= deadline && i >= opt_.min_visit_steps) break;
        if (i == s0 + 3) {
          // The refit: at the finished visits' pace (many steps, warm), or in the first visit at its own
          // first three steps'.
          const double prior = visits_seconds_per_step(s, sg.first, sg.last);
          const long fit = prior > 0 ? steps_within_seconds(planned, s0 + 3, 1, prior, deadline - s.elapsed())
                                     : steps_within_seconds(planned, s0 + 3, 3, estimate.seconds(), deadline - s.elapsed());
          planned = std::min(planned, std::max(opt_.min_visit_steps, fit));
          lr_at.total_steps = std::max(1L, planned);
          lr_at.warmup_steps = warmup_of(opt_, lr_at.total_steps);
          fd.end_at(planned);
        }
      }
      const double r = share[static_cast<std::size_t>(i)];
      const feature_set<Backend>& in = fd.at(i);
      tensor x = r <= 0 ? in.xt.view() : in.xs.view();
      if (r > 0 && r < 1) {
        ops::mix(be_, in.xt.view(), in.xt.view(), in.xs.view(), r);
        x = in.xt.view();
      }
      const double lr = lr_at.lr(i + 1);
      double loss = 0;
      try {
        loss = seg.step(x, in.y.view(), lr);
      } catch (const lwcl::error& e) {
        // Which cached features the step read: its input and its target, by boundary and batch.
        const char* input = r <= 0 ? "the teacher's" : r >= 1 ? "the student's" : "a mix of the teacher's and the student's";
        fail("pipeline: phase ", p, ", segment [", sg.first, ", ", sg.last, "), step ", i + 1, " (global step ",
             s.res.segment_steps + 1, "): ", e.what(), " (input: ", input, " features at boundary ", sg.first,
             ", target: the teacher's at boundary ", sg.last, ", batch ", fd.batch_of(i), ")");
      }
      if (i == 0) {
        rep.loss_first = loss;
        rep.student_fraction_first = r;
        rep.exact = opt_.end_exact_visits && r <= 0 && loss == 0.0;  // nothing to learn: the visit ends here
      }
      rep.loss_last = loss;
      rep.student_fraction_last = r;
      rep.steps = i + 1;
      record_step(s, rep, p, pos, fd.batch_of(i), loss, lr, fd.stats().staging_bytes);
      if (opt_.checkpoint_every > 0 && (i + 1) % opt_.checkpoint_every == 0 && i + 1 < planned) {
        rep.planned_steps = planned;
        rep.seconds += vt.seconds();
        rep.stall_seconds += fd.stats().stall_seconds - stall;
        stall = fd.stats().stall_seconds;
        vt = timer();
        save_checkpoint(s, run_position{p, pos, i + 1, order, difficulty}, &seg, rep);
      }
    }
    const auto ps = fd.stats();
    rep.stall_seconds += ps.stall_seconds - stall;
    rep.staging_bytes = ps.staging_bytes;
    rep.compute_bytes = seg.resident_bytes() + 3 * fd.sets() * s.sf->feature_bytes();
  }
  rep.planned_steps = planned;
  rep.seconds += vt.seconds();
  finish_visit(s, rep, seg, p, pos, order, difficulty, base);
}

template <class Backend, class CachePolicy, class Loss>
void pipeline_run<Backend, CachePolicy, Loss>::record_step(state_type& s, const visit_report& rep, std::size_t p,
                                                           index_t pos, index_t batch, double loss, double lr,
                                                           std::size_t staging) {
  ++s.res.segment_steps;
  ++s.steps_this_process;
  s.res.tokens += s.B * s.T;
  s.res.flops += step_flops(s, rep.first, rep.last);
  s.metrics.write({{"global_step", s.res.segment_steps},
                   {"phase", p},
                   {"position", pos},
                   {"first", rep.first},
                   {"last", rep.last},
                   {"step", rep.steps},
                   {"batch", batch},
                   {"loss", loss},
                   {"student_fraction", rep.student_fraction_last},
                   {"lr", lr},
                   {"seconds", s.elapsed()},
                   {"memory", memory_sample(s, staging)}});
  if (s.bar)
    s.bar->update(s.seconds_budget() ? static_cast<long>(s.elapsed()) : s.res.segment_steps,
                  "phase " + std::to_string(p) + " layers " + std::to_string(rep.first) + "-" +
                      std::to_string(rep.last - 1));
}

template <class Backend, class CachePolicy, class Loss>
void pipeline_run<Backend, CachePolicy, Loss>::finish_visit(state_type& s, visit_report& rep, segment_type& seg,
                                                            std::size_t p, index_t pos, const std::vector<index_t>& order,
                                                            const std::vector<double>& difficulty, std::size_t base) {
  const bool secs = s.seconds_budget();
  rep.tracker_bytes = memory().peak(Backend::memory_tier) - base;
  s.res.step_seconds += rep.seconds;
  s.res.stall_seconds += rep.stall_seconds;
  s.res.peak_compute_bytes = std::max(s.res.peak_compute_bytes, rep.compute_bytes);
  s.peaks.staging = std::max(s.peaks.staging, rep.staging_bytes);
  if (secs && s.elapsed() >= layerwise_seconds()) s.layerwise_spent = true;
  if (secs && rep.steps < rep.planned_steps && !rep.exact) s.res.budget_exhausted = true;

  if (rep.steps > 0) {  // a visit cut before its first step changed nothing
    seg.write_back(st_.layout, st_.params);
    s.sf->trained(rep.first, rep.last);  // the features above the segment are stale now
    if (opt_.keep_optimizer_state) s.kept.keep(seg);
  }
  s.res.visits.push_back(rep);
  if (rep.steps > 0) probe_quality(s);
  s.partial = nlohmann::json();
  if (s.metrics.is_open()) {
    auto j = rep.to_json();
    j["event"] = "visit";
    s.metrics.write(j);
  }
  save_checkpoint(s, run_position{p, pos + 1, 0, order, difficulty});
}

}  // namespace lwcl::distill
