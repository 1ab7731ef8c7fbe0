#pragma once
// pipeline_run: one layer-wise recovery from start to finish, the state of a run in one object made
// by distill::pipeline::run() and gone when it returns, so nothing carries over from one run to the
// next. A run: (1) a teacher pass caches the teacher's boundary features of `feature_batches` training
// batches, after which the teacher is released; (2) every phase of the curriculum visits its segments
// in order, each visit training one segment, alone in compute memory, on features fed by a
// feature_feed, student features refreshed when stale (student_features); (3) an optional final KD
// stage reloads the teacher. Checkpoints (checkpoint_dir) let a killed run resume bitwise under step
// and token budgets. The run is a template of the backend, the cache policy and the loss only; the
// segmentation and curriculum reach it through run_schedule (schedule.hpp), so every bundle that shares
// those three shares one compiled run.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/cache/feature_cache.hpp"
#include "lwcl/cache/prefetcher.hpp"
#include "lwcl/core/checkpoint_dir.hpp"
#include "lwcl/core/fs.hpp"
#include "lwcl/core/memory.hpp"
#include "lwcl/core/metrics.hpp"
#include "lwcl/core/process_memory.hpp"
#include "lwcl/core/progress.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/data/loader.hpp"
#include "lwcl/distill/e2e_kd.hpp"
#include "lwcl/distill/pipeline/budget.hpp"
#include "lwcl/distill/pipeline/checkpoint.hpp"
#include "lwcl/distill/pipeline/evaluation.hpp"
#include "lwcl/distill/pipeline/feature_feed.hpp"
#include "lwcl/distill/pipeline/options.hpp"
#include "lwcl/distill/pipeline/result.hpp"
#include "lwcl/distill/pipeline/schedule.hpp"
#include "lwcl/distill/pipeline/setup.hpp"
#include "lwcl/distill/pipeline/student_features.hpp"
#include "lwcl/distill/report.hpp"
#include "lwcl/distill/segment_trainer.hpp"
#include "lwcl/distill/student_state.hpp"
#include "lwcl/eval/cumulative_error.hpp"
#include "lwcl/eval/perplexity.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/model/layer_map.hpp"
#include "lwcl/model/layer_outputs.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/ops/elementwise.hpp"
#include "lwcl/optim/schedule.hpp"
#include "lwcl/prune/plan.hpp"
#include "lwcl/policies/concepts.hpp"

namespace lwcl::distill {

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

template <class Backend, class CachePolicy, class Loss>
class pipeline_run {
 public:
  using cache_policy_type = CachePolicy;
  using loss_type = Loss;
  using store_type = typename cache_policy_type::store;
  using staging_type = typename pipeline_detail::staging_of<cache_policy_type>::type;
  using feed_type = feature_feed<Backend, store_type, staging_type>;
  using net_type = model::transformer<Backend>;
  // Loads (or builds) the teacher, a decoder (model::transformer) or an encoder (model::encoder); called
  // for the teacher pass and the final KD stage only, and the model is released after each, so it is
  // never resident while segments train.
  using teacher_source = std::function<std::unique_ptr<model::weights<Backend>>()>;

  // A run recovering `student` in place, checked with validate_run() first: the bundle's segmentation
  // and curriculum behind `schedule` (into which the run fills the runtime inputs it measures), its
  // cache policy and loss, and its slots' names (`policies`, written into config.json and report.json).
  pipeline_run(Backend& be, run_schedule& schedule, CachePolicy cache, Loss loss,
               std::map<std::string, std::string> policies, const pipeline_options& opt, student_state& student,
               std::vector<index_t> boundaries, const data::batch_loader& loader, std::filesystem::path run_dir)
      : be_(be), sched_(schedule), cache_policy_(std::move(cache)), loss_(std::move(loss)),
        names_(labelled_policies(policies, opt.policy_labels)), opt_(opt), st_(student), tlo_(std::move(boundaries)),
        loader_(loader), B_(loader.batch_size()), T_(loader.seq_len()), run_dir_(std::move(run_dir)),
        checkpoints_(run_dir_ / "checkpoints", "ck_", 2) {}

  pipeline_result execute(const teacher_source& load_teacher);

 private:
  // Caches the teacher's boundary features of batches 0 .. feature_batches - 1 that the store does not
  // hold yet (a disk store reopened by a resumed run holds them all), then releases the teacher.
  void teacher_pass(const teacher_source& load_teacher);

  // ---- budget ----
  index_t visits_total() const {
    index_t n = 0;
    for (const auto& ph : phases_) n += static_cast<index_t>(ph.segments.size());
    return n;
  }
  void plan_budget() {
    plan_ = distill::plan_budget(opt_.total, visits_total(), sched_.has_final_kd(), opt_.final_kd_share, B_ * T_,
                                 opt_.max_visit_steps);
  }
  index_t global_visit(std::size_t phase, index_t pos) const {
    index_t g = 0;
    for (std::size_t p = 0; p < phase; ++p) g += static_cast<index_t>(phases_[p].segments.size());
    return g + pos;
  }
  // Seconds and processor seconds of the run so far, the quality probe's evaluations excluded.
  double elapsed() const { return elapsed_before_ + clock_.seconds() - eval_wall_; }
  double cpu_now() const { return cpu_before_ + cpu_.seconds() - eval_cpu_; }
  // A point of the quality curve for the student as it stands (with a probe).
  void probe_quality();
  double layerwise_seconds() const {
    return opt_.total.amount * (sched_.has_final_kd() ? 1.0 - opt_.final_kd_share : 1.0);
  }

