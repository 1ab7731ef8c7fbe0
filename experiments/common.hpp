#pragma once
// What the experiment programs share: their common options, the cached (or freshly trained) teacher, a
// pruned student, the validation tokens and training stream, the three recovery methods (a pipeline
// bundle, end-to-end KD, prune-only) as rows of one table with their run directories, and the table and
// report.json writers. Each program is then the few lines that pick its bundles.

#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/fs.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/distill/e2e_kd.hpp"
#include "lwcl/distill/pipeline.hpp"
#include "lwcl/policies/bundle.hpp"
#include "lwcl/distill/report.hpp"
#include "lwcl/eval/cumulative_error.hpp"
#include "lwcl/eval/perplexity.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/model/layer_map.hpp"
#include "lwcl/policies/pruning/concept.hpp"
#include "lwcl/prune/allocate.hpp"
#include "lwcl/prune/stats.hpp"
#include "lwcl/prune/surgery.hpp"
#include "lwcl/train/lm_training.hpp"

#include "host_instances.hpp"

namespace lwcl::experiments {

namespace fs = std::filesystem;
using net_t = model::transformer<backend::cpu>;

// The options every program takes, with the defaults of the tiny-teacher experiments. A program sets
// its own budget and run directory (and any other default it changes) before add_common_options.
struct common_options {
  std::string data = "data/prepared";
  std::string teacher = "runs/teacher_tiny_gpt2";  // a teacher run directory (recover: a model folder)
  std::string budget = "steps:400", out = "runs/experiment";
  double lr = 2e-3, ratio = 0.5;  // ratio: the pruned fraction of every layer's KV groups and FFN channels
  int batch = 16, seq = 128, feature_batches = 12, calib_batches = 8;
};

// --data --teacher --budget --ratio --lr --batch --seq --feature-batches --calib-batches --out, where
// `budget_help` says what the program's budget means; `pruning` false leaves out --ratio and
// --calib-batches (for a program handed a pruned student).
inline void add_common_options(CLI::App& app, common_options& o, const std::string& budget_help, bool pruning = true) {
  app.add_option("--data", o.data, "prepared data (tools/fetch_corpus.sh, experiments/prepare_data)");
  app.add_option("--teacher", o.teacher, "teacher run directory; trained (resumably) when it has no model/ yet");
  app.add_option("--budget", o.budget, budget_help);
  if (pruning)
    app.add_option("--ratio", o.ratio, "fraction of heads (KV groups) and FFN channels pruned")
        ->check(CLI::Range(0.0, 0.95));
  app.add_option("--lr", o.lr, "peak learning rate of every recovery")->check(CLI::PositiveNumber);
  app.add_option("--batch", o.batch, "sequences per batch")->check(CLI::PositiveNumber);
  app.add_option("--seq", o.seq, "tokens per sequence")->check(CLI::PositiveNumber);
  app.add_option("--feature-batches", o.feature_batches, "batches whose boundary features the layer-wise methods cache")
      ->check(CLI::PositiveNumber);
  if (pruning)
    app.add_option("--calib-batches", o.calib_batches, "calibration batches of the pruning criterion")
        ->check(CLI::PositiveNumber);
  app.add_option("--out", o.out, "run directory");
}

// A --budget option: a plain number is seconds, otherwise steps:N, tokens:N or seconds:N.
inline distill::budget budget_option(std::string text) {
  if (text.find(':') == std::string::npos) text = "seconds:" + text;
  return distill::parse_budget(text);
}

inline void write_json(const fs::path& path, const nlohmann::ordered_json& j) { write_text_atomic(path, j.dump(2) + "\n"); }

inline std::string human_bytes(double b) {
  char buf[32];
  if (b <= 0) return "-";
  if (b >= 1 << 20)
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1 << 20));
  else
    std::snprintf(buf, sizeof buf, "%.0f KiB", b / 1024);
  return buf;
}

struct teacher_info {
  fs::path dir;        // <run>/model: config.json + model.safetensors + tokenizer
  double seconds = 0;  // its training time (as reported by the run that trained it)
  long tokens = 0;     // its training tokens
};

