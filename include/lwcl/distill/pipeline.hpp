#pragma once
// distill::pipeline<policy_set>: layer-wise curriculum recovery of a pruned student, driven by a policy
// bundle (DESIGN.md sections 1, 4 and 6). The segmentation policy cuts the student into segments, the
// curriculum turns them into phases (order x input schedule x growth, optionally closed by end-to-end
// logit KD), the cache policy holds the boundary features, the loss policy is each segment's local loss.
//
// A run: (1) a teacher pass caches the teacher's boundary features of `feature_batches` training
// batches, after which the teacher is released; (2) every phase visits its segments in the curriculum's
// order, and each visit trains one segment, alone in compute memory, on inputs mixed from teacher and
// student features by the input schedule, read from the cache by a prefetching thread pool; student
// features carry the version of the weights upstream and are recomputed when those change; (3) an
// optional final KD stage reloads the teacher. The run directory holds config.json, metrics.jsonl,
// checkpoints (a killed run resumes bitwise under step and token budgets), report.json (the result),
// student/ and the plots loss_curves.png, memory.png and cumulative_error.png.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/core/fs.hpp"
#include "lwcl/core/memory.hpp"
#include "lwcl/core/metrics.hpp"
#include "lwcl/core/progress.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/data/loader.hpp"
#include "lwcl/cache/feature_cache.hpp"
#include "lwcl/cache/prefetcher.hpp"
#include "lwcl/distill/e2e_kd.hpp"
#include "lwcl/distill/report.hpp"
#include "lwcl/distill/segment_trainer.hpp"
#include "lwcl/distill/student_state.hpp"
#include "lwcl/eval/cumulative_error.hpp"
#include "lwcl/eval/perplexity.hpp"
#include "lwcl/model/block_stack.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/model/layer_map.hpp"
#include "lwcl/model/layer_outputs.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/ops/elementwise.hpp"
#include "lwcl/optim/schedule.hpp"
#include "lwcl/policies/bundle.hpp"
#include "lwcl/policies/concepts.hpp"

namespace lwcl::distill {

// ---- budgets ---------------------------------------------------------------------------------------

enum class budget_unit { steps, tokens, seconds };

inline std::string_view budget_unit_name(budget_unit u) {
  switch (u) {
    case budget_unit::steps: return "steps";
    case budget_unit::tokens: return "tokens";
    case budget_unit::seconds: return "seconds";
  }
  return "?";
}

// What a whole recovery may spend: optimiser steps (segment steps, plus the final KD's), training tokens
// (steps x batch tokens), or wall-clock seconds (teacher pass included). Steps and tokens make a run
// deterministic; seconds make methods comparable on one machine.
struct budget {
  budget_unit unit = budget_unit::steps;
  double amount = 0;

  std::string str() const {
    std::ostringstream os;
    os << amount << ' ' << budget_unit_name(unit);
    return os.str();
  }
};

// "400", "steps:400", "tokens:2e6" or "seconds:90".
inline budget parse_budget(const std::string& text) {
  budget b;
  std::string number = text;
  if (const auto colon = text.find(':'); colon != std::string::npos) {
    const std::string unit = text.substr(0, colon);
    number = text.substr(colon + 1);
    if (unit == "steps") b.unit = budget_unit::steps;
    else if (unit == "tokens") b.unit = budget_unit::tokens;
    else if (unit == "seconds") b.unit = budget_unit::seconds;
    else fail("budget '", text, "': unknown unit '", unit, "', expected steps, tokens or seconds");
  }
  std::size_t used = 0;
  try {
    b.amount = std::stod(number, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  check(used == number.size() && !number.empty() && std::isfinite(b.amount) && b.amount > 0, "budget '", text,
        "': expected a positive number, optionally after steps:, tokens: or seconds:");
  return b;
}

// ---- options and results ----------------------------------------------------------------------------

struct pipeline_options {
  index_t feature_batches = 8;             // training batches whose boundary features are cached (cycled)
  budget total{budget_unit::steps, 400};   // the whole recovery
  double final_kd_share = 0.2;             // of the budget, when the curriculum closes with KD
  double lr = 1e-3, min_lr = 1e-4;         // cosine decay over each visit's steps
  double weight_decay = 0, clip = 1.0;
  double kd_temperature = 1.0;
  long checkpoint_every = 50;              // segment steps; a visit's end always checkpoints; 0: only those
  bool resume = true;                      // continue from <run>/checkpoints/latest when present
  cache::prefetch_options prefetch{1, 3};         // threads and ring beyond what a step holds (hold is set here)
  // Queue the copies of step s + 1's features to compute memory before step s runs, into a second set
  // of feature buffers, so that they overlap it (on a device backend: the copy stream). Unset: on
  // device backends only. Results are the same either way.
  std::optional<bool> upload_ahead;
  long max_visit_steps = 20000;            // the planned length of a visit under a seconds budget
  bool progress_bar = true;
  std::FILE* log = stdout;
  long halt_after_steps = 0;               // > 0: throw pipeline_halted after that many segment steps (tests)
  bool save_student = true;                // write <run>/student (HF safetensors + config.json)
  bool plots = true;                       // write <run>/loss_curves.png, memory.png (and cumulative_error.png)
  // Evaluation after training, on held-out tokens (empty: none): validation perplexity (windows of the
  // loader's sequence length, stride equal to it) and the cumulative error curve of the student before
  // and after recovery on the first eval_batches batches of them; both go into report.json.
  std::vector<std::int32_t> validation_ids;
  index_t eval_batches = 2;
  // Names written for a slot instead of the bundle's policy name, in config.json, report.json and the
  // checkpoint fingerprint: the pipeline never runs the pruning slot, so a program that recovers a
  // student pruned elsewhere labels the run with the criterion that really pruned it (experiments/recover).
  std::map<std::string, std::string> policy_labels;
};

struct pipeline_halted {};

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

inline std::string checkpoint_name(long global_step, std::size_t phase, index_t position) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "ck_%09ld_p%03zu_v%04lld", global_step, phase, static_cast<long long>(position));
  return buf;
}

}  // namespace pipeline_detail

// ---- the pipeline -----------------------------------------------------------------------------------

template <class PolicySet, class Backend = typename PolicySet::backend_type>
class pipeline {
 public:
  using segmentation_type = typename PolicySet::segmentation_type;
  using cache_policy_type = typename PolicySet::cache_type;
  using loss_type = typename PolicySet::loss_type;
  using store_type = typename cache_policy_type::store;
  using staging_type = typename pipeline_detail::staging_of<cache_policy_type>::type;
  // A store in the backend's device memory is read in place (copied device to device on the compute
  // stream) rather than through the prefetcher's host staging ring.
  static constexpr bool device_resident = Backend::is_device && store_type::memory_tier == lwcl::tier::device;
  using net_type = model::transformer<Backend>;
  // Loads (or builds) the teacher; called for the teacher pass and the final KD stage only, and the
  // model is released after each, so it is never resident while segments train.
  using teacher_source = std::function<std::unique_ptr<net_type>()>;