  // ---- difficulty ----
  // Each segment's local loss on batch 0 before training, on the inputs its first step would read.
  std::vector<double> measure_difficulty(const policies::curriculum_phase& ph);
  std::vector<double> initial_losses(const std::vector<policies::segment>& segments, double r);
  // The runtime inputs the run measured for the segmentation, for checkpoints: resuming must segment
  // exactly as the interrupted run did, not re-measure on weights trained since.
  nlohmann::json segmentation_inputs() const;
  void restore_segmentation_inputs(const nlohmann::json& in);
  // Runtime inputs a segmentation policy reads from the run when left unset: balanced_difficulty's
  // per-layer difficulties (each layer's initial local loss on teacher inputs), memory_budget's batch
  // shape and dtype.
  void fill_segmentation_inputs();
  // The input of a segment starting at boundary a for batch k at student share r, read directly
  // (outside the prefetcher): teacher features into xt, student features into xs, mixed into xt.
  tensor prepare_input(index_t a, index_t k, double r, const tensor& xt, const tensor& xs);

  // ---- one visit ----
  void visit(std::size_t p, index_t pos, const std::vector<index_t>& order, const std::vector<double>& difficulty,
             long s0);
  // The report of a visit as it starts: which segment, and (resuming at step s0 > 0) what the
  // interrupted process had recorded of it.
  visit_report start_report(std::size_t p, index_t pos, index_t k, const std::vector<double>& difficulty, long s0) const;
  // One step's metrics record and progress.
  void record_step(const visit_report& rep, std::size_t p, index_t pos, index_t batch, double loss, double lr,
                   std::size_t staging);
  // A visit's closing accounting: its memory and time into the run's totals, the trained segment back
  // into the student, the report into the results and metrics, and the checkpoint after it.
  void finish_visit(visit_report& rep, segment_trainer<Backend, loss_type>& seg, std::size_t p, index_t pos,
                    const std::vector<index_t>& order, const std::vector<double>& difficulty, std::size_t base);

  // Bytes held now: compute (the backend's tier, less what the cache and the staging ring hold there),
  // the cache's stored bytes, the staging ring, the tracker's raw count of the backend's tier, and the
  // process's resident set (0 where /proc cannot be read).
  nlohmann::json memory_sample(std::size_t staging) const;

  // ---- final KD ----
  void final_kd(const teacher_source& load_teacher);

  // ---- checkpoints (pipeline/checkpoint.hpp) ----
  void save_checkpoint(std::size_t phase, index_t position, long visit_step, const std::vector<index_t>& order,
                       const std::vector<double>& difficulty, const segment_trainer<Backend, loss_type>* seg,
                       const visit_report& partial, bool kd_done = false);

  // The run's totals, student and feature versions as the checkpoint in `dir` left them; its position.
  checkpoint_state load_checkpoint(const std::filesystem::path& dir);

  // Whether a visit queues the next step's feature copies ahead (unset: on device backends only).
  bool upload_ahead() const { return opt_.upload_ahead.value_or(Backend::is_device); }

  // The student feature at boundary a made current before a visit reads it, the refresh recorded.
  void refresh(index_t a);

  // Folds the tracker's peaks since the last reset into the run's, before a part of the run resets them.
  void fold_peaks() {
    for (int t = 0; t < tier_count; ++t) run_peak_[t] = std::max(run_peak_[t], memory().peak(static_cast<tier>(t)));
    run_compute_peak_ = std::max(run_compute_peak_, memory().peak_compute(Backend::memory_tier));
  }