// The teacher of `preset` ("tiny" or "small", gpt2) in teacher_run/model, trained (resumably) when absent.
inline teacher_info ensure_teacher(backend::cpu& be, const std::string& data, const std::string& teacher_run,
                                   const std::string& preset = "tiny") {
  const auto train_path = fs::path(data) / "train.bin";
  check(fs::exists(train_path), "no '", train_path.string(),
        "' (tools/quickstart.sh prepares it: tools/fetch_corpus.sh, then experiments/prepare_data)");
  teacher_info t;
  t.dir = fs::path(teacher_run) / "model";
  const data::shard probe(train_path.string());
  const auto opt = train::lm_preset(preset, model::family::gpt2, static_cast<index_t>(probe.vocab_size()));
  t.tokens = opt.steps * opt.batch * opt.seq;
  if (!fs::exists(t.dir / "model.safetensors")) {
    std::printf("training the %s teacher into %s (rerun resumes after a kill)\n", preset.c_str(), teacher_run.c_str());
    t.seconds = train::train_lm(be, opt, data, teacher_run).seconds;
  } else {
    std::printf("using the cached teacher %s\n", t.dir.string().c_str());
    std::ifstream rep(fs::path(teacher_run) / "report.json");
    if (rep.good()) t.seconds = nlohmann::json::parse(rep).value("wall_seconds", 0.0);
  }
  return t;
}

inline std::unique_ptr<net_t> load_model(backend::cpu& be, const fs::path& dir) {
  auto net = std::make_unique<net_t>(be, checkpoint::read_hf_config(dir.string()), dtype::f32);
  checkpoint::load_hf_weights(*net, dir.string());
  return net;
}

// `criterion` scores from calibration statistics, `ratio` of every layer's KV groups and FFN channels
// removed (uniform allocation), physically cut.
template <policies::pruning_criterion Criterion>
std::unique_ptr<net_t> prune_model(net_t& teacher, const data::shard& train, Criterion criterion, double ratio, index_t B,
                                   index_t T, index_t calib_batches) {
  const data::batch_loader calib(train, B, T, 0xC0FFEE);
  const auto stats = prune::collect_statistics(teacher, calib, B, T, calib_batches);
  const auto scores = policies::score_groups(criterion, prune::make_scoring_input(teacher, stats));
  prune::allocation alloc;
  alloc.ratio = ratio;
  return prune::apply_plan(teacher, prune::allocate(teacher.backend(), teacher.config(), scores, alloc));
}

inline std::vector<std::int32_t> validation_ids(const std::string& data, std::size_t tokens = 32769) {
  const data::shard val((fs::path(data) / "validation.bin").string());
  std::vector<std::int32_t> ids(static_cast<std::size_t>(std::min<std::uint64_t>(val.size(), tokens)));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = val[i];
  return ids;
}

// Token batches of the validation split for the cumulative error curve.
inline std::vector<std::vector<std::int32_t>> error_batches(const std::vector<std::int32_t>& val, index_t B, index_t T,
                                                            index_t n) {
  std::vector<std::vector<std::int32_t>> out;
  for (index_t k = 0; k < n; ++k) {
    const auto off = static_cast<std::size_t>(k * B * T);
    check(off + static_cast<std::size_t>(B * T) <= val.size(), "error_batches: the validation split holds ", val.size(),
          " tokens, fewer than ", n, " batches of ", B, " x ", T);
    out.emplace_back(val.begin() + static_cast<std::ptrdiff_t>(off), val.begin() + static_cast<std::ptrdiff_t>(off + B * T));
  }
  return out;
}

// One row of a comparison table.
struct method_row {
  std::string name;
  double val_ppl = 0;
  double peak_compute_bytes = 0, peak_cache_bytes = 0;
  double wall_seconds = 0;
  long tokens = 0;
  std::vector<double> cumulative_error;  // empty for the teacher
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();

  nlohmann::ordered_json to_json() const {
    nlohmann::ordered_json j = {{"name", name},
                                {"val_ppl", val_ppl},
                                {"peak_compute_bytes", static_cast<std::int64_t>(peak_compute_bytes)},
                                {"peak_cache_bytes", static_cast<std::int64_t>(peak_cache_bytes)},
                                {"wall_seconds", wall_seconds},
                                {"tokens", tokens},
                                {"cumulative_error", cumulative_error}};
    for (const auto& [k, v] : extra.items()) j[k] = v;
    return j;
  }
};

// Where a comparison starts: the teacher, its student pruned by `criterion` (--ratio of every layer's
// KV groups and FFN channels, calibrated on --calib-batches training batches), and the table's first
// two rows (teacher, pruned) judged on `val`.
struct pruned_start {
  teacher_info teacher;
  index_t teacher_parameters = 0;
  distill::student_state pruned;
  std::vector<method_row> rows;  // teacher, pruned
  std::string protocol;          // the validation perplexity protocol
};