  static_assert(policies::segmentation_policy<typename PolicySet::segmentation_type>);
  static_assert(policies::curriculum_policy<typename PolicySet::curriculum_type>);
  static_assert(policies::cache_policy<cache_policy_type>);
  static_assert(loss_type::target == policies::loss_target::features,
                "pipeline: the loss slot is each segment's local loss on boundary features; pick mse, nmse, cosine "
                "or a weighted_sum of them (logit_kl belongs to the final KD stage)");
  static_assert(std::is_same_v<Backend, typename PolicySet::backend_type>,
                "pipeline<policy_set, Backend>: Backend must be the backend the bundle's backend slot names");

  pipeline(Backend& be, PolicySet policies, pipeline_options opt = {})
      : be_(be), pol0_(policies), pol_(std::move(policies)), opt_(std::move(opt)) {}

  const pipeline_options& options() const { return opt_; }
  const PolicySet& policies() const { return pol_; }

  // Recovers `student` (updated in place) towards the teacher. `boundaries` is the layer map: student
  // layer i replaces teacher layers [boundaries[i], boundaries[i + 1]), with boundaries[0] = 0 (both
  // read the same embeddings) and boundaries[L] the teacher's layer count (both feed the same final
  // norm and head); {0, 1, ..., L} after width pruning, prune::boundary_map after layer removal.
  // Training batches come from `loader`.
  pipeline_result run(const teacher_source& load_teacher, student_state& student, const std::vector<index_t>& boundaries,
                      const data::batch_loader& loader, const std::filesystem::path& run_dir) {
    namespace fs = std::filesystem;
    pol_ = pol0_;  // runtime inputs measured by an earlier run() are not reused
    validate(student, boundaries, loader);
    const student_state initial = opt_.validation_ids.empty() ? student_state{} : student;
    st_ = &student;
    tlo_ = boundaries;
    B_ = loader.batch_size();
    T_ = loader.seq_len();
    clock_ = timer();
    res_ = pipeline_result{};
    layerwise_spent_ = false;
    reset_versions(student.config.n_layers());
    elapsed_before_ = 0;
    peak_staging_ = 0;
    partial_ = nlohmann::json();
    res_.policies = policy_names();
    res_.total = opt_.total;

    std::error_code ec;
    fs::create_directories(run_dir / "checkpoints", ec);
    check(!ec, "pipeline: cannot create the run directory '", run_dir.string(), "': ", ec.message());
    write_config(run_dir, student);
    cache_ = pol_.cache.open(run_dir);

    // Where to start: a checkpoint, or the beginning.
    const fs::path ckdir = run_dir / "checkpoints";
    fingerprint_ = fingerprint(loader);
    std::optional<nlohmann::json> state;
    if (opt_.resume && fs::exists(ckdir / "latest")) {
      state = load_checkpoint(ckdir);
    } else {
      // A fresh start: whatever an earlier run left in a directory-backed cache is not trusted.
      fs::remove(ckdir / "latest", ec);
      for (const auto& k : cache_->keys()) cache_->erase(k);
    }
    const long step0 = state ? state->at("global_step").get<long>() : 0;
    if (state && state->contains("metrics_records"))
      truncate_metrics_records(run_dir / "metrics.jsonl", state->at("metrics_records").get<std::size_t>());
    else
      truncate_metrics(run_dir / "metrics.jsonl", "global_step", step0);
    metrics_.open((run_dir / "metrics.jsonl").string(), state.has_value());

    memory().reset_peaks();
    run_peak_.clear();

    teacher_pass(load_teacher, loader);
    if (state) restore_segmentation_inputs(*state);
    fill_segmentation_inputs();

    const auto stages = policies::segmentation_stages(pol_.segmentation, student.config);
    phases_ = policies::curriculum_phases(pol_.curriculum, stages, student.config.n_layers());
    res_.phases = phases_.size();
    plan_budget();

    std::size_t phase0 = 0;
    index_t pos0 = 0;
    long visit_step0 = 0;
    std::vector<index_t> order0;
    std::vector<double> difficulty0;
    bool kd_done = false;
    if (state) {
      phase0 = state->at("phase");
      pos0 = state->at("position");
      visit_step0 = state->at("visit_step");
      order0 = state->at("order").get<std::vector<index_t>>();
      difficulty0 = state->at("difficulty").get<std::vector<double>>();
      kd_done = state->at("kd_done");
      res_.resumed = true;
      if (opt_.log)
        std::fprintf(opt_.log, "pipeline: resuming at phase %zu, visit %lld, step %ld (%ld segment steps done)\n", phase0,
                     static_cast<long long>(pos0), visit_step0, step0);
    }
    steps_this_process_ = 0;

    if (opt_.progress_bar) {
      const bool secs = opt_.total.unit == budget_unit::seconds;
      bar_ = std::make_unique<progress>("lwcl", secs ? static_cast<long>(opt_.total.amount) : total_planned_steps());
      if (!secs) bar_->update(res_.segment_steps);
    }

    for (std::size_t p = phase0; p < phases_.size(); ++p) {
      const auto& ph = phases_[p];
      std::vector<index_t> order;
      std::vector<double> difficulty;
      if (state && p == phase0 && !order0.empty()) {
        order = order0;
        difficulty = difficulty0;
      } else {
        if (ph.needs_difficulty) difficulty = measure_difficulty(ph);
        order = policies::visiting_order(pol_.curriculum, ph, difficulty);
      }
      const index_t first_pos = state && p == phase0 ? pos0 : 0;
      for (index_t pos = first_pos; pos < static_cast<index_t>(order.size()); ++pos) {
        const long s0 = state && p == phase0 && pos == pos0 ? visit_step0 : 0;
        visit(run_dir, p, pos, order, difficulty, s0, ckdir);
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

    if (pol_.curriculum.has_final_kd() && !kd_done && kd_steps_planned_ > 0) {
      if (opt_.total.unit == budget_unit::seconds && elapsed() >= opt_.total.amount)
        res_.budget_exhausted = true;  // the teacher pass and the visits took the whole budget
      else
        final_kd(load_teacher, loader, ckdir);
    }

    for (int t = 0; t < tier_count; ++t) {
      const auto tt = static_cast<tier>(t);
      res_.tracker_peak_bytes[std::string(tier_name(tt))] = std::max(run_peak_[t], memory().peak(tt));
    }
    res_.cache = cache_->stats();
    res_.peak_cache_bytes = static_cast<std::size_t>(res_.cache.store.peak_stored_bytes) + peak_staging_;
    res_.seconds = elapsed_before_ + clock_.seconds();
    cache_.reset();
    metrics_.close();
    if (opt_.save_student) {
      auto net = student.to_transformer(be_);
      const fs::path dir = run_dir / "student";
      fs::remove_all(dir, ec);
      checkpoint::save_hf(*net, dir.string());
    }
    if (!opt_.validation_ids.empty()) evaluate(load_teacher, initial);
    write_text_atomic(run_dir / "report.json", res_.to_json().dump(2) + "\n");
    if (opt_.plots) {
      plot_pipeline_metrics(run_dir / "metrics.jsonl", run_dir);
      if (!res_.cumulative_error.empty())
        plot_cumulative_error({{"before recovery", res_.cumulative_error_before}, {"after", res_.cumulative_error}},
                              run_dir / "cumulative_error.png");
    }
    return res_;
  }

 private:
  // What must not change between a run and its resumption: the batch shape, the cached batches (their
  // tokens, hashed), the layer map, the budget and the policies.
  nlohmann::json fingerprint(const data::batch_loader& loader) const {
    std::uint64_t h = 1469598103934665603ULL;  // FNV-1a over the feature batches' token ids
    std::vector<std::int32_t> ids, targets;
    for (index_t b = 0; b < opt_.feature_batches; ++b) {
      loader.batch(static_cast<std::uint64_t>(b), ids, targets);
      for (std::int32_t id : ids)
        for (int k = 0; k < 4; ++k) {
          h ^= (static_cast<std::uint32_t>(id) >> (8 * k)) & 0xffu;
          h *= 1099511628211ULL;
        }
    }
    return {{"batch", B_},
            {"seq_len", T_},
            {"feature_batches", opt_.feature_batches},
            {"feature_tokens_hash", std::to_string(h)},
            {"boundaries", tlo_},
            {"budget", opt_.total.str()},
            {"final_kd_share", opt_.final_kd_share},
            {"policies", policy_names()},
            {"dtype", std::string(dtype_name(st_->type))}};
  }

  // The bundle's slot -> policy name, with pipeline_options::policy_labels applied.
  std::map<std::string, std::string> policy_names() const {
    auto names = describe(pol_);
    for (const auto& [slot, label] : opt_.policy_labels) {
      check(names.count(slot) == 1, "pipeline: policy_labels names slot '", slot,
            "', expected one of segmentation, curriculum, pruning, cache, loss, backend");
      names[slot] = label;
    }
    return names;
  }

  // ---- evaluation ----
  void evaluate(const teacher_source& load_teacher, const student_state& initial) {
    auto net = st_->to_transformer(be_);
    const auto p = eval::perplexity(*net, opt_.validation_ids, T_, T_, "validation");
    res_.val_ppl = p.perplexity();
    res_.val_protocol = p.protocol();
    std::vector<std::vector<std::int32_t>> batches;
    for (index_t k = 0; k < opt_.eval_batches; ++k)
      batches.emplace_back(opt_.validation_ids.begin() + k * B_ * T_, opt_.validation_ids.begin() + (k + 1) * B_ * T_);
    auto teacher = load_teacher();
    check(teacher != nullptr, "pipeline: the teacher source returned no model");
    res_.cumulative_error = eval::cumulative_error(*teacher, *net, tlo_, batches, B_, T_);
    net.reset();
    auto before = initial.to_transformer(be_);
    res_.cumulative_error_before = eval::cumulative_error(*teacher, *before, tlo_, batches, B_, T_);
  }

  // ---- set-up ----
  void validate(const student_state& s, const std::vector<index_t>& tlo, const data::batch_loader& loader) const {
    const index_t L = s.config.n_layers();
    check(static_cast<index_t>(s.params.size()) == s.layout.numel(), "pipeline: the student holds ", s.params.size(),
          " parameters for a layout of ", s.layout.numel());
    model::check_boundary_map(tlo, L, -1, "pipeline");
    check(cache::is_feature_dtype(s.type), "pipeline: the student trains in ", dtype_name(s.type),
          ", expected f32, bf16 or f64 (the feature cache's dtypes)");
    check(opt_.feature_batches >= 1, "pipeline: feature_batches is ", opt_.feature_batches, ", expected at least 1");
    check(opt_.total.amount > 0 && std::isfinite(opt_.total.amount), "pipeline: the budget is ", opt_.total.str(),
          ", expected a positive amount");
    check(opt_.final_kd_share >= 0 && opt_.final_kd_share < 1, "pipeline: final_kd_share is ", opt_.final_kd_share,
          ", expected a share in [0, 1)");
    check(opt_.checkpoint_every >= 0, "pipeline: checkpoint_every is ", opt_.checkpoint_every, ", expected >= 0");
    check(loader.batch_size() > 0 && loader.seq_len() > 0, "pipeline: the loader has no batch shape");
    if (!opt_.validation_ids.empty()) {
      const index_t need = opt_.eval_batches * loader.batch_size() * loader.seq_len();
      check(opt_.eval_batches >= 1 && static_cast<index_t>(opt_.validation_ids.size()) >= need, "pipeline: ",
            opt_.validation_ids.size(), " validation tokens, expected at least eval_batches (", opt_.eval_batches,
            ") batches of ", loader.batch_size(), " x ", loader.seq_len(), " = ", need);
    }
  }

  void write_config(const std::filesystem::path& run_dir, const student_state& s) const {
    nlohmann::json j;
    j["policies"] = policy_names();
    j["budget"] = {{"unit", budget_unit_name(opt_.total.unit)}, {"amount", opt_.total.amount}};
    j["options"] = {{"feature_batches", opt_.feature_batches}, {"final_kd_share", opt_.final_kd_share},
                    {"lr", opt_.lr},
                    {"min_lr", opt_.min_lr},
                    {"weight_decay", opt_.weight_decay},
                    {"clip", opt_.clip},
                    {"kd_temperature", opt_.kd_temperature},
                    {"checkpoint_every", opt_.checkpoint_every},
                    {"prefetch_threads", opt_.prefetch.threads},
                    {"prefetch_ring", opt_.prefetch.ring},
                    {"batch", B_},
                    {"seq_len", T_}};
    j["student"] = {{"family", std::string(model::family_name(s.config.fam))},
                    {"layers", s.config.n_layers()},
                    {"d_model", s.config.d_model},
                    {"dtype", std::string(dtype_name(s.type))},
                    {"boundaries", tlo_}};
    write_text_atomic(run_dir / "config.json", j.dump(2) + "\n");
  }

  // ---- features ----
  index_t C() const { return st_->config.d_model; }
  shape feature_shape() const { return {B_, T_, C()}; }
  std::size_t feature_bytes() const { return static_cast<std::size_t>(B_ * T_ * C()) * dtype_size(st_->type); }
  // The teacher boundary where a student boundary's feature is learned from.
  index_t teacher_in(index_t a) const { return tlo_[static_cast<std::size_t>(a)]; }
  index_t teacher_out(index_t b) const { return tlo_[static_cast<std::size_t>(b)]; }
  // The weights version of the student feature at boundary a (the output of layers [0, a)): the newest
  // version among those layers, 0 while none has been trained.
  std::uint64_t version_at(index_t a) const {
    std::uint64_t v = 0;
    for (index_t l = 0; l < a; ++l) v = std::max(v, layer_version_[static_cast<std::size_t>(l)]);
    return v;
  }
  // The key and expected version of the student's input feature at boundary a: the student's own
  // embedding output equals the teacher's (pruning keeps the embeddings), so boundary 0 is read there.
  cache::prefetch_item student_item(index_t a, index_t batch) const {
    if (a == 0) return cache::prefetch_item({0, cache::source::teacher, batch});
    return cache::prefetch_item({a, cache::source::student, batch}, version_at(a));
  }
  cache::prefetch_item teacher_item(index_t boundary, index_t batch) const { return cache::prefetch_item({boundary, cache::source::teacher, batch}); }

  // Host bytes of the feature under `it`, copied into `dst` in backend memory.
  void load_feature(const cache::prefetch_item& it, const tensor& dst) {
    host_.resize(feature_bytes());
    cache_->read_raw(it.key, std::span<std::byte>(host_.data(), host_.size()), it.expected_version);
    be_.from_host(dst.data, host_.data(), host_.size());
  }
  void put_feature(const cache::feature_key& k, const tensor& src, std::uint64_t version) {
    host_.resize(feature_bytes());
    be_.to_host(host_.data(), src.data, host_.size());
    cache_->put(k, tensor(host_.data(), st_->type, feature_shape()), version);
  }

  std::vector<index_t> teacher_boundaries() const {
    return tlo_;  // strictly increasing, from 0
  }

  // Caches the teacher's boundary features of batches 0 .. feature_batches - 1 that the store does not
  // hold yet (a disk store reopened by a resumed run holds them all), then releases the teacher.
  void teacher_pass(const teacher_source& load_teacher, const data::batch_loader& loader) {
    timer t;
    const auto wanted = teacher_boundaries();
    std::unique_ptr<net_type> teacher;
    std::vector<std::int32_t> ids, targets;
    for (index_t b = 0; b < opt_.feature_batches; ++b) {
      bool have = true;
      for (index_t tb : wanted) {
        const auto m = cache_->find_meta({tb, cache::source::teacher, b});
        have = have && m && m->shape == feature_shape() && m->type == st_->type;
      }
      if (have) continue;
      if (!teacher) {
        teacher = load_teacher();
        check(teacher != nullptr, "pipeline: the teacher source returned no model");
        const auto& tc = teacher->config();
        check(tc.d_model == C(), "pipeline: teacher width ", tc.d_model, " != student width ", C());
        model::check_boundary_map(tlo_, st_->config.n_layers(), tc.n_layers(), "pipeline");
        check(teacher->type() == st_->type, "pipeline: the teacher is ", dtype_name(teacher->type()), ", the student ",
              dtype_name(st_->type), "; features are cached in one dtype");
        res_.teacher_loaded = true;
      }
      loader.batch(static_cast<std::uint64_t>(b), ids, targets);
      model::for_each_layer_output(
          *teacher, ids, B_, T_,
          [&](index_t boundary, const tensor& h) {
            if (std::binary_search(wanted.begin(), wanted.end(), boundary)) put_feature({boundary, cache::source::teacher, b}, h, 0);
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

  // The student's feature at boundary a for every cached batch, with the current weights: recomputed
  // from the nearest boundary below whose features are current (boundary 0 always is).
  void refresh_student(index_t a) {
    if (a == 0) return;
    auto current = [&](index_t b) {
      if (b == 0) return true;
      const std::uint64_t v = version_at(b);
      for (index_t k = 0; k < opt_.feature_batches; ++k) {
        const auto m = cache_->find_meta({b, cache::source::student, k});
        if (!m || m->version != v) return false;
      }
      return true;
    };
    if (current(a)) return;
    timer t;
    index_t from = a - 1;
    while (!current(from)) --from;
    tensor_layout lay;
    model::add_stack_params(lay, st_->config, from, a);
    buffer<Backend> params(be_, static_cast<std::size_t>(lay.numel()) * dtype_size(st_->type));
    be_.fill_zero(params.data(), params.bytes());
    ops::dispatch_float("pipeline", st_->type, [&](auto z) {
      using E = decltype(z);
      std::vector<E> host(static_cast<std::size_t>(lay.numel()), E(0));
      for (const auto& e : lay.entries()) {
        const auto& src = st_->layout.find(e.name);
        for (index_t i = 0; i < e.shape.numel(); ++i)
          host[static_cast<std::size_t>(e.offset + i)] = static_cast<E>(st_->params[static_cast<std::size_t>(src.offset + i)]);
      }
      be_.from_host(params.data(), host.data(), params.bytes());
    });
    model::block_stack<Backend> stack(be_, st_->config, from, a, lay, params.data(), nullptr, st_->type);
    owned_tensor<Backend> x(be_, st_->type, feature_shape()), y(be_, st_->type, feature_shape());
    const std::uint64_t v = version_at(a);
    cache_->invalidate(a, cache::source::student);
    for (index_t k = 0; k < opt_.feature_batches; ++k) {
      load_feature(student_item(from, k), x.view());
      stack.forward(x.view(), y.view());
      put_feature({a, cache::source::student, k}, y.view(), v);
    }
    res_.refresh_seconds += t.seconds();
    if (metrics_.is_open())
      metrics_.write({{"event", "refresh"}, {"boundary", a}, {"from", from}, {"version", v}, {"seconds", t.seconds()}});
  }

  // ---- budget ----
  index_t visits_total() const {
    index_t n = 0;
    for (const auto& ph : phases_) n += static_cast<index_t>(ph.segments.size());
    return n;
  }
  void plan_budget() {
    const index_t V = visits_total();
    const bool kd = pol_.curriculum.has_final_kd();
    visit_steps_.assign(static_cast<std::size_t>(V), 0);
    kd_steps_planned_ = 0;
    if (opt_.total.unit == budget_unit::seconds) {
      kd_steps_planned_ = kd ? 1 : 0;  // the KD stage runs on its share of the time
      for (auto& s : visit_steps_) s = opt_.max_visit_steps;
      return;
    }
    const double per_step = opt_.total.unit == budget_unit::tokens ? static_cast<double>(B_ * T_) : 1.0;
    const long total = static_cast<long>(std::floor(opt_.total.amount / per_step));
    kd_steps_planned_ = kd ? static_cast<long>(std::llround(static_cast<double>(total) * opt_.final_kd_share)) : 0;
    const long layerwise = total - kd_steps_planned_;
    check(layerwise >= V, "pipeline: a budget of ", opt_.total.str(), " gives ", layerwise,
          " segment steps for ", V, " segment visits (", phases_.size(), " phases); give at least one step per visit");
    for (index_t g = 0; g < V; ++g)
      visit_steps_[static_cast<std::size_t>(g)] = layerwise / V + (g < layerwise % V ? 1 : 0);
  }
  long total_planned_steps() const {
    long n = 0;
    for (long s : visit_steps_) n += s;
    return n;
  }
  index_t global_visit(std::size_t phase, index_t pos) const {
    index_t g = 0;
    for (std::size_t p = 0; p < phase; ++p) g += static_cast<index_t>(phases_[p].segments.size());
    return g + pos;
  }
  double elapsed() const { return elapsed_before_ + clock_.seconds(); }
  double layerwise_seconds() const {
    return opt_.total.amount * (pol_.curriculum.has_final_kd() ? 1.0 - opt_.final_kd_share : 1.0);
  }

  // ---- difficulty ----
  // Each segment's local loss on batch 0 before training, on the inputs its first step would read.
  std::vector<double> measure_difficulty(const policies::curriculum_phase& ph) {
    const double r = policies::student_fraction(pol_.curriculum, ph, 0);
    auto d = initial_losses(ph.segments, r);
    if (metrics_.is_open()) metrics_.write({{"event", "difficulty"}, {"phase", ph.index}, {"difficulty", d}});
    return d;
  }
  std::vector<double> initial_losses(const std::vector<policies::segment>& segments, double r) {
    std::vector<double> d;
    optim::adamw_config oc;
    owned_tensor<Backend> xt(be_, st_->type, feature_shape()), xs(be_, st_->type, feature_shape()),
        y(be_, st_->type, feature_shape());
    for (const auto& sg : segments) {
      if (r > 0) refresh_student(sg.first);
      const tensor x = prepare_input(sg.first, 0, r, xt.view(), xs.view());
      load_feature(teacher_item(teacher_out(sg.last), 0), y.view());
      segment_trainer<Backend, loss_type> seg(be_, st_->config, sg.first, sg.last, st_->layout, st_->params, st_->type, oc,
                                              pol_.loss, opt_.clip);
      d.push_back(seg.loss(x, y.view()));
    }
    return d;
  }
  // The runtime inputs the run measured for the segmentation, for checkpoints: resuming must segment
  // exactly as the interrupted run did, not re-measure on weights trained since.
  nlohmann::json segmentation_inputs() const {
    nlohmann::json j = nlohmann::json::object();
    if constexpr (policies::needs_layer_difficulty<segmentation_type>) j["layer_difficulty"] = pol_.segmentation.layer_difficulty;
    return j;
  }
  void restore_segmentation_inputs(const nlohmann::json& state) {
    if constexpr (policies::needs_layer_difficulty<segmentation_type>) {
      const auto& in = state.at("segmentation_inputs");
      if (in.contains("layer_difficulty")) pol_.segmentation.layer_difficulty = in.at("layer_difficulty").get<std::vector<double>>();
    }
  }
  // Runtime inputs a segmentation policy reads from the run when left unset: balanced_difficulty's
  // per-layer difficulties (each layer's initial local loss on teacher inputs), memory_budget's batch
  // shape and dtype.
  void fill_segmentation_inputs() {
    auto& sp = pol_.segmentation;
    if constexpr (policies::needs_layer_difficulty<segmentation_type>) {
      if (sp.layer_difficulty.empty()) {
        std::vector<policies::segment> layers;
        for (index_t l = 0; l < st_->config.n_layers(); ++l) layers.push_back({l, l + 1});
        sp.layer_difficulty = initial_losses(layers, 0.0);
        if (metrics_.is_open()) {
          nlohmann::json rec;
          rec["event"] = "layer_difficulty";
          rec["difficulty"] = sp.layer_difficulty;
          metrics_.write(rec);
        }
      }
    }
    if constexpr (policies::needs_batch_shape<segmentation_type>) {
      if (sp.batch == 0 && sp.seq == 0) {
        sp.batch = B_;
        sp.seq = T_;
        sp.type = st_->type;
        sp.input_tensors = 3 * feature_sets();
      }
    }
  }
  // The input of a segment starting at boundary a for batch k at student share r, read directly
  // (outside the prefetcher): teacher features into xt, student features into xs, mixed into xt.
  tensor prepare_input(index_t a, index_t k, double r, const tensor& xt, const tensor& xs) {
    if (r < 1) load_feature(teacher_item(teacher_in(a), k), xt);
    if (r > 0) load_feature(student_item(a, k), xs);
    if (r <= 0) return xt;
    if (r >= 1) return xs;
    ops::mix(be_, xt, xt, xs, r);
    return xt;
  }

  // ---- a visit's features in compute memory ----

  // Feature sets a visit holds in compute memory: two when the next step's copies are queued ahead.
  index_t feature_sets() const { return !device_resident && opt_.upload_ahead.value_or(Backend::is_device) ? 2 : 1; }

  // One step's features: teacher input, student input, teacher output at the segment's boundaries.
  struct feature_set {
    owned_tensor<Backend> xt, xs, y;
  };

  // Feeds the steps of one visit, in order, their features in compute memory: the teacher input when
  // the student share r < 1, the student input when r > 0, and the teacher output. They come from the
  // prefetcher's staging ring by the backend's copy_async (the copy stream on a device), or for a store
  // on the device by a device-to-device copy. With upload_ahead the copies of step s + 1 are queued
  // into a second feature set before step s computes, so they overlap it. A staged buffer is given back
  // to the prefetcher (by a later next()) only after synchronize_copies, so no copy reads a buffer that
  // a worker is refilling.
  class feed {
   public:
    feed(pipeline& pl, index_t first, index_t last, long s0, long end, const std::vector<double>& share)
        : pl_(pl), first_(first), last_(last), end_(end), share_(share),
          ahead_(pl.feature_sets() == 2) {
      for (int i = 0; i < (ahead_ ? 2 : 1); ++i) {
        sets_.push_back(feature_set{{pl_.be_, pl_.st_->type, pl_.feature_shape()},
                                    {pl_.be_, pl_.st_->type, pl_.feature_shape()},
                                    {pl_.be_, pl_.st_->type, pl_.feature_shape()}});
      }
      if constexpr (!device_resident) {
        std::vector<cache::prefetch_item> plan;
        for (long s = s0; s < end; ++s) for_items(s, [&](const cache::prefetch_item& it, int) { plan.push_back(it); });
        cache::prefetch_options po = pl_.opt_.prefetch;
        po.hold = Backend::is_device ? 3 : 1;  // a host copy is finished when copy_async returns
        po.ring += po.hold - 1;
        pf_.emplace(*pl_.cache_, std::move(plan), po);
      }
      if (ahead_ && s0 < end_) upload(s0);
    }
    // Copies still queued read staging buffers and write feature sets that go with this object.
    ~feed() {
      try {
        pl_.be_.synchronize_copies();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "pipeline: waiting for feature copies failed: %s\n", e.what());
      }
    }
    feed(const feed&) = delete;
    feed& operator=(const feed&) = delete;

    // Step s's features, ready for the kernels queued next; called for s = s0, s0 + 1, ... in order.
    const feature_set& at(long s) {
      if (!ahead_) upload(s);
      pl_.be_.compute_wait_for_copies();
      if (ahead_ && s + 1 < end_) {
        pl_.be_.copies_wait_for_compute();  // the other set was read by step s - 1
        upload(s + 1);
      }
      return set_of(s);
    }
    // The visit stops before its planned end (a seconds budget's estimate): nothing is copied past it.
    void end_at(long end) { end_ = std::min(end_, end); }
    std::size_t set_count() const { return sets_.size(); }
    cache::prefetch_stats stats() const { return pf_ ? pf_->stats() : cache::prefetch_stats{}; }

   private:
    feature_set& set_of(long s) { return sets_[static_cast<std::size_t>(s) % sets_.size()]; }

    template <class F>
    void for_items(long s, F&& f) const {
      const index_t b = static_cast<index_t>(s % pl_.opt_.feature_batches);
      const double r = share_[static_cast<std::size_t>(s)];
      if (r < 1) f(pl_.teacher_item(pl_.teacher_in(first_), b), 0);
      if (r > 0) f(pl_.student_item(first_, b), 1);
      f(pl_.teacher_item(pl_.teacher_out(last_), b), 2);
    }

    void upload(long s) {
      pl_.be_.synchronize_copies();  // the buffers the next() calls below give back are copied out
      feature_set& fs = set_of(s);
      for_items(s, [&](const cache::prefetch_item& it, int which) {
        load(it, which == 0 ? fs.xt.view() : which == 1 ? fs.xs.view() : fs.y.view());
      });
    }

    void load(const cache::prefetch_item& it, const tensor& dst) {
      if constexpr (device_resident) {
        const cache::record_view v = pl_.cache_->view(it.key, it.expected_version);
        check(v.meta.enc == cache::encoding::raw && v.meta.type == dst.type && v.meta.shape == dst.shape, "pipeline: cached feature ",
              it.key.str(), " is ", dtype_name(v.meta.type), v.meta.shape.str(), " (", cache::encoding_name(v.meta.enc), "), expected ",
              dst.describe());
        pl_.be_.copy(dst.data, v.bytes.data(), v.bytes.size());
      } else {
        auto f = pf_->next();
        check(f.has_value(), "pipeline: the prefetch plan ended early");
        check(f->data.type == dst.type && f->data.shape == dst.shape, "pipeline: cached feature ", f->key.str(), " is ",
              f->data.describe(), ", expected ", dst.describe());
        pl_.be_.copy_async(dst.data, f->data.data, f->data.bytes());
      }
    }

    pipeline& pl_;
    index_t first_, last_;
    long end_;
    const std::vector<double>& share_;
    bool ahead_;
    std::vector<feature_set> sets_;
    std::optional<cache::prefetcher<store_type, staging_type>> pf_;
  };

  // ---- one visit ----
  void visit(const std::filesystem::path& run_dir, std::size_t p, index_t pos, const std::vector<index_t>& order,
             const std::vector<double>& difficulty, long s0, const std::filesystem::path& ckdir) {
    (void)run_dir;
    const auto& ph = phases_[p];
    const index_t k = order[static_cast<std::size_t>(pos)];
    const auto sg = ph.segments[static_cast<std::size_t>(k)];
    const index_t g = global_visit(p, pos);
    long planned = visit_steps_[static_cast<std::size_t>(g)];
    const bool secs = opt_.total.unit == budget_unit::seconds;

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

    std::vector<double> share(static_cast<std::size_t>(planned));
    bool any_student = false;
    for (long s = 0; s < planned; ++s) {
      share[static_cast<std::size_t>(s)] = policies::student_fraction(pol_.curriculum, ph, static_cast<index_t>(s));
      any_student = any_student || share[static_cast<std::size_t>(s)] > 0;
    }
    if (any_student) refresh_student(sg.first);

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
    const tier ct = Backend::memory_tier;
    for (int t = 0; t < tier_count; ++t) run_peak_[t] = std::max(run_peak_[t], memory().peak(static_cast<tier>(t)));
    const std::size_t base = memory().current(ct);
    memory().reset_peak(ct);

    optim::adamw_config oc;
    oc.lr = opt_.lr;
    oc.weight_decay = opt_.weight_decay;
    segment_trainer<Backend, loss_type> seg(be_, st_->config, sg.first, sg.last, st_->layout, st_->params, st_->type, oc,
                                            pol_.loss, opt_.clip);
    if (s0 > 0) {
      const auto path = ckdir / read_text(ckdir / "latest") / "segment.bin";
      std::ifstream in(path, std::ios::binary);
      check(in.good(), "pipeline: cannot read '", path.string(), "'");
      seg.load_state(in);
      check(seg.steps() == s0, "pipeline: the segment state in '", path.string(), "' is at step ", seg.steps(), ", the checkpoint at ",
            s0);
    }
    optim::cosine_schedule sched{opt_.lr, opt_.min_lr, 0, std::max(1L, planned)};
    timer vt, estimate;  // vt restarts at each checkpoint; estimate times the visit's first steps
    double stall = 0;
    std::size_t staging = 0, feature_sets = 1;
    {
      feed fd(*this, sg.first, sg.last, s0, planned, share);
      feature_sets = fd.set_count();
      for (long s = s0; s < planned; ++s) {
        if (opt_.halt_after_steps > 0 && steps_this_process_ >= opt_.halt_after_steps) throw pipeline_halted{};
        if (secs) {
          if (elapsed() >= deadline) break;
          if (s == s0 + 3) {
            const double per_step = estimate.seconds() / 3.0;
            planned = std::min(planned, s0 + 3 + static_cast<long>((deadline - elapsed()) / std::max(per_step, 1e-9)));
            sched.total_steps = std::max(1L, planned);
            fd.end_at(planned);
          }
        }
        const double r = share[static_cast<std::size_t>(s)];
        const feature_set& in = fd.at(s);
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
          fail("pipeline: phase ", p, ", segment [", sg.first, ", ", sg.last, "), step ", s + 1, " (global step ",
               res_.segment_steps + 1, "): ", e.what());
        }
        if (s == 0) {
          rep.loss_first = loss;
          rep.student_fraction_first = r;
        }
        rep.loss_last = loss;
        rep.student_fraction_last = r;
        rep.steps = s + 1;
        ++res_.segment_steps;
        ++steps_this_process_;
        res_.tokens += B_ * T_;
        metrics_.write({{"global_step", res_.segment_steps},
                        {"phase", p},
                        {"position", pos},
                        {"first", sg.first},
                        {"last", sg.last},
                        {"step", s + 1},
                        {"loss", loss},
                        {"student_fraction", r},
                        {"lr", lr},
                        {"seconds", elapsed()},
                        {"memory", memory_sample(fd.stats().staging_bytes)}});
        if (bar_) bar_->update(secs ? static_cast<long>(elapsed()) : res_.segment_steps,
                               "phase " + std::to_string(p) + " layers " + std::to_string(sg.first) + "-" +
                                   std::to_string(sg.last - 1));
        if (opt_.checkpoint_every > 0 && (s + 1) % opt_.checkpoint_every == 0 && s + 1 < planned) {
          rep.planned_steps = planned;
          rep.seconds += vt.seconds();
          rep.stall_seconds += fd.stats().stall_seconds - stall;
          stall = fd.stats().stall_seconds;
          vt = timer();
          save_checkpoint(ckdir, p, pos, s + 1, order, difficulty, &seg, rep);
        }
      }
      const auto ps = fd.stats();
      rep.stall_seconds += ps.stall_seconds - stall;
      staging = ps.staging_bytes;
    }
    rep.planned_steps = planned;
    rep.seconds += vt.seconds();
    rep.compute_bytes = seg.resident_bytes() + 3 * feature_sets * feature_bytes();
    rep.staging_bytes = staging;
    rep.tracker_bytes = memory().peak(ct) - base;
    res_.step_seconds += rep.seconds;
    res_.stall_seconds += rep.stall_seconds;
    res_.peak_compute_bytes = std::max(res_.peak_compute_bytes, rep.compute_bytes);
    peak_staging_ = std::max(peak_staging_, staging);
    if (secs && elapsed() >= layerwise_seconds()) layerwise_spent_ = true;
    if (secs && rep.steps < planned) res_.budget_exhausted = true;

    if (rep.steps > 0) {  // a visit cut before its first step changed nothing
      seg.write_back(st_->layout, st_->params);
      ++version_counter_;
      for (index_t l = sg.first; l < sg.last; ++l) layer_version_[static_cast<std::size_t>(l)] = version_counter_;
      // Student features below the segment are still current; those above it are stale now.
      for (index_t b = sg.first + 1; b <= st_->config.n_layers(); ++b) cache_->invalidate(b, cache::source::student);
    }
    res_.visits.push_back(rep);
    partial_ = nlohmann::json();
    if (metrics_.is_open()) {
      auto j = rep.to_json();
      j["event"] = "visit";
      metrics_.write(j);
    }
    save_checkpoint(ckdir, p, pos + 1, 0, order, difficulty, nullptr, rep);
  }

  // Bytes held now: compute (the backend's tier, less what the cache and the staging ring hold there),
  // the cache's stored bytes, the staging ring, and the tracker's raw count of the backend's tier.
  nlohmann::json memory_sample(std::size_t staging) const {
    constexpr tier ct = Backend::memory_tier;
    const std::size_t tracked = memory().current(ct);
    const std::size_t cache = cache_->stats().store.stored_bytes;
    std::size_t other = 0;
    if (store_type::memory_tier == ct) other += cache;
    if (staging_type::memory_tier == ct) other += staging;
    return {{"compute", tracked > other ? tracked - other : 0}, {"cache", cache}, {"staging", staging}, {"tracker", tracked}};
  }

  // ---- final KD ----
  void final_kd(const teacher_source& load_teacher, const data::batch_loader& loader, const std::filesystem::path& ckdir) {
    timer t;
    auto teacher = load_teacher();
    check(teacher != nullptr, "pipeline: the teacher source returned no model");
    auto net = st_->to_transformer(be_);
    e2e_options eo;
    eo.lr = opt_.lr;
    eo.min_lr = opt_.min_lr;
    eo.weight_decay = opt_.weight_decay;
    eo.temperature = opt_.kd_temperature;
    eo.clip = opt_.clip;
    eo.progress_bar = opt_.progress_bar;
    if (opt_.total.unit == budget_unit::seconds) {
      eo.steps = opt_.max_visit_steps;
      eo.time_budget_seconds = std::max(1e-3, opt_.total.amount - elapsed());
    } else {
      eo.steps = kd_steps_planned_;
    }
    const auto r = train_e2e_kd(*teacher, *net, loader, B_, T_, eo, nullptr);
    *st_ = student_state::of(*net);
    res_.kd_steps = r.steps;
    res_.tokens += r.tokens;
    res_.kd_peak_compute_bytes = r.peak_compute_bytes;
    res_.kd_seconds = t.seconds();
    res_.budget_exhausted = res_.budget_exhausted || r.budget_exhausted;
    if (metrics_.is_open()) {
      nlohmann::json rec;
      rec["event"] = "final_kd";
      rec["steps"] = r.steps;
      rec["loss_first"] = r.loss_first;
      rec["loss_last"] = r.loss_last;
      rec["peak_compute_bytes"] = r.peak_compute_bytes;
      rec["seconds"] = r.seconds;
      metrics_.write(rec);
    }
    save_checkpoint(ckdir, phases_.size(), 0, 0, {}, {}, nullptr, visit_report{}, true);
  }

  // ---- checkpoints ----
  // <run>/checkpoints/<name>/: student.bin (every parameter as a double), segment.bin (the visit's
  // segment parameters and AdamW state, mid-visit only), state.json; `latest` names it, written last.
  void save_checkpoint(const std::filesystem::path& ckdir, std::size_t phase, index_t position, long visit_step,
                       const std::vector<index_t>& order, const std::vector<double>& difficulty,
                       const segment_trainer<Backend, loss_type>* seg, const visit_report& partial, bool kd_done = false) {
    namespace fs = std::filesystem;
    const auto name = pipeline_detail::checkpoint_name(res_.segment_steps, phase, position);
    const auto dir = ckdir / name;
    std::error_code ec;
    fs::remove_all(dir, ec);
    fs::create_directories(dir, ec);
    check(!ec, "pipeline: cannot create the checkpoint folder '", dir.string(), "': ", ec.message());
    {
      std::ofstream f(dir / "student.bin", std::ios::binary);
      f.write(reinterpret_cast<const char*>(st_->params.data()), static_cast<std::streamsize>(st_->params.size() * sizeof(double)));
      f.flush();
      check(f.good(), "pipeline: writing '", (dir / "student.bin").string(), "' failed");
    }
    if (seg) {
      std::ofstream f(dir / "segment.bin", std::ios::binary);
      seg->save_state(f);
      f.flush();
      check(f.good(), "pipeline: writing '", (dir / "segment.bin").string(), "' failed");
    }
    nlohmann::json visits = nlohmann::json::array();
    for (const auto& v : res_.visits) visits.push_back(v.to_json());
    nlohmann::json j = {{"global_step", res_.segment_steps},
                        {"metrics_records", metrics_.records()},
                        {"phase", phase},
                        {"position", position},
                        {"visit_step", visit_step},
                        {"order", order},
                        {"difficulty", difficulty},
                        {"kd_done", kd_done},
                        {"layer_version", layer_version_},
                        {"version_counter", version_counter_},
                        {"visits", visits},
                        {"partial", seg ? partial.to_json() : nlohmann::json()},
                        {"tokens", res_.tokens},
                        {"kd_steps", res_.kd_steps},
                        {"seconds", elapsed()},
                        {"step_seconds", res_.step_seconds},
                        {"stall_seconds", res_.stall_seconds},
                        {"peak_compute_bytes", res_.peak_compute_bytes},
                        {"peak_staging_bytes", peak_staging_},
                        {"student_parameters", st_->params.size()},
                        {"kd_peak_compute_bytes", res_.kd_peak_compute_bytes},
                        {"kd_seconds", res_.kd_seconds},
                        {"teacher_pass_seconds", res_.teacher_pass_seconds},
                        {"refresh_seconds", res_.refresh_seconds},
                        {"teacher_loaded", res_.teacher_loaded},
                        {"budget_exhausted", res_.budget_exhausted},
                        {"segmentation_inputs", segmentation_inputs()},
                        {"fingerprint", fingerprint_}};
    write_text_atomic(dir / "state.json", j.dump() + "\n");
    write_text_atomic(ckdir / "latest", name);
    // Keep the newest two.
    std::vector<fs::path> all;
    for (const auto& e : fs::directory_iterator(ckdir))
      if (e.is_directory() && e.path().filename().string().rfind("ck_", 0) == 0) all.push_back(e.path());
    std::sort(all.begin(), all.end());
    for (std::size_t i = 0; i + 2 < all.size(); ++i) fs::remove_all(all[i], ec);
  }

  nlohmann::json load_checkpoint(const std::filesystem::path& ckdir) {
    const auto name = read_text(ckdir / "latest");
    const auto dir = ckdir / name;
    auto j = nlohmann::json::parse(read_text(dir / "state.json"));
    check(j.at("student_parameters").get<std::size_t>() == st_->params.size(), "pipeline: checkpoint '", dir.string(),
          "' holds ", j.at("student_parameters").get<std::size_t>(), " student parameters, this student has ",
          st_->params.size(), " (a run directory belongs to one student)");
    for (const auto& [field, value] : fingerprint_.items())
      check(j.at("fingerprint").contains(field) && j.at("fingerprint").at(field) == value, "pipeline: checkpoint '",
            dir.string(), "' was made with ", field, " = ",
            j.at("fingerprint").contains(field) ? j.at("fingerprint").at(field).dump() : std::string("(none)"),
            ", this run has ", value.dump(), "; resume with the same settings, or start afresh (another run directory, or "
            "resume = false)");
    std::ifstream f(dir / "student.bin", std::ios::binary);
    f.read(reinterpret_cast<char*>(st_->params.data()), static_cast<std::streamsize>(st_->params.size() * sizeof(double)));
    check(f.good(), "pipeline: '", (dir / "student.bin").string(), "' is shorter than the student's parameters");
    layer_version_ = j.at("layer_version").get<std::vector<std::uint64_t>>();
    version_counter_ = j.at("version_counter");
    for (const auto& v : j.at("visits")) res_.visits.push_back(visit_report::from_json(v));
    partial_ = j.at("partial");
    res_.segment_steps = j.at("global_step");
    res_.tokens = j.at("tokens");
    res_.kd_steps = j.at("kd_steps");
    res_.step_seconds = j.at("step_seconds");
    res_.stall_seconds = j.at("stall_seconds");
    res_.peak_compute_bytes = j.at("peak_compute_bytes");
    peak_staging_ = j.at("peak_staging_bytes");
    elapsed_before_ = j.at("seconds");
    res_.kd_peak_compute_bytes = j.at("kd_peak_compute_bytes");
    res_.kd_seconds = j.at("kd_seconds");
    res_.teacher_pass_seconds = j.at("teacher_pass_seconds");
    res_.refresh_seconds = j.at("refresh_seconds");
    res_.teacher_loaded = j.at("teacher_loaded");
    res_.budget_exhausted = j.at("budget_exhausted");
    return j;
  }

  // Layer versions start at 0 (the pruned weights); run() resets them unless it resumes.
  void reset_versions(index_t n_layers) {
    layer_version_.assign(static_cast<std::size_t>(n_layers), 0);
    version_counter_ = 0;
  }

 private:
  Backend& be_;
  PolicySet pol0_, pol_;  // as given, and with this run's measured runtime inputs
  bool layerwise_spent_ = false;  // a seconds budget's layer-wise share is used up
  pipeline_options opt_;
  student_state* st_ = nullptr;
  std::vector<index_t> tlo_;
  index_t B_ = 0, T_ = 0;
  std::unique_ptr<cache::feature_cache<store_type>> cache_;
  std::vector<policies::curriculum_phase> phases_;
  std::vector<long> visit_steps_;
  long kd_steps_planned_ = 0;
  std::vector<std::uint64_t> layer_version_;
  std::uint64_t version_counter_ = 0;
  pipeline_result res_;
  nlohmann::json partial_, fingerprint_;
  metrics_writer metrics_;
  std::unique_ptr<progress> bar_;
  timer clock_;
  double elapsed_before_ = 0;
  long steps_this_process_ = 0;
  std::size_t peak_staging_ = 0;
  std::map<int, std::size_t> run_peak_;
  std::vector<std::byte> host_;
};

// pipeline<policy_set> for a bundle made by make_policies, with its backend object.
template <class PolicySet, class Backend>
pipeline<PolicySet, Backend> make_pipeline(Backend& be, PolicySet policies, pipeline_options opt = {}) {
  return pipeline<PolicySet, Backend>(be, std::move(policies), std::move(opt));
}

}  // namespace lwcl::distill