  Backend& be_;
  run_schedule& sched_;  // the segmentation and curriculum, with this run's measured runtime inputs
  CachePolicy cache_policy_;
  Loss loss_;
  std::map<std::string, std::string> names_;  // slot -> policy name, with pipeline_options::policy_labels
  const pipeline_options& opt_;
  student_state& st_;
  std::vector<index_t> tlo_;
  const data::batch_loader& loader_;
  index_t B_, T_;
  std::filesystem::path run_dir_;
  checkpoint_dir checkpoints_;
  std::unique_ptr<cache::feature_cache<store_type>> cache_;
  std::optional<student_features<Backend, store_type>> sf_;
  std::vector<policies::curriculum_phase> phases_;
  budget_plan plan_;
  bool layerwise_spent_ = false;  // a seconds budget's layer-wise share is used up
  pipeline_result res_;
  nlohmann::json partial_, fingerprint_;
  std::optional<std::filesystem::path> resumed_from_;  // the checkpoint this process resumed from
  metrics_writer metrics_;
  std::unique_ptr<progress> bar_;
  timer clock_;
  cpu_timer cpu_;
  double cpu_before_ = 0;  // processor seconds of the processes before a resumption
  double elapsed_before_ = 0;
  double eval_wall_ = 0, eval_cpu_ = 0;  // this process's evaluations, excluded from elapsed() and cpu_now()
  long steps_this_process_ = 0;
  std::size_t peak_staging_ = 0;
  std::map<int, std::size_t> run_peak_;
  std::size_t run_compute_peak_ = 0;
};

// ---- the run, member by member ----

template <class Backend, class CachePolicy, class Loss>
pipeline_result pipeline_run<Backend, CachePolicy, Loss>::execute(const teacher_source& load_teacher) {
  namespace fs = std::filesystem;
  const student_state initial = opt_.validation_ids.empty() ? student_state{} : st_;
  check(!st_.is_encoder() || !sched_.has_final_kd(), "pipeline: the curriculum closes with logit KD, and the student is "
        "an encoder, which has no logits: pick a curriculum without final KD");
  check(!opt_.fake_quant || !sched_.has_final_kd(), "pipeline: fake quantisation (", opt_.fake_quant ? opt_.fake_quant->describe() : "",
        ") trains the layer-wise visits, and the curriculum closes with logit KD on the whole student, which does not "
        "fake-quantise: pick a curriculum without final KD");
  res_.policies = names_;
  res_.total = opt_.total;

  write_run_config(run_dir_ / "config.json", res_.policies, opt_, loader_, st_, tlo_);
  cache_ = cache_policy_.open(run_dir_);
  sf_.emplace(be_, *cache_, st_, tlo_, B_, T_, opt_.feature_batches);

  // Where to start: a checkpoint, or the beginning.
  fingerprint_ = run_fingerprint(opt_, loader_, tlo_, res_.policies, st_.type);
  std::optional<checkpoint_state> state;
  if (opt_.resume && checkpoints_.latest()) {
    state = load_checkpoint(*checkpoints_.latest());
  } else {
    // A fresh start: whatever an earlier run left in a directory-backed cache is not trusted.
    checkpoints_.forget();
    for (const auto& k : cache_->keys()) cache_->erase(k);
  }
  const long step0 = state ? state->totals.segment_steps : 0;
  if (state)
    truncate_metrics_records(run_dir_ / "metrics.jsonl", state->metrics_records);
  else
    truncate_metrics(run_dir_ / "metrics.jsonl", "global_step", step0);
  metrics_.open((run_dir_ / "metrics.jsonl").string(), state.has_value());

  memory().reset_peaks();
  run_peak_.clear();
  run_compute_peak_ = 0;
  const bool rss = reset_peak_resident();

  teacher_pass(load_teacher);
  if (state) restore_segmentation_inputs(state->segmentation_inputs);
  fill_segmentation_inputs();

  phases_ = sched_.phases(st_.config);
  res_.phases = phases_.size();
  plan_budget();

  std::size_t phase0 = 0;
  index_t pos0 = 0;
  long visit_step0 = 0;
  std::vector<index_t> order0;
  std::vector<double> difficulty0;
  bool kd_done = false;
  if (state) {
    phase0 = state->phase;
    pos0 = state->position;
    visit_step0 = state->visit_step;
    order0 = state->order;
    difficulty0 = state->difficulty;
    kd_done = state->kd_done;
    res_.resumed = true;
    if (opt_.log)
      std::fprintf(opt_.log, "pipeline: resuming at phase %zu, visit %lld, step %ld (%ld segment steps done)\n", phase0,
                   static_cast<long long>(pos0), visit_step0, step0);
  }

  if (opt_.progress_bar) {
    const bool secs = opt_.total.unit == budget_unit::seconds;
    bar_ = std::make_unique<progress>("lwcl", secs ? static_cast<long>(opt_.total.amount) : plan_.visit_total());
    if (!secs) bar_->update(res_.segment_steps);
  }

  if (!state) probe_quality();  // the pruned student, at the teacher pass's cost
  for (std::size_t p = phase0; p < phases_.size(); ++p) {
    const auto& ph = phases_[p];
    std::vector<index_t> order;
    std::vector<double> difficulty;
    if (state && p == phase0 && !order0.empty()) {
      order = order0;
      difficulty = difficulty0;
    } else {
      if (ph.needs_difficulty) difficulty = measure_difficulty(ph);
      order = sched_.visiting_order(ph, difficulty);
    }
    const index_t first_pos = state && p == phase0 ? pos0 : 0;
    for (index_t pos = first_pos; pos < static_cast<index_t>(order.size()); ++pos) {
      const long s0 = state && p == phase0 && pos == pos0 ? visit_step0 : 0;
      visit(p, pos, order, difficulty, s0);
      if (layerwise_spent_) break;
    }
    if (layerwise_spent_) break;
  }
  if (bar_) bar_->finish();
  bar_.reset();
  if (res_.segment_steps == 0 && res_.budget_exhausted && opt_.log)
    std::fprintf(opt_.log,
                 "pipeline: the budget of %s was used up before any segment trained (teacher pass %.1f s, difficulty "
                 "measurements and refreshes %.1f s); the student is unchanged: raise the budget\n",
                 opt_.total.str().c_str(), res_.teacher_pass_seconds, elapsed() - res_.teacher_pass_seconds);

  if (sched_.has_final_kd() && !kd_done && plan_.kd_steps > 0) {
    if (opt_.total.unit == budget_unit::seconds && elapsed() >= opt_.total.amount)
      res_.budget_exhausted = true;  // the teacher pass and the visits took the whole budget
    else
      final_kd(load_teacher);
  }

  fold_peaks();
  for (int t = 0; t < tier_count; ++t) res_.tracker_peak_bytes[std::string(tier_name(static_cast<tier>(t)))] = run_peak_[t];
  res_.cache = cache_->stats();
  res_.peak_cache_bytes = static_cast<std::size_t>(res_.cache.store.peak_stored_bytes) + peak_staging_;
  res_.run_peak_compute_bytes = run_compute_peak_;
  res_.run_peak_total_bytes = Backend::is_device ? run_compute_peak_ + res_.peak_cache_bytes
                                                 : run_peak_[static_cast<int>(Backend::memory_tier)];
  res_.peak_resident_bytes = rss ? peak_resident_bytes() : 0;
  res_.seconds = elapsed();
  res_.cpu_seconds = cpu_now();
  cache_.reset();
  metrics_.close();
  if (opt_.save_student) {
    const fs::path dir = run_dir_ / "student";
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (st_.is_encoder())
      checkpoint::save_hf(*st_.to_encoder(be_), dir.string(), opt_.student_as);  // a BertModel folder, as the teacher came
    else
      checkpoint::save_hf(*st_.to_transformer(be_), dir.string(), opt_.student_as);
  }
  if (!opt_.validation_ids.empty()) evaluate_recovery(be_, opt_, B_, T_, tlo_, load_teacher, st_, initial, res_);
  write_text_atomic(run_dir_ / "report.json", res_.to_json().dump(2) + "\n");
  if (opt_.plots) {
    plot_pipeline_metrics(run_dir_ / "metrics.jsonl", run_dir_);
    if (!res_.cumulative_error.empty())
      plot_cumulative_error({{"before recovery", res_.cumulative_error_before}, {"after", res_.cumulative_error}},
                            run_dir_ / "cumulative_error.png");
  }
  return res_;
}

template <class Backend, class CachePolicy, class Loss>
void pipeline_run<Backend, CachePolicy, Loss>::teacher_pass(const teacher_source& load_teacher) {
  timer t;
  const auto& wanted = tlo_;  // strictly increasing, from 0
  std::unique_ptr<model::weights<Backend>> teacher;
  std::vector<std::int32_t> ids, targets;
  for (index_t b = 0; b < opt_.feature_batches; ++b) {
    bool have = true;
    for (index_t tb : wanted) {
      const auto m = cache_->find_meta({tb, cache::source::teacher, b});
      have = have && m && m->shape == sf_->feature_shape() && m->type == st_.type;
    }
    if (have) continue;
    if (!teacher) {
      teacher = load_teacher();
      check(teacher != nullptr, "pipeline: the teacher source returned no model");
      teacher->freeze();  // run forward only: no gradient buffer
      const auto& tc = teacher->config();
      check(tc.d_model == st_.config.d_model, "pipeline: teacher width ", tc.d_model, " != student width ", st_.config.d_model);
      check(tc.fam == st_.config.fam, "pipeline: the teacher is ", model::family_name(tc.fam), ", the student ",
            model::family_name(st_.config.fam));
      model::check_boundary_map(tlo_, st_.config.n_layers(), tc.n_layers(), "pipeline");
      check(teacher->type() == st_.type, "pipeline: the teacher is ", dtype_name(teacher->type()), ", the student ",
            dtype_name(st_.type), "; features are cached in one dtype");
      res_.teacher_loaded = true;
    }
    loader_.batch(static_cast<std::uint64_t>(b), ids, targets);
    res_.flops += static_cast<double>(B_ * T_) * prune::layers_flops_per_token(teacher->config(), 0, wanted.back(), T_);
    model::for_each_layer_output(
        *teacher, ids, B_, T_,
        [&](index_t boundary, const tensor& h) {
          if (std::binary_search(wanted.begin(), wanted.end(), boundary)) sf_->put({boundary, cache::source::teacher, b}, h, 0);
        },
        wanted.back());
  }
  teacher.reset();
  res_.teacher_pass_seconds += t.seconds();
  if (metrics_.is_open())
    metrics_.write({{"event", "teacher_pass"},
                    {"teacher_loaded", res_.teacher_loaded},
                    {"boundaries", wanted.size()},
                    {"batches", opt_.feature_batches},
                    {"cache_stored_bytes", cache_->stats().store.stored_bytes},
                    {"seconds", t.seconds()}});
}

template <class Backend, class CachePolicy, class Loss>
std::vector<double> pipeline_run<Backend, CachePolicy, Loss>::measure_difficulty(const policies::curriculum_phase& ph) {
  const double r = sched_.student_fraction(ph, 0);
  auto d = initial_losses(ph.segments, r);
  if (metrics_.is_open()) metrics_.write({{"event", "difficulty"}, {"phase", ph.index}, {"difficulty", d}});
  return d;
}

template <class Backend, class CachePolicy, class Loss>
std::vector<double> pipeline_run<Backend, CachePolicy, Loss>::initial_losses(const std::vector<policies::segment>& segments,
                                                                     double r) {
  std::vector<double> d;
  optim::adamw_config oc;
  owned_tensor<Backend> xt(be_, st_.type, sf_->feature_shape()), xs(be_, st_.type, sf_->feature_shape()),
      y(be_, st_.type, sf_->feature_shape());
  for (const auto& sg : segments) {
    if (r > 0) refresh(sg.first);
    const tensor x = prepare_input(sg.first, 0, r, xt.view(), xs.view());
    sf_->load(sf_->teacher_item(sf_->teacher_out(sg.last), 0), y.view());
    segment_trainer<Backend, loss_type> seg(be_, st_.config, sg.first, sg.last, st_.layout, st_.params, st_.type, oc,
                                            loss_, opt_.clip);
    if (opt_.fake_quant) seg.set_fake_quant(*opt_.fake_quant);
    d.push_back(seg.loss(x, y.view()));
    res_.flops += static_cast<double>(B_ * T_) * prune::layers_flops_per_token(st_.config, sg.first, sg.last, T_);
  }
  return d;
}

template <class Backend, class CachePolicy, class Loss>
nlohmann::json pipeline_run<Backend, CachePolicy, Loss>::segmentation_inputs() const {
  nlohmann::json j = nlohmann::json::object();
  if (const auto* d = sched_.layer_difficulty()) j["layer_difficulty"] = *d;
  return j;
}

template <class Backend, class CachePolicy, class Loss>
void pipeline_run<Backend, CachePolicy, Loss>::restore_segmentation_inputs(const nlohmann::json& in) {
  if (auto* d = sched_.layer_difficulty(); d && in.contains("layer_difficulty"))
    *d = in.at("layer_difficulty").get<std::vector<double>>();
}

template <class Backend, class CachePolicy, class Loss>
void pipeline_run<Backend, CachePolicy, Loss>::fill_segmentation_inputs() {
  if (auto* d = sched_.layer_difficulty(); d && d->empty()) {
    std::vector<policies::segment> layers;
    for (index_t l = 0; l < st_.config.n_layers(); ++l) layers.push_back({l, l + 1});
    *d = initial_losses(layers, 0.0);
    if (metrics_.is_open()) {
      nlohmann::json rec;
      rec["event"] = "layer_difficulty";
      rec["difficulty"] = *d;
      metrics_.write(rec);
    }
  }
  sched_.fill_batch_shape(B_, T_, st_.type, 3 * feed_type::set_count(upload_ahead()));
}

template <class Backend, class CachePolicy, class Loss>
tensor pipeline_run<Backend, CachePolicy, Loss>::prepare_input(index_t a, index_t k, double r, const tensor& xt,
                                                       const tensor& xs) {
  if (r < 1) sf_->load(sf_->teacher_item(sf_->teacher_in(a), k), xt);
  if (r > 0) sf_->load(sf_->student_item(a, k), xs);
  if (r <= 0) return xt;
  if (r >= 1) return xs;
  ops::mix(be_, xt, xt, xs, r);
  return xt;
}

template <class Backend, class CachePolicy, class Loss>
visit_report pipeline_run<Backend, CachePolicy, Loss>::start_report(std::size_t p, index_t pos, index_t k,
                                                                    const std::vector<double>& difficulty, long s0) const {
  const auto& ph = phases_[p];
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
  if (s0 > 0 && !partial_.is_null()) {
    const auto prev = visit_report::from_json(partial_);
    rep.loss_first = prev.loss_first;
    rep.student_fraction_first = prev.student_fraction_first;
    rep.seconds = prev.seconds;
    rep.stall_seconds = prev.stall_seconds;
  }
  return rep;
}

template <class Backend, class CachePolicy, class Loss>
void pipeline_run<Backend, CachePolicy, Loss>::visit(std::size_t p, index_t pos, const std::vector<index_t>& order,
                                                     const std::vector<double>& difficulty, long s0) {
  const auto& ph = phases_[p];
  const index_t k = order[static_cast<std::size_t>(pos)];
  const auto sg = ph.segments[static_cast<std::size_t>(k)];
  const index_t g = global_visit(p, pos);
  long planned = plan_.visit_steps[static_cast<std::size_t>(g)];
  const bool secs = opt_.total.unit == budget_unit::seconds;
  visit_report rep = start_report(p, pos, k, difficulty, s0);

  std::vector<double> share(static_cast<std::size_t>(planned));
  for (long s = 0; s < planned; ++s)
    share[static_cast<std::size_t>(s)] = sched_.student_fraction(ph, static_cast<index_t>(s));
  if (std::any_of(share.begin(), share.end(), [](double r) { return r > 0; })) refresh(sg.first);

  // The deadline of this visit under a seconds budget: an equal share of the layer-wise time left.
  double deadline = 0;
  if (secs) {
    const index_t left = visits_total() - g;
    deadline = elapsed() + std::max(0.0, layerwise_seconds() - elapsed()) / static_cast<double>(std::max<index_t>(1, left));
    if (elapsed() >= layerwise_seconds()) {
      res_.budget_exhausted = true;  // this visit and the ones after it get no steps
      layerwise_spent_ = true;
      return;
    }
  }

  // Compute memory of this visit, measured by the tracker from here.
  fold_peaks();
  const std::size_t base = memory().current(Backend::memory_tier);
  memory().reset_peak(Backend::memory_tier);

  optim::adamw_config oc;
  oc.lr = opt_.lr;
  oc.weight_decay = opt_.weight_decay;
  segment_trainer<Backend, loss_type> seg(be_, st_.config, sg.first, sg.last, st_.layout, st_.params, st_.type, oc,
                                          loss_, opt_.clip);
  if (opt_.fake_quant) seg.set_fake_quant(*opt_.fake_quant);
  if (s0 > 0) read_segment_state(*resumed_from_, seg, s0);
  optim::cosine_schedule sched{opt_.lr, opt_.min_lr, 0, std::max(1L, planned)};
  timer vt, estimate;  // vt restarts at each checkpoint; estimate times the visit's first steps
  double stall = 0;
  {
    feed_type fd(be_, *cache_, *sf_, sg.first, sg.last, s0, planned, share, opt_.prefetch, upload_ahead(), st_.type,
                 opt_.running_batches ? res_.segment_steps - s0 : 0);
    for (long s = s0; s < planned; ++s) {
      if (opt_.halt_after_steps > 0 && steps_this_process_ >= opt_.halt_after_steps) throw pipeline_halted{};
      if (secs) {
        if (elapsed() >= deadline) break;
        if (s == s0 + 3) {
          planned = steps_within_seconds(planned, s0 + 3, 3, estimate.seconds(), deadline - elapsed());
          sched.total_steps = std::max(1L, planned);
          fd.end_at(planned);
        }
      }
      const double r = share[static_cast<std::size_t>(s)];
      const feature_set<Backend>& in = fd.at(s);
      tensor x = r <= 0 ? in.xt.view() : in.xs.view();
      if (r > 0 && r < 1) {
        ops::mix(be_, in.xt.view(), in.xt.view(), in.xs.view(), r);
        x = in.xt.view();
      }
      const double lr = sched.lr(s + 1);
      double loss = 0;
      try {
        loss = seg.step(x, in.y.view(), lr);
      } catch (const lwcl::error& e) {
        // Which cached features the step read: its input and its target, by boundary and batch.
        const char* input = r <= 0 ? "the teacher's" : r >= 1 ? "the student's" : "a mix of the teacher's and the student's";
        fail("pipeline: phase ", p, ", segment [", sg.first, ", ", sg.last, "), step ", s + 1, " (global step ",
             res_.segment_steps + 1, "): ", e.what(), " (input: ", input, " features at boundary ", sg.first,
             ", target: the teacher's at boundary ", sg.last, ", batch ", fd.batch_of(s), ")");
      }
      if (s == 0) {
        rep.loss_first = loss;
        rep.student_fraction_first = r;
      }
      rep.loss_last = loss;
      rep.student_fraction_last = r;
      rep.steps = s + 1;
      record_step(rep, p, pos, fd.batch_of(s), loss, lr, fd.stats().staging_bytes);
      if (opt_.checkpoint_every > 0 && (s + 1) % opt_.checkpoint_every == 0 && s + 1 < planned) {
        rep.planned_steps = planned;
        rep.seconds += vt.seconds();
        rep.stall_seconds += fd.stats().stall_seconds - stall;
        stall = fd.stats().stall_seconds;
        vt = timer();
        save_checkpoint(p, pos, s + 1, order, difficulty, &seg, rep);
      }
    }
    const auto ps = fd.stats();
    rep.stall_seconds += ps.stall_seconds - stall;
    rep.staging_bytes = ps.staging_bytes;
    rep.compute_bytes = seg.resident_bytes() + 3 * fd.sets() * sf_->feature_bytes();
  }
  rep.planned_steps = planned;
  rep.seconds += vt.seconds();
  finish_visit(rep, seg, p, pos, order, difficulty, base);
}

template <class Backend, class CachePolicy, class Loss>
void pipeline_run<Backend, CachePolicy, Loss>::record_step(const visit_report& rep, std::size_t p, index_t pos,
                                                           index_t batch, double loss, double lr, std::size_t staging) {
  const bool secs = opt_.total.unit == budget_unit::seconds;
  ++res_.segment_steps;
  ++steps_this_process_;
  res_.tokens += B_ * T_;
  res_.flops += 3 * static_cast<double>(B_ * T_) * prune::layers_flops_per_token(st_.config, rep.first, rep.last, T_);
  metrics_.write({{"global_step", res_.segment_steps},
                  {"phase", p},
                  {"position", pos},
                  {"first", rep.first},
                  {"last", rep.last},
                  {"step", rep.steps},
                  {"batch", batch},
                  {"loss", loss},
                  {"student_fraction", rep.student_fraction_last},
                  {"lr", lr},
                  {"seconds", elapsed()},
                  {"memory", memory_sample(staging)}});
  if (bar_)
    bar_->update(secs ? static_cast<long>(elapsed()) : res_.segment_steps,
                 "phase " + std::to_string(p) + " layers " + std::to_string(rep.first) + "-" + std::to_string(rep.last - 1));
}

template <class Backend, class CachePolicy, class Loss>
void pipeline_run<Backend, CachePolicy, Loss>::finish_visit(visit_report& rep, segment_trainer<Backend, loss_type>& seg,
                                                            std::size_t p, index_t pos, const std::vector<index_t>& order,
                                                            const std::vector<double>& difficulty, std::size_t base) {
  const bool secs = opt_.total.unit == budget_unit::seconds;
  rep.tracker_bytes = memory().peak(Backend::memory_tier) - base;
  res_.step_seconds += rep.seconds;
  res_.stall_seconds += rep.stall_seconds;
  res_.peak_compute_bytes = std::max(res_.peak_compute_bytes, rep.compute_bytes);
  peak_staging_ = std::max(peak_staging_, rep.staging_bytes);
  if (secs && elapsed() >= layerwise_seconds()) layerwise_spent_ = true;
  if (secs && rep.steps < rep.planned_steps) res_.budget_exhausted = true;

  if (rep.steps > 0) {  // a visit cut before its first step changed nothing
    seg.write_back(st_.layout, st_.params);
    sf_->trained(rep.first, rep.last);  // the features above the segment are stale now
  }
  res_.visits.push_back(rep);
  if (rep.steps > 0) probe_quality();
  partial_ = nlohmann::json();
  if (metrics_.is_open()) {
    auto j = rep.to_json();
    j["event"] = "visit";
    metrics_.write(j);
  }
  save_checkpoint(p, pos + 1, 0, order, difficulty, nullptr, rep);
}

template <class Backend, class CachePolicy, class Loss>
nlohmann::json pipeline_run<Backend, CachePolicy, Loss>::memory_sample(std::size_t staging) const {
  constexpr tier ct = Backend::memory_tier;
  const std::size_t tracked = memory().current(ct);
  const std::size_t cache = cache_->stats().store.stored_bytes;
  std::size_t other = 0;
  if (store_type::memory_tier == ct) other += cache;
  if (staging_type::memory_tier == ct) other += staging;
  return {{"compute", tracked > other ? tracked - other : 0}, {"cache", cache}, {"staging", staging}, {"tracker", tracked},
          {"resident", process_resident_bytes()}};
}

template <class Backend, class CachePolicy, class Loss>
void pipeline_run<Backend, CachePolicy, Loss>::final_kd(const teacher_source& load_teacher) {
  timer t;
  auto loaded = load_teacher();
  check(loaded != nullptr, "pipeline: the teacher source returned no model");
  auto* teacher = dynamic_cast<net_type*>(loaded.get());
  check(teacher != nullptr, "pipeline: the final KD stage distils logits; the teacher is an encoder, which has none");
  teacher->freeze();
  auto net = st_.to_transformer(be_);
  fold_peaks();  // end-to-end KD restarts the tracker's peak of the compute tier
  e2e_options eo;
  eo.lr = opt_.kd_lr > 0 ? opt_.kd_lr : opt_.lr;
  eo.min_lr = opt_.kd_lr > 0 ? opt_.kd_lr / 10 : opt_.min_lr;
  eo.weight_decay = opt_.weight_decay;
  eo.temperature = opt_.kd_temperature;
  eo.clip = opt_.clip;
  eo.progress_bar = opt_.progress_bar;
  if (opt_.total.unit == budget_unit::seconds) {
    eo.steps = opt_.max_visit_steps;
    eo.time_budget_seconds = std::max(1e-3, opt_.total.amount - elapsed());
    eo.min_steps = 1;  // a closing stage asked for runs, even after visits that ran late on a loaded machine
  } else {
    eo.steps = plan_.kd_steps;
  }
  if (opt_.probe) {
    eo.probe = [&] { return opt_.probe(student_state::of(*net)); };
    eo.eval_every = opt_.eval_every;
    eo.probe_start = false;  // the student the last visit left is on the curve already
  }
  const double wall0 = elapsed(), cpu0 = cpu_now(), flops0 = res_.flops;
  const long step0 = res_.segment_steps;
  const auto r = train_e2e_kd(*teacher, *net, loader_, B_, T_, eo, nullptr);
  // The stage's curve at the run's cost so far; its evaluations' time leaves the run's clocks.
  for (std::size_t i = 0; i < r.curve.size(); ++i) {
    auto q = r.curve[i];
    q.step += step0;
    q.seconds += wall0;
    q.cpu_seconds += cpu0;
    q.flops += flops0;
    res_.curve.push_back(q);
    if (metrics_.is_open()) metrics_.write(eval_record(q));
  }
  eval_wall_ += r.eval_seconds;
  eval_cpu_ += r.eval_cpu_seconds;
  res_.eval_seconds += r.eval_seconds;
  st_ = student_state::of(*net);
  res_.kd_steps = r.steps;
  res_.tokens += r.tokens;
  res_.flops += r.flops;
  res_.kd_peak_compute_bytes = r.peak_compute_bytes;
  res_.kd_seconds = t.seconds() - r.eval_seconds;
  res_.budget_exhausted = res_.budget_exhausted || r.budget_exhausted;
  if (metrics_.is_open()) {
    nlohmann::json rec;
    rec["event"] = "final_kd";
    rec["steps"] = r.steps;
    rec["loss_first"] = r.loss_first;
    rec["loss_last"] = r.loss_last;
    rec["lr"] = eo.lr;
    rec["min_lr"] = eo.min_lr;
    rec["peak_compute_bytes"] = r.peak_compute_bytes;
    rec["seconds"] = r.seconds;
    metrics_.write(rec);
  }
  save_checkpoint(phases_.size(), 0, 0, {}, {}, nullptr, visit_report{}, true);
}

template <class Backend, class CachePolicy, class Loss>
void pipeline_run<Backend, CachePolicy, Loss>::save_checkpoint(std::size_t phase, index_t position, long visit_step,
                                                       const std::vector<index_t>& order,
                                                       const std::vector<double>& difficulty,
                                                       const segment_trainer<Backend, loss_type>* seg,
                                                       const visit_report& partial, bool kd_done) {
  checkpoint_state c;
  c.metrics_records = metrics_.records();
  c.phase = phase;
  c.position = position;
  c.visit_step = visit_step;
  c.order = order;
  c.difficulty = difficulty;
  c.kd_done = kd_done;
  if (seg) c.partial = partial.to_json();
  c.totals = res_;
  c.totals.cpu_seconds = cpu_now();
  c.seconds = elapsed();
  c.peak_staging_bytes = peak_staging_;
  c.student_parameters = st_.params.size();
  c.fingerprint = fingerprint_;
  c.segmentation_inputs = segmentation_inputs();
  sf_->save_versions(c.feature_versions);
  const auto name = checkpoint_name(res_.segment_steps, phase, position);
  write_checkpoint(checkpoints_.start(name), c, st_.params, seg);
  checkpoints_.commit(name);  // `latest`, written last; the newest two checkpoints remain
}

template <class Backend, class CachePolicy, class Loss>
checkpoint_state pipeline_run<Backend, CachePolicy, Loss>::load_checkpoint(const std::filesystem::path& dir) {
  auto c = read_checkpoint(dir, st_.params, fingerprint_);
  static_cast<run_totals&>(res_) = c.totals;
  cpu_before_ = c.totals.cpu_seconds;
  sf_->restore_versions(c.feature_versions);
  partial_ = c.partial;
  peak_staging_ = c.peak_staging_bytes;
  elapsed_before_ = c.seconds;
  resumed_from_ = dir;
  return c;
}

template <class Backend, class CachePolicy, class Loss>
void pipeline_run<Backend, CachePolicy, Loss>::probe_quality() {
  if (!opt_.probe) return;
  curve_point q{res_.segment_steps + res_.kd_steps, elapsed(), cpu_now(), res_.flops, 0.0};
  const double wall0 = eval_wall_;
  q.ppl = run_probe([&] { return opt_.probe(st_); }, eval_wall_, eval_cpu_, "pipeline", q.step);
  res_.eval_seconds += eval_wall_ - wall0;
  res_.curve.push_back(q);
  if (metrics_.is_open()) metrics_.write(eval_record(q));
}

template <class Backend, class CachePolicy, class Loss>
void pipeline_run<Backend, CachePolicy, Loss>::refresh(index_t a) {
  const auto r = sf_->refresh(a);
  if (!r) return;
  res_.refresh_seconds += r->seconds;
  res_.flops += static_cast<double>(opt_.feature_batches * B_ * T_) *
                prune::layers_flops_per_token(st_.config, r->from, r->boundary, T_);
  if (metrics_.is_open()) {
    // Filled field by field: nvcc's front end rejects a nested braced list here.
    nlohmann::json rec;
    rec["event"] = "refresh";
    rec["boundary"] = r->boundary;
    rec["from"] = r->from;
    rec["version"] = r->version;
    rec["seconds"] = r->seconds;
    metrics_.write(rec);
  }
}

}  // namespace lwcl::distill