template <policies::pruning_criterion Criterion>
pruned_start start_pruned(backend::cpu& be, const common_options& o, Criterion criterion,
                          const std::vector<std::int32_t>& val, const std::string& who) {
  const index_t B = o.batch, T = o.seq;
  pruned_start s;
  s.teacher = ensure_teacher(be, o.data, o.teacher, "tiny");
  const data::shard train_shard((fs::path(o.data) / "train.bin").string());
  auto t = load_model(be, s.teacher.dir);
  check(T <= t->config().max_seq, who, ": --seq ", T, " exceeds the teacher's max_seq ", t->config().max_seq);
  s.teacher_parameters = t->num_parameters();
  timer clock;
  auto p = prune_model(*t, train_shard, criterion, o.ratio, B, T, o.calib_batches);
  const double prune_seconds = clock.seconds();
  std::printf("%s %.0f%% of heads and FFN channels: %lld -> %lld parameters in %.1f s\n", std::string(Criterion::name).c_str(),
              100 * o.ratio, static_cast<long long>(s.teacher_parameters), static_cast<long long>(p->num_parameters()),
              prune_seconds);
  const auto pt = eval::perplexity(*t, val, T, T, "validation");
  s.protocol = pt.protocol();
  method_row tr;
  tr.name = "teacher";
  tr.val_ppl = pt.perplexity();
  tr.wall_seconds = s.teacher.seconds;
  tr.tokens = s.teacher.tokens;
  s.rows.push_back(tr);
  s.pruned = distill::student_state::of(*p);
  method_row pr;
  pr.name = "pruned";
  pr.val_ppl = eval::perplexity(*p, val, T, T, "validation").perplexity();
  pr.cumulative_error =
      eval::cumulative_error(*t, *p, model::identity_boundaries(p->config().n_layers()), error_batches(val, B, T, 2), B, T);
  pr.wall_seconds = prune_seconds;
  pr.tokens = static_cast<long>(o.calib_batches) * B * T;
  s.rows.push_back(pr);
  return s;
}

// The training batches every method draws: train.bin in batches of --batch x --seq under one seed, so
// that all methods see the same stream. It stays where it is made: the loader refers to the shard.
struct training_stream {
  data::shard shard;
  data::batch_loader loader;

  explicit training_stream(const common_options& o)
      : shard((fs::path(o.data) / "train.bin").string()), loader(shard, o.batch, o.seq, 0x5EED) {}
  training_stream(const training_stream&) = delete;
  training_stream& operator=(const training_stream&) = delete;
};

// Everything a method needs to train and be judged.
struct study {
  backend::cpu& be;
  fs::path teacher_dir;
  std::vector<index_t> boundaries;  // the layer map (model/layer_map.hpp)
  training_stream train;
  std::vector<std::int32_t> val;
  std::vector<std::vector<std::int32_t>> err_batches;
  index_t B, T;
  fs::path out_dir;

  eval::perplexity_result perplexity(net_t& net) const { return eval::perplexity(net, val, T, T, "validation"); }
  std::vector<double> error_of(net_t& student) const {
    auto teacher = load_model(be, teacher_dir);
    return eval::cumulative_error(*teacher, student, boundaries, err_batches, B, T);
  }
  // A row for a trained (or merely pruned) student: perplexity, cumulative error, checkpoint in <out>/<name>/student.
  method_row judge(const std::string& name, const distill::student_state& s) const {
    auto net = s.to_transformer(be);
    method_row r;
    r.name = name;
    r.val_ppl = perplexity(*net).perplexity();
    r.cumulative_error = error_of(*net);
    return r;
  }
};

// The study of `start`'s pruned student (the identity layer map) on the options' training stream, judged
// on `val`, with its run directories under --out.
inline study make_study(backend::cpu& be, const common_options& o, const pruned_start& start,
                        const std::vector<std::int32_t>& val) {
  return {be, start.teacher.dir, model::identity_boundaries(start.pruned.config.n_layers()), training_stream(o),
          val, error_batches(val, o.batch, o.seq, 2), o.batch, o.seq, o.out};
}

// The layer-wise pipeline with `bundle` on a copy of `pruned`, in <out>/<name>/ (started afresh).
// `result` receives the pipeline's result and `out` the recovered student, when given.
template <class Bundle>
method_row run_pipeline(const study& st, const std::string& name, const Bundle& bundle, const distill::student_state& pruned,
                        distill::pipeline_options opt, distill::pipeline_result* result = nullptr,
                        distill::student_state* out = nullptr) {
  const fs::path dir = st.out_dir / name;
  fs::remove_all(dir);
  auto student = pruned;
  opt.resume = false;
  std::printf("%s: %s, budget %s\n", name.c_str(), [&] {
    std::string d;
    for (const auto& [slot, policy] : describe(bundle)) d += (d.empty() ? "" : ", ") + slot + " " + policy;
    return d;
  }().c_str(), opt.total.str().c_str());
  const auto teacher_dir = st.teacher_dir;
  auto& be = st.be;
  auto pipe = distill::make_pipeline(be, bundle, opt);
  const auto res = pipe.run([&] { return load_model(be, teacher_dir); }, student, st.boundaries, st.train.loader, dir);
  method_row row = st.judge(name, student);
  row.peak_compute_bytes = static_cast<double>(std::max(res.peak_compute_bytes, res.kd_peak_compute_bytes));
  row.peak_cache_bytes = static_cast<double>(res.peak_cache_bytes);
  row.wall_seconds = res.seconds;
  row.tokens = res.tokens;
  row.extra["policies"] = describe(bundle);
  row.extra["stall_fraction"] = res.step_seconds > 0 ? res.stall_seconds / res.step_seconds : 0.0;
  row.extra["teacher_pass_seconds"] = res.teacher_pass_seconds;
  row.extra["segment_steps"] = res.segment_steps;
  row.extra["kd_steps"] = res.kd_steps;
  row.extra["cache_compression_ratio"] = res.cache.compression_ratio();
  row.extra["run_dir"] = dir.string();
  if (result) *result = res;
  if (out) *out = std::move(student);
  return row;
}

// End-to-end KD (teacher and student resident) on a copy of `pruned`, metrics in <out>/<name>/.
inline method_row run_e2e_kd(const study& st, const std::string& name, const distill::student_state& pruned,
                             distill::e2e_options eo) {
  const fs::path dir = st.out_dir / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::printf("%s: end-to-end logit KD%s, teacher and student resident\n", name.c_str(),
              eo.hidden_mse_weight > 0 ? " + hidden MSE" : "");
  auto teacher = load_model(st.be, st.teacher_dir);
  auto student = pruned.to_transformer(st.be);
  metrics_writer m((dir / "metrics.jsonl").string());
  const auto res = distill::train_e2e_kd(*teacher, *student, st.train.loader, st.B, st.T, eo, &m);
  teacher.reset();
  checkpoint::save_hf(*student, (dir / "student").string());
  method_row row = st.judge(name, distill::student_state::of(*student));
  row.peak_compute_bytes = static_cast<double>(res.peak_compute_bytes);
  row.wall_seconds = res.seconds;
  row.tokens = res.tokens;
  row.extra["steps"] = res.steps;
  row.extra["run_dir"] = dir.string();
  return row;
}

// The pipeline options every program starts from: the budget `total`, the peak learning rate decaying
// to a tenth of it, and the cached feature batches.
inline distill::pipeline_options recovery_options(const common_options& o, distill::budget total) {
  distill::pipeline_options po;
  po.total = total;
  po.lr = o.lr;
  po.min_lr = o.lr / 10;
  po.feature_batches = o.feature_batches;
  return po;
}

inline void print_table(const std::vector<method_row>& rows, const std::string& protocol) {
  std::printf("\nvalidation perplexity: %s\n", protocol.c_str());
  std::printf("%-26s %10s %14s %14s %10s %12s %12s\n", "method", "val ppl", "peak compute", "peak cache", "wall s",
              "tokens", "err (last)");
  for (const auto& r : rows) {
    char err[32] = "-";
    if (!r.cumulative_error.empty()) std::snprintf(err, sizeof err, "%.4f", r.cumulative_error.back());
    std::printf("%-26s %10.3f %14s %14s %10.1f %12ld %12s\n", r.name.c_str(), r.val_ppl,
                human_bytes(r.peak_compute_bytes).c_str(), human_bytes(r.peak_cache_bytes).c_str(), r.wall_seconds,
                r.tokens, err);
  }
  std::printf("(peak compute: bytes resident for training: weights, gradients, AdamW moments, activations, and for "
              "end-to-end KD the teacher; err (last): relative error of the last layer's hidden state against the "
              "teacher's)\n");
}

// report.json with the `methods` list, and cumulative_error.png.
inline void write_report(const fs::path& out_dir, const std::vector<method_row>& rows, nlohmann::ordered_json extra) {
  nlohmann::ordered_json methods = nlohmann::ordered_json::array();
  std::vector<std::pair<std::string, std::vector<double>>> curves;
  for (const auto& r : rows) {
    methods.push_back(r.to_json());
    if (!r.cumulative_error.empty()) curves.emplace_back(r.name, r.cumulative_error);
  }
  extra["methods"] = methods;
  write_json(out_dir / "report.json", extra);
  if (!curves.empty()) distill::plot_cumulative_error(curves, out_dir / "cumulative_error.png");
}

}  // namespace lwcl::experiments
