#pragma once
// The comparison harness: what every program that compares recoveries of one pruned student does, so
// that the program is only the methods it compares. It owns the command line (the common options plus the
// program's own), the run directory, the teacher (trained once, cached after), the student pruned by
// the comparison's criterion, the validation tokens and the training stream every method draws; it runs
// each method (a layer-wise pipeline bundle, or end-to-end KD) on a copy of the pruned student in
// <out>/<name>/ and judges it the same way (perplexity, cumulative error, peak bytes, wall seconds,
// tokens); and at the end it prints the table, writes config.json (every option's value), report.json,
// table.md, cumulative_error.png and the plots the program asked for, and says which methods produced
// bitwise the same student.
//
//   studies::comparison<backend::cpu, policies::pruning::wanda_sp> cmp("my_study", "what it compares",
//                                                                       "steps:200", "budget help");
//   if (const int rc = cmp.parse(argc, argv); rc >= 0) return rc;
//   return cmp.run([&] {
//     cmp.recover("two_stage", cmp.recovery_options());
//     cmp.recover("no_curriculum", cmp.recovery_options(), slot<key::curriculum>(cur::curriculum<>{}));
//     cmp.e2e_kd("e2e_kd", cmp.total());
//   });
//
// Host code; needs CLI11 (header-only) and Boost.Hana (through the bundles).

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/core/error.hpp"
#include "lwcl/core/fs.hpp"
#include "lwcl/core/memory.hpp"
#include "lwcl/core/metrics.hpp"
#include "lwcl/core/process_memory.hpp"
#include "lwcl/core/program.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/data/shards.hpp"
#include "lwcl/distill/curve.hpp"
#include "lwcl/distill/e2e_kd.hpp"
#include "lwcl/distill/pipeline.hpp"
#include "lwcl/distill/report.hpp"
#include "lwcl/distill/student_state.hpp"
#include "lwcl/eval/cumulative_error.hpp"
#include "lwcl/eval/held_out.hpp"
#include "lwcl/eval/multiple_choice.hpp"
#include "lwcl/eval/perplexity.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/model/layer_map.hpp"
#include "lwcl/model/tokenizer/folder.hpp"
#include "lwcl/policies/bundle.hpp"
#include "lwcl/policies/pruning/concept.hpp"
#include "lwcl/policies/pruning/uniform.hpp"
#include "lwcl/report/plot.hpp"
#include "lwcl/train/lm_training.hpp"
#include "studies/options.hpp"
#include "studies/seeds.hpp"
#include "studies/table.hpp"

namespace lwcl::studies {

using distill::curve_point;
using distill::e2e_options;
using distill::pipeline_result;
using distill::plot_cumulative_error;
using distill::student_state;
using distill::train_e2e_kd;

namespace comparison_detail {

// The segmentation of every stage a run trained, by first layer: "[0,1) [1,2) > [0,2)"; a stage that
// repeats the previous one's segments (two_stage trains each twice) is written once, a phase the budget
// ended in is marked partial, and phases never reached are counted.
inline std::string stages_text(const pipeline_result& r, index_t n_layers) {
  std::map<std::size_t, std::map<index_t, index_t>> phase_segments;  // phase -> first -> last
  for (const auto& v : r.visits) phase_segments[v.phase][v.first] = v.last;
  std::string out, previous;
  for (const auto& [phase, segs] : phase_segments) {
    std::string s;
    index_t covered = 0;
    for (const auto& [first, last] : segs) {
      s += (s.empty() ? "[" : " [") + std::to_string(first) + "," + std::to_string(last) + ")";
      covered += last - first;
    }
    if (covered < n_layers) s += " (partial)";
    if (s == previous) continue;
    out += (out.empty() ? "" : " > ") + s;
    previous = s;
  }
  if (phase_segments.size() < r.phases)
    out += " (" + std::to_string(r.phases - phase_segments.size()) + " phases not reached)";
  return out;
}

// The visiting order of phase 0 as segment indices, e.g. "2 0 1 3".
inline std::string first_phase_order(const pipeline_result& r) {
  std::string s;
  for (const auto& v : r.visits)
    if (v.phase == 0) s += (s.empty() ? "" : " ") + std::to_string(v.segment);
  return s;
}

// An option's value as config.json records it: numbers and booleans as such, the rest as strings.
inline nlohmann::ordered_json option_value(const std::string& text) {
  if (text == "true" || text == "false") return text == "true";
  std::size_t used = 0;
  try {
    if (text.find_first_of(".eE") == std::string::npos) {
      const long long v = std::stoll(text, &used);
      if (used == text.size()) return v;
    }
    const double d = std::stod(text, &used);
    if (used == text.size()) return d;
  } catch (const std::exception&) {
  }
  return text;
}

// A plot the program asked for (comparison::plot).
struct plot_request {
  std::string file, title, x_key, y_key, group_key;
};

}  // namespace comparison_detail

template <class Backend, policies::pruning_criterion Criterion>
class comparison {
 public:
  using net_t = model::transformer<Backend>;

  // A method's run: its row, and for a pipeline run the pipeline's result; the recovered student.
  struct recovery {
    method_row row;
    std::optional<pipeline_result> result;
    student_state student;
  };

  // `program` names the program (and the default run directory runs/<program>), `title` is the line
  // --help starts with, `budget` the default of --budget and `budget_help` what it means here.
  comparison(std::string program, const std::string& title, const std::string& budget, const std::string& budget_help,
             Criterion criterion = {})
      : program_(std::move(program)), app_(title), criterion_(criterion) {
    opt_.budget = budget;
    opt_.out = "runs/" + program_;
    app_.option_defaults()->always_capture_default();
    add_options(app_, opt_, budget_help);
  }
  comparison(const comparison&) = delete;
  comparison& operator=(const comparison&) = delete;

  // The command line, for the program's own options (before parse).
  CLI::App& cli() { return app_; }
  // The common options' values before parse: a program sets its own defaults here (the command line
  // overrides them).
  options& defaults() { return opt_; }

  // Parses argv: -1 to go on, otherwise the exit code (after --help, or a bad option).
  int parse(int argc, char** argv) {
    // Defaults a program set through defaults() after the options were declared: --help and
    // config.json show what an option not given really is.
    for (CLI::Option* o : app_.get_options()) o->capture_default_str();
    try {
      app_.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      return app_.exit(e);
    }
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    return -1;
  }

  // Prepares the teacher and the pruned student (the first two rows), runs `body` (the methods), then
  // writes everything. Returns body's exit code (0 when it returns nothing), or 2 after an lwcl::error,
  // whose message goes to stderr.
  // With --seeds N > 1, all of it once per seed, in <out>/seed_<s>/, and then the mean and standard
  // deviation of every method's figures over the seeds in <out>/ (report.json, table.md).
  template <class Body>
  int run(Body&& body) {
    return guard_main([&] {
      timer clock;
      // A program may run the comparison again (another setting): nothing of a previous run carries over.
      per_seed_.clear();
      seed_columns_.clear();
      recoveries_.clear();
      report_ = nlohmann::ordered_json::object();
      columns_.clear();
      notes_.clear();
      plots_.clear();
      total_ = budget_option(opt_.budget);
      std::filesystem::create_directories(opt_.out);
      const std::string out = opt_.out;
      const std::uint64_t first = opt_.seed;
      int rc = 0;
      for (int k = 0; k < opt_.seeds && rc == 0; ++k) {
        if (opt_.seeds > 1) {
          opt_.seed = first + static_cast<std::uint64_t>(k);
          opt_.out = (std::filesystem::path(out) / ("seed_" + std::to_string(opt_.seed))).string();
          std::filesystem::create_directories(opt_.out);
          std::printf("\n==== %s: seed %llu (%d of %d)\n", program_.c_str(), static_cast<unsigned long long>(opt_.seed),
                      k + 1, opt_.seeds);
        }
        if (resume_finished_seed()) continue;
        start();
        if constexpr (std::is_void_v<std::invoke_result_t<Body&>>) body();
        else rc = body();
        finish(clock.seconds());
        if (opt_.seeds > 1) keep_seed();
      }
      opt_.out = out;
      opt_.seed = first;
      if (opt_.seeds > 1 && rc == 0) summarise_seeds(clock.seconds());
      return rc;
    });
  }

  const options& opt() const { return opt_; }
  const std::string& program() const { return program_; }
  Backend& backend() { return be_; }
  // --budget, parsed (a plain number is seconds).
  const budget& total() const { return total_; }
  // The optimiser steps `b` allows (tokens over batch tokens); 0 under a seconds budget.
  double steps_of(const budget& b) const { return b.steps_at(opt_.batch * opt_.seq); }
  // The optimiser steps of one visit when curriculum `c` over segmentation `s` shares --budget's steps
  // equally among its visits (0 under a seconds budget): what a visit-relative schedule such as
  // curriculum::ramp is expressed in.
  template <policies::curriculum_policy Curriculum, policies::segmentation_policy Segmentation>
  index_t steps_per_visit(const Curriculum& c, const Segmentation& s) const {
    const auto& cfg = pruned_.config;
    return static_cast<index_t>(steps_of(total_)) /
           std::max<index_t>(1, policies::visit_count(c, policies::segmentation_stages(s, cfg), cfg.n_layers()));
  }
  pipeline_options recovery_options() const { return studies::recovery_options(opt_, total_); }
  pipeline_options recovery_options(const budget& b) const { return studies::recovery_options(opt_, b); }
  const student_state& pruned() const { return pruned_; }
  // The table's rows: the teacher, the pruned student, then every method in the order it ran.
  std::vector<method_row> rows() const {
    std::vector<method_row> out = rows_;
    for (const auto& r : recoveries_) out.push_back(r.row);
    return out;
  }
  const std::deque<recovery>& recoveries() const { return recoveries_; }
  // Fields report.json carries beside the methods.
  nlohmann::ordered_json& report() { return report_; }
  // The detail table's columns (keys of the rows' details, or of their policies).
  void columns(std::vector<std::string> keys) { columns_ = std::move(keys); }
  // A line printed under the tables.
  void note(std::string line) { notes_.push_back(std::move(line)); }
  // A PNG in the run directory: y_key against x_key of every row that has both, one line per value of
  // the rows' group_key, with the teacher and the pruned student as horizontal references.
  void plot(std::string file, std::string title, std::string x_key, std::string y_key, std::string group_key) {
    plots_.push_back({std::move(file), std::move(title), std::move(x_key), std::move(y_key), std::move(group_key)});
  }

  // The student's pruning, in place of the comparison's criterion at --ratio (before run): `fn` cuts the
  // teacher (depth-pruned first with --depth) on this seed's calibration loader and, when it removes
  // layers, puts the indices of the layers that remain into `kept` (the layer map follows them); `name`
  // labels the pruned row, config.json and every layer-wise run's policies. For a criterion chosen at
  // run time (policies::pruning::prune_named) without a comparison instantiated per criterion.
  using pruner = std::function<std::unique_ptr<net_t>(const net_t& teacher, const data::batch_loader& calib,
                                                      index_t calib_batches, std::vector<index_t>& kept)>;
  void prune_with(std::string name, pruner fn) {
    pruner_name_ = std::move(name);
    pruner_ = std::move(fn);
  }
  // The criterion that pruned the student: prune_with's name, or the comparison's criterion.
  std::string criterion_name() const { return pruner_ ? pruner_name_ : std::string(Criterion::name); }

  // The layer-wise pipeline on a copy of the pruned student, in <out>/<name>/ (started afresh), with the
  // bundle of the comparison's criterion and `entries` (slot<key::X>(policy)...; the rest default).
  template <class... Entries>
  recovery& recover(const std::string& name, pipeline_options po, Entries... entries) {
    const auto bundle = make_policies(slot<key::pruning>(criterion_), std::move(entries)...);
    if (pruner_) po.policy_labels["pruning"] = pruner_name_;
    auto labels = describe(bundle);
    for (const auto& [slot, label] : po.policy_labels) labels[slot] = label;
    const auto dir = prepare_run(name, labels, po.total);
    auto student = pruned_;
    po.resume = false;
    if (opt_.curve_points > 0 && !po.probe) {
      po.probe = [this](const student_state& s) { return eval::perplexity(*s.to_transformer(be_), curve_).perplexity(); };
      po.eval_every = curve_every(po.total);
    }
    auto pipe = make_pipeline(be_, bundle, po);
    const auto teacher_dir = teacher_.dir.string();
    auto& be = be_;
    auto teacher = [&] { return checkpoint::load_hf(be, teacher_dir, dtype::f32, model::frozen); };
    auto res = pipe.run(teacher, student, boundaries_, stream_->loader, dir);
    // The training batches the run read: its visits cycle over the cached ones (all of a visit's steps,
    // or the run's, with running_batches), its final KD stage reads batches 0, 1, ... afresh.
    long longest = 0;
    for (const auto& v : res.visits) longest = std::max(longest, v.steps);
    const long distinct = std::max(res.kd_steps, std::min<long>(po.feature_batches, po.running_batches ? res.segment_steps : longest));
    auto& r = record_pipeline(name, std::move(res), std::move(student), po.total);
    r.row.details["distinct_batches"] = distinct;
    return r;
  }

  // End-to-end logit KD (teacher and student resident) on a copy of the pruned student under `b`, with
  // the common learning rate; metrics and the student in <out>/<name>/. cycle_batches > 0: over that
  // many batches of the stream again and again (--feature-batches: the layer-wise methods' cached data).
  recovery& e2e_kd(const std::string& name, const budget& b, long cycle_batches = 0) {
    return e2e_kd(name, e2e_defaults(b, cycle_batches), b);
  }
  // The options e2e_kd(name, b, cycle_batches) trains with, for a program that changes some of them.
  e2e_options e2e_defaults(const budget& b, long cycle_batches = 0) const {
    e2e_options eo;
    eo.lr = opt_.lr;
    eo.min_lr = opt_.lr / 10;
    eo.cycle_batches = cycle_batches;
    eo.set_budget(b, opt_.batch * opt_.seq);
    return eo;
  }

  // The quality curves' sample (with --curve-points), and the step interval of a curve under budget `b`
  // (0 under a seconds budget, whose curves are spaced in seconds).
  const eval::held_out_sample& curve_sample() const { return curve_; }
  long curve_every(const budget& b) const {
    if (opt_.curve_points <= 0 || b.unit == budget_unit::seconds) return 0;
    return std::max<long>(1, static_cast<long>(steps_of(b)) / opt_.curve_points);
  }
  // The cost at which row `r`'s curve first reaches perplexity `target` (nothing without a curve or
  // when it never does).
  static std::optional<curve_point> reaching(const method_row& r, double target) {
    if (!r.details.contains("curve")) return std::nullopt;
    return first_reaching(r.details.at("curve").template get<std::vector<curve_point>>(), target);
  }
  recovery& e2e_kd(const std::string& name, const e2e_options& eo, const budget& b);

  // Groups (two or more) of methods whose students are bitwise the same, in the order they ran.
  std::vector<std::vector<std::string>> identical_students() const;

 private:
  static bool same_bits(const student_state& a, const student_state& b) {
    return a.params.size() == b.params.size() &&
           std::memcmp(a.params.data(), b.params.data(), a.params.size() * sizeof(double)) == 0;
  }

  // The teacher (trained when absent), the validation tokens, the pruned student, the training stream,
  // and the table's first two rows.
  void start();

  // Perplexity and cumulative error of a recovered student.
  method_row judge(const std::string& name, const student_state& s);
  // The --mc tasks' accuracies of every row as a Markdown table ("" without --mc).
  std::string mc_table(const std::vector<method_row>& rows) const;
  // Scores `net` on every --mc task into r.details.
  void score_mc(model::transformer<Backend>& net, method_row& r) {
    for (const auto& [task, items] : mc_) {
      const auto m = eval::multiple_choice(net, *mc_tok_, items, task);
      r.details["mc_" + task + "_acc"] = m.acc;
      r.details["mc_" + task + "_acc_stderr"] = m.acc_stderr;
      r.details["mc_" + task + "_acc_norm"] = m.acc_norm;
      r.details["mc_" + task + "_acc_norm_stderr"] = m.acc_norm_stderr;
      r.details["mc_" + task + "_n"] = m.n;
      mc_protocol_ = "zero-shot, lm-eval multiple_choice (summed log-likelihood of ' ' + choice given the context; "
                     "acc_norm divides by the choice's characters); +- the standard error";
    }
  }

  // <out>/<name>, emptied, after a line naming the run's policies and budget.
  std::filesystem::path prepare_run(const std::string& name, const std::map<std::string, std::string>& policies,
                                    const budget& b);

  recovery& record_pipeline(const std::string& name, pipeline_result res, student_state student, const budget& b);

  // A method's run, kept where a reference to it stays valid (the program may add to its row's details).
  recovery& keep(recovery r) {
    recoveries_.push_back(std::move(r));
    return recoveries_.back();
  }

  nlohmann::ordered_json config_json() const;

  // A seed (or a run of one seed) that a killed or earlier run finished: its report.json is there and its
  // config.json is what this run would write. Such a seed is not run again; with --seeds > 1 its rows are
  // read back for the summary. Every file is written whole (temporary name, then rename), so a seed is
  // either finished or run again from its start; a changed option runs it again.
  bool resume_finished_seed();

  void write_plot(const comparison_detail::plot_request& p, const std::vector<method_row>& rows) const;

  // quality_vs_seconds.png and quality_vs_flops.png: every row's curve; false when no row has one.
  bool write_curves(const std::vector<method_row>& rows) const;

  void finish(double seconds_so_far);
  // One seed done: its rows kept for the summary, the methods and what the body registered cleared.
  void keep_seed();
  void summarise_seeds(double seconds_so_far);

  std::string program_;
  CLI::App app_;
  options opt_;
  Criterion criterion_;
  std::string pruner_name_;
  pruner pruner_;
  Backend be_;
  budget total_;
  train::cached_lm teacher_;
  index_t teacher_parameters_ = 0;
  eval::held_out_sample val_, test_;  // test_: with --test-split only
  std::vector<std::pair<std::string, eval::held_out_sample>> extra_;  // --eval-splits: (ppl_<split>, its sample)
  eval::held_out_sample curve_;       // with --curve-points only
  // --mc: (task name, its items), scored with the data's tokenizer.
  std::vector<std::pair<std::string, std::vector<eval::mc_item>>> mc_;
  std::optional<tokenizer::byte_bpe> mc_tok_;
  // The teacher's row of the last start(), with what it was scored on and the validation protocol.
  std::optional<std::tuple<std::string, method_row, std::string>> teacher_row_;
  std::string mc_protocol_;
  std::vector<std::vector<std::int32_t>> err_batches_;
  std::string protocol_;
  student_state pruned_;
  std::vector<index_t> boundaries_;
  std::optional<training_stream> stream_;
  std::vector<method_row> rows_;  // teacher, pruned
  std::deque<recovery> recoveries_;
  nlohmann::ordered_json report_ = nlohmann::ordered_json::object();
  std::vector<std::string> columns_, notes_;
  std::vector<comparison_detail::plot_request> plots_;
  seed_rows per_seed_;  // with --seeds > 1
  std::vector<std::string> seed_columns_;  // the detail columns the first seed's body asked for
};

// ---- the members compiled once per instantiation (experiments: in lwcl_host_instances) ----

template <class Backend, policies::pruning_criterion Criterion>
auto comparison<Backend, Criterion>::e2e_kd(const std::string& name, const e2e_options& eo, const budget& b)
    -> recovery& {
  const std::filesystem::path dir = std::filesystem::path(opt_.out) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::printf("%s: end-to-end logit KD%s, teacher and student resident, budget %s\n", name.c_str(),
              eo.hidden_mse_weight > 0 ? " + hidden MSE" : "", b.str().c_str());
  const bool rss = reset_peak_resident();
  auto teacher = checkpoint::load_hf(be_, teacher_.dir.string(), dtype::f32, model::frozen);
  auto student = pruned_.to_transformer(be_);
  metrics_writer m((dir / "metrics.jsonl").string());
  e2e_options o = eo;
  if (opt_.curve_points > 0 && !o.probe) {
    // A copy of the student: evaluating the one in training would resize its activation buffers.
    o.probe = [&] { return eval::perplexity(*student_state::of(*student).to_transformer(be_), curve_).perplexity(); };
    o.eval_every = curve_every(b);
    if (b.unit == budget_unit::seconds) o.eval_every_seconds = b.amount / opt_.curve_points;
  }
  const auto res = train_e2e_kd(*teacher, *student, stream_->loader, opt_.batch, opt_.seq, o, &m);
  const std::size_t resident = rss ? peak_resident_bytes() : 0;
  teacher.reset();
  checkpoint::save_hf(*student, (dir / "student").string(), student_save_options(opt_));
  recovery r;
  r.student = student_state::of(*student);
  r.row = judge(name, r.student);
  r.row.peak_compute_bytes = static_cast<double>(res.peak_compute_bytes);
  r.row.run_peak_compute_bytes = static_cast<double>(res.peak_compute_bytes);
  r.row.peak_resident_bytes = static_cast<double>(resident);
  r.row.details["declared_compute_bytes"] = res.declared_compute_bytes;
  r.row.details["lr"] = o.lr;
  r.row.details["temperature"] = o.temperature;
  r.row.details["hidden_mse_weight"] = o.hidden_mse_weight;
  if (!res.curve.empty()) {
    r.row.details["curve"] = nlohmann::ordered_json(res.curve);
    r.row.details["eval_seconds"] = res.eval_seconds;
  }
  r.row.details["train_flops"] = res.flops;
  r.row.details["cpu_seconds"] = res.cpu_seconds;
  r.row.details["run_peak_total_bytes"] = res.peak_compute_bytes;
  r.row.wall_seconds = res.seconds;
  r.row.tokens = res.tokens;
  r.row.details["method"] = "e2e_kd";
  r.row.details["distinct_batches"] = eo.cycle_batches > 0 ? std::min(eo.cycle_batches, res.steps) : res.steps;
  r.row.details["budget"] = b.str();
  r.row.details["steps"] = res.steps;
  r.row.details["run_dir"] = dir.string();
  return keep(std::move(r));
}

template <class Backend, policies::pruning_criterion Criterion>
std::vector<std::vector<std::string>> comparison<Backend, Criterion>::identical_students() const {
  std::vector<std::vector<std::string>> groups;
  std::vector<bool> placed(recoveries_.size(), false);
  for (std::size_t i = 0; i < recoveries_.size(); ++i) {
    if (placed[i]) continue;
    std::vector<std::string> g = {recoveries_[i].row.name};
    for (std::size_t j = i + 1; j < recoveries_.size(); ++j)
      if (!placed[j] && same_bits(recoveries_[i].student, recoveries_[j].student)) {
        placed[j] = true;
        g.push_back(recoveries_[j].row.name);
      }
    if (g.size() > 1) groups.push_back(std::move(g));
  }
  return groups;
}

template <class Backend, policies::pruning_criterion Criterion>
void comparison<Backend, Criterion>::start() {
  namespace fs = std::filesystem;
  rows_.clear();
  const index_t B = opt_.batch, T = opt_.seq;
  teacher_ = train::ensure_lm(be_, opt_.data, opt_.teacher, "tiny");
  const auto eot = eval::end_of_text_id((fs::path(opt_.data) / "tokenizer").string());  // read once for every sample
  auto sample = [&](const char* split) { return eval::held_out_split(opt_.data, split, T, opt_.eval_tokens, eot); };
  val_ = sample("validation");
  if (opt_.test_split) test_ = sample("test");
  extra_.clear();
  for (const auto& split : opt_.eval_splits) {
    check(fs::exists(fs::path(opt_.data) / (split + ".bin")), program_, ": --eval-splits names '", split, "', but ",
          (fs::path(opt_.data) / (split + ".bin")).string(), " does not exist (prepare_data writes <split>.<corpus>.bin)");
    std::string key = "ppl_" + split;
    std::replace(key.begin(), key.end(), '.', '_');
    extra_.emplace_back(key, sample(split.c_str()));
  }
  mc_.clear();
  mc_tok_.reset();
  for (const auto& path : opt_.mc) {
    check(fs::exists(path), program_, ": --mc names '", path, "', which does not exist (python3 tools/make_mc_tasks.py "
          "writes data/mc/<task>.<split>.jsonl)");
    if (!mc_tok_) mc_tok_ = tokenizer::byte_bpe_of_folder(fs::path(opt_.data) / "tokenizer");
    mc_.emplace_back(mc_task_name(path), eval::read_mc_jsonl(path, opt_.mc_limit));
  }
  if (opt_.curve_points > 0) curve_ = eval::held_out_split(opt_.data, "validation", T, opt_.curve_tokens, eot);
  err_batches_ = eval::sample_batches(val_, B, T, 2);
  const data::shard train_shard((fs::path(opt_.data) / "train.bin").string());
  auto t = checkpoint::load_hf(be_, teacher_.dir.string());
  check(T <= t->config().max_seq, program_, ": --seq ", T, " exceeds the teacher's max_seq ", t->config().max_seq);
  teacher_parameters_ = t->num_parameters();
  timer clock;
  const auto calib = static_cast<index_t>(opt_.calib_batches);
  const data::batch_loader calib_loader(train_shard, B, T, seeded(0xC0FFEE, opt_.seed));  // this seed's calibration sample
  std::unique_ptr<net_t> p;
  std::vector<index_t> kept;
  if (opt_.depth > 0) {
    p = policies::pruning::prune_depth(*t, calib_loader, opt_.depth, calib, kept);
    std::string k;
    for (const auto l : kept) k += (k.empty() ? "" : " ") + std::to_string(l);
    std::printf("block_influence removes %.0f%% of the layers: %lld -> %lld, teacher layers kept: %s\n", 100 * opt_.depth,
                static_cast<long long>(t->config().n_layers()), static_cast<long long>(p->config().n_layers()), k.c_str());
  }
  if (pruner_) {
    const net_t& src = p ? *p : *t;
    std::vector<index_t> remain;
    auto w = pruner_(src, calib_loader, calib, remain);
    check(w != nullptr, program_, ": the pruner '", pruner_name_, "' returned no student");
    if (!remain.empty() && static_cast<index_t>(remain.size()) < src.config().n_layers()) {
      // Layers removed: the teacher layers kept, through the depth pruning's map when there was one.
      std::vector<index_t> composed;
      for (const index_t l : remain) composed.push_back(kept.empty() ? l : kept[static_cast<std::size_t>(l)]);
      kept = std::move(composed);
    }
    p = std::move(w);
  } else if (opt_.ratio > 0 || !p) {
    auto& src = p ? *p : *t;
    auto w = policies::pruning::prune_uniform(src, calib_loader, criterion_, opt_.ratio, calib);
    p = std::move(w);
  }
  const double prune_seconds = clock.seconds();
  auto block_parameters = [](const model::model_config& c) {
    double n = 0;
    for (const auto& L : c.layers) n += static_cast<double>(prune::layer_parameters(c, L));
    return n;
  };
  const double block0 = block_parameters(t->config()), block1 = block_parameters(p->config());
  const double removed_all = 1.0 - static_cast<double>(p->num_parameters()) / static_cast<double>(teacher_parameters_);
  std::printf("%s %.0f%%%s: %lld -> %lld parameters (%.1f%% removed; %.1f%% of the blocks') in "
              "%.1f s\n", criterion_name().c_str(), 100 * opt_.ratio, pruner_ ? "" : " of heads and FFN channels",
              static_cast<long long>(teacher_parameters_),
              static_cast<long long>(p->num_parameters()), 100 * removed_all, 100 * (1 - block1 / block0), prune_seconds);
  // The teacher's row depends on the teacher and the held-out samples alone, not on the seed or the
  // student: a program that runs the comparison many times (seeds, a sweep of settings) scores it once.
  std::string teacher_key = teacher_.dir.string() + "|" + opt_.data + "|" + std::to_string(T) + "|" +
                            std::to_string(opt_.eval_tokens) + "|" + std::to_string(opt_.test_split) + "|" +
                            std::to_string(opt_.curve_points) + "|" + std::to_string(opt_.curve_tokens) + "|" +
                            std::to_string(opt_.mc_limit);
  for (const auto& s : opt_.eval_splits) teacher_key += "|split " + s;
  for (const auto& m : opt_.mc) teacher_key += "|mc " + m;
  if (!teacher_row_ || std::get<0>(*teacher_row_) != teacher_key) {
    const auto pt = eval::perplexity(*t, val_);
    method_row tr;
    tr.name = "teacher";
    tr.val_ppl = pt.perplexity();
    if (opt_.test_split) tr.details["test_ppl"] = eval::perplexity(*t, test_).perplexity();
    for (const auto& [key, smp] : extra_) tr.details[key] = eval::perplexity(*t, smp).perplexity();
    if (opt_.curve_points > 0) tr.details["curve_ppl"] = eval::perplexity(*t, curve_).perplexity();
    score_mc(*t, tr);
    tr.wall_seconds = teacher_.seconds;
    tr.tokens = teacher_.tokens;
    teacher_row_.emplace(teacher_key, tr, pt.protocol());
  }
  protocol_ = std::get<2>(*teacher_row_);
  rows_.push_back(std::get<1>(*teacher_row_));
  pruned_ = student_state::of(*p);
  boundaries_ = !kept.empty() ? model::boundaries_of_kept_layers(kept, t->config().n_layers())
                              : model::identity_boundaries(p->config().n_layers());
  method_row pr;
  pr.name = "pruned";
  pr.val_ppl = eval::perplexity(*p, val_).perplexity();
  if (opt_.test_split) pr.details["test_ppl"] = eval::perplexity(*p, test_).perplexity();
  for (const auto& [key, smp] : extra_) pr.details[key] = eval::perplexity(*p, smp).perplexity();
  pr.cumulative_error = eval::cumulative_error(*t, *p, boundaries_, err_batches_, B, T);
  score_mc(*p, pr);
  pr.wall_seconds = prune_seconds;
  pr.tokens = static_cast<long>(opt_.calib_batches) * B * T;
  pr.details["criterion"] = criterion_name();
  pr.details["layers"] = p->config().n_layers();
  pr.details["boundaries"] = boundaries_;
  pr.details["parameters"] = p->num_parameters();
  pr.details["removed_fraction"] = removed_all;
  pr.details["block_removed_fraction"] = 1 - block1 / block0;
  stream_.emplace(opt_);
  // Which data this seed drew: the calibration batches and the first training batches every method reads.
  pr.details["calibration_hash"] = std::to_string(data::batches_hash(calib_loader, calib));
  pr.details["training_stream_hash"] = std::to_string(data::batches_hash(stream_->loader, 2));
  rows_.push_back(pr);
}

template <class Backend, policies::pruning_criterion Criterion>
method_row comparison<Backend, Criterion>::judge(const std::string& name, const student_state& s) {
  auto net = s.to_transformer(be_);
  method_row r;
  r.name = name;
  r.val_ppl = eval::perplexity(*net, val_).perplexity();
  if (opt_.test_split) r.details["test_ppl"] = eval::perplexity(*net, test_).perplexity();
  for (const auto& [key, smp] : extra_) r.details[key] = eval::perplexity(*net, smp).perplexity();
  score_mc(*net, r);
  auto teacher = checkpoint::load_hf(be_, teacher_.dir.string(), dtype::f32, model::frozen);
  r.cumulative_error = eval::cumulative_error(*teacher, *net, boundaries_, err_batches_, opt_.batch, opt_.seq);
  return r;
}

template <class Backend, policies::pruning_criterion Criterion>
std::string comparison<Backend, Criterion>::mc_table(const std::vector<method_row>& rows) const {
  if (mc_.empty()) return "";
  std::string md = "multiple choice: " + mc_protocol_ + "\n\n| method | task | n | acc | acc_norm |\n|---|---|---:|---:|---:|\n";
  for (const auto& r : rows)
    for (const auto& [task, items] : mc_) {
      const std::string k = "mc_" + task;
      if (!r.details.contains(k + "_acc")) continue;
      const auto v = [&](const std::string& f) { return r.details.at(k + f).template get<double>(); };
      md += report::format("| %s | %s | %zu | %.3f +- %.3f | %.3f +- %.3f |\n", r.name.c_str(), task.c_str(), items.size(),
                           v("_acc"), v("_acc_stderr"), v("_acc_norm"), v("_acc_norm_stderr"));
    }
  return md;
}

template <class Backend, policies::pruning_criterion Criterion>
std::filesystem::path comparison<Backend, Criterion>::prepare_run(const std::string& name,
                                                                 const std::map<std::string, std::string>& policies,
                                                                 const budget& b) {
  for (const auto& r : recoveries_) check(r.row.name != name, program_, ": two methods are named '", name, "'");
  const auto dir = std::filesystem::path(opt_.out) / name;
  std::filesystem::remove_all(dir);
  std::string d;
  for (const auto& [slot_name, policy] : policies) d += (d.empty() ? "" : ", ") + slot_name + " " + policy;
  std::printf("%s: %s, budget %s\n", name.c_str(), d.c_str(), b.str().c_str());
  return dir;
}

template <class Backend, policies::pruning_criterion Criterion>
auto comparison<Backend, Criterion>::record_pipeline(const std::string& name, pipeline_result res,
                                                     student_state student, const budget& b) -> recovery& {
  recovery r;
  r.row = judge(name, student);
  r.student = std::move(student);
  auto& row = r.row;
  row.peak_compute_bytes = static_cast<double>(std::max(res.peak_compute_bytes, res.kd_peak_compute_bytes));
  row.run_peak_compute_bytes = static_cast<double>(res.run_peak_compute_bytes);
  row.peak_resident_bytes = static_cast<double>(res.peak_resident_bytes);
  row.peak_cache_bytes = static_cast<double>(res.peak_cache_bytes);
  row.details["run_peak_total_bytes"] = res.run_peak_total_bytes;
  if (!res.curve.empty()) {
    row.details["curve"] = nlohmann::ordered_json(res.curve);
    row.details["eval_seconds"] = res.eval_seconds;
  }
  row.details["train_flops"] = res.flops;
  row.details["cpu_seconds"] = res.cpu_seconds;
  row.wall_seconds = res.seconds;
  row.tokens = res.tokens;
  const auto& u = res.cache.store;
  auto& d = row.details;
  d["method"] = "layerwise";
  d["budget"] = b.str();
  d["policies"] = res.policies;
  d["phases"] = res.phases;
  d["visits"] = res.visits.size();
  d["segment_steps"] = res.segment_steps;
  d["kd_steps"] = res.kd_steps;
  d["phase0_order"] = comparison_detail::first_phase_order(res);
  d["segments"] = comparison_detail::stages_text(res, r.student.config.n_layers());
  d["stall_fraction"] = res.step_seconds > 0 ? res.stall_seconds / res.step_seconds : 0.0;
  d["stall_seconds"] = res.stall_seconds;
  d["step_seconds"] = res.step_seconds;
  d["teacher_pass_seconds"] = res.teacher_pass_seconds;
  d["tier"] = std::string(tier_name(u.memory_tier));
  d["peak_stored_bytes"] = u.peak_stored_bytes;
  d["cache_compression_ratio"] = res.cache.compression_ratio();
  d["encode_seconds"] = u.codec.encode_seconds;
  d["decode_seconds"] = u.codec.decode_seconds;
  d["cache_hit_rate"] = res.cache.hit_rate();
  d["run_dir"] = (std::filesystem::path(opt_.out) / name).string();
  r.result = std::move(res);
  return keep(std::move(r));
}

template <class Backend, policies::pruning_criterion Criterion>
nlohmann::ordered_json comparison<Backend, Criterion>::config_json() const {
  nlohmann::ordered_json c = {{"program", program_},
                              {"backend", std::string(Backend::name)},
                              {"criterion", criterion_name()},
                              {"teacher_model", (std::filesystem::path(opt_.teacher) / "model").string()}};  // what start() loads
  for (const CLI::Option* o : app_.get_options()) {
    if (o->get_lnames().empty() || o->get_lnames().front() == "help") continue;
    std::string key = o->get_lnames().front();
    std::replace(key.begin(), key.end(), '-', '_');
    if (o->get_expected_min() == 0) {  // a flag
      c[key] = o->count() > 0;
      continue;
    }
    std::vector<std::string> values = o->results();
    if (values.empty() && !o->get_default_str().empty()) values = {o->get_default_str()};
    if (o->get_expected_max() > 1) {
      auto a = nlohmann::ordered_json::array();
      for (const auto& v : values) a.push_back(comparison_detail::option_value(v));
      c[key] = a;
    } else {
      c[key] = values.empty() ? nlohmann::ordered_json() : comparison_detail::option_value(values.back());
    }
  }
  c["budget"] = total_;
  // What the run used where a program set it after parsing (a sweep over settings in one process).
  c["ratio"] = opt_.ratio;
  c["depth"] = opt_.depth;
  return c;
}

template <class Backend, policies::pruning_criterion Criterion>
bool comparison<Backend, Criterion>::resume_finished_seed() {
  namespace fs = std::filesystem;
  const fs::path dir(opt_.out), report_path = dir / "report.json", config_path = dir / "config.json";
  if (!fs::exists(report_path) || !fs::exists(config_path)) return false;
  nlohmann::ordered_json done, rep;
  try {
    done = nlohmann::ordered_json::parse(read_text(config_path.string()));
    rep = nlohmann::ordered_json::parse(read_text(report_path.string()));
  } catch (const nlohmann::json::exception&) {
    return false;  // not lwcl's (files are written whole): run the seed again, which rewrites them
  }
  if (done != config_json() || !rep.contains("methods") || !rep.at("methods").is_array() || rep.at("methods").empty())
    return false;
  if (opt_.seeds > 1) {
    std::vector<method_row> rows;
    for (const auto& m : rep.at("methods")) rows.push_back(method_row::from_json(m));
    per_seed_.emplace_back(opt_.seed, std::move(rows));
    if (seed_columns_.empty() && rep.contains("table_columns"))
      seed_columns_ = rep.at("table_columns").template get<std::vector<std::string>>();
    if (rep.contains("val_protocol")) protocol_ = rep.at("val_protocol").template get<std::string>();
  }
  std::printf("%s: %s finished before with the same configuration (config.json, report.json): not run again\n",
              program_.c_str(), dir.string().c_str());
  return true;
}

template <class Backend, policies::pruning_criterion Criterion>
void comparison<Backend, Criterion>::write_plot(const comparison_detail::plot_request& p,
                                               const std::vector<method_row>& rows) const {
  report::chart chart;
  chart.title = p.title;
  chart.x_label = table_detail::header(p.x_key);
  chart.y_label = table_detail::header(p.y_key);
  std::vector<std::string> groups;
  std::map<std::string, report::series> lines;
  double x_hi = 0;
  for (const auto& row : rows) {
    const nlohmann::ordered_json j = row.to_json();
    if (!j.contains(p.x_key) || !j.contains(p.y_key) || !j.contains(p.group_key)) continue;
    const auto g = j.at(p.group_key).get<std::string>();
    if (!lines.count(g)) groups.push_back(g);
    auto& s = lines[g];
    s.label = g;
    s.x.push_back(j.at(p.x_key).get<double>());
    s.y.push_back(j.at(p.y_key).get<double>());
    x_hi = std::max(x_hi, s.x.back());
  }
  for (std::size_t i = 0; i < groups.size(); ++i) {
    auto s = lines.at(groups[i]);
    s.color = report::palette[i % report::palette.size()];
    for (std::size_t k = 0; k < s.x.size(); ++k) chart.lines.push_back({.label = "", .x = {s.x[k]}, .y = {s.y[k]}, .color = s.color, .lo = {}, .hi = {}});  // dots
    chart.lines.push_back(s);
  }
  for (std::size_t i = 0; i < 2 && i < rows_.size(); ++i) {  // teacher, pruned
    const nlohmann::ordered_json j = rows_[i].to_json();
    if (j.contains(p.y_key) && j.at(p.y_key).is_number())
      chart.lines.push_back({.label = rows_[i].name, .x = {0, x_hi},
                             .y = {j.at(p.y_key).get<double>(), j.at(p.y_key).get<double>()},
                             .color = report::palette[i == 0 ? 2 : 6], .lo = {}, .hi = {}});
  }
  report::write_png(chart, std::filesystem::path(opt_.out) / p.file);
}

template <class Backend, policies::pruning_criterion Criterion>
bool comparison<Backend, Criterion>::write_curves(const std::vector<method_row>& rows) const {
  bool any = false;
  for (const auto& [x_key, file, x_label] :
       {std::tuple<const char*, const char*, const char*>{"seconds", "quality_vs_seconds.png", "training wall seconds (evaluation excluded)"},
        {"flops", "quality_vs_flops.png", "model FLOPs"}}) {
    report::chart chart;
    chart.title = "held-out perplexity while training (" + curve_.protocol() + ")";
    chart.x_label = x_label;
    chart.y_label = "perplexity";
    std::size_t k = 0;
    double x_hi = 0;
    for (const auto& r : rows) {
      if (!r.details.contains("curve")) continue;
      report::series line;
      line.label = r.name;
      line.color = report::palette[k++ % report::palette.size()];
      for (const auto& q : r.details.at("curve")) {
        line.x.push_back(q.at(x_key).template get<double>());
        line.y.push_back(q.at("ppl").template get<double>());
        x_hi = std::max(x_hi, line.x.back());
      }
      chart.lines.push_back(line);
    }
    if (chart.lines.empty()) return false;
    if (!rows.empty() && rows.front().details.contains("curve_ppl")) {
      const double y = rows.front().details.at("curve_ppl").template get<double>();
      chart.lines.push_back({.label = "teacher", .x = {0, x_hi}, .y = {y, y}, .color = report::palette[2], .lo = {}, .hi = {}});
    }
    report::write_png(chart, std::filesystem::path(opt_.out) / file);
    any = true;
  }
  return any;
}

template <class Backend, policies::pruning_criterion Criterion>
void comparison<Backend, Criterion>::finish(double seconds_so_far) {
  namespace fs = std::filesystem;
  const auto rows = this->rows();
  std::printf("\nteacher %lld parameters, student %lld (%s as f32)\n", static_cast<long long>(teacher_parameters_),
              static_cast<long long>(pruned_.layout.numel()),
              report::human_bytes(static_cast<double>(pruned_.layout.numel()) * 4).c_str());
  print_table(rows, protocol_);
  if (opt_.test_split) {
    std::printf("\ntest perplexity: %s\n", test_.protocol().c_str());
    for (const auto& r : rows)
      if (r.details.contains("test_ppl")) std::printf("  %-26s %10.3f\n", r.name.c_str(), r.details.at("test_ppl").template get<double>());
  }
  print_details(rows, columns_);
  const std::string mc_md = mc_table(rows);
  if (!mc_md.empty()) std::printf("\n%s", mc_md.c_str());
  for (const auto& n : notes_) std::printf("%s\n", n.c_str());
  const auto identical = identical_students();
  for (const auto& g : identical) {
    std::string s;
    for (const auto& n : g) s += (s.empty() ? "" : ", ") + n;
    std::printf("bitwise the same student: %s\n", s.c_str());
  }
  const fs::path out(opt_.out);
  write_text_atomic(out / "config.json", config_json().dump(2) + "\n");
  nlohmann::ordered_json rep = {{"program", program_},
                                {"val_protocol", protocol_},
                                {"teacher_parameters", teacher_parameters_},
                                {"student_parameters", pruned_.layout.numel()}};
  if (opt_.test_split) rep["test_protocol"] = test_.protocol();
  for (const auto& [k, v] : report_.items()) rep[k] = v;
  rep["identical_students"] = identical;
  rep["table_columns"] = columns_;  // read back when a later run resumes over this seed
  rep["wall_seconds_total"] = seconds_so_far;
  nlohmann::ordered_json methods = nlohmann::ordered_json::array();
  std::vector<std::pair<std::string, std::vector<double>>> curves;
  for (const auto& r : rows) {
    methods.push_back(r.to_json());
    if (!r.cumulative_error.empty()) curves.emplace_back(r.name, r.cumulative_error);
  }
  rep["methods"] = methods;
  write_text_atomic(out / "report.json", rep.dump(2) + "\n");
  std::string md = markdown(rows, protocol_, columns_);
  if (opt_.test_split) {
    md += "\ntest perplexity: " + test_.protocol() + "\n\n| method | test ppl |\n|---|---:|\n";
    for (const auto& r : rows)
      if (r.details.contains("test_ppl")) md += report::format("| %s | %.3f |\n", r.name.c_str(), r.details.at("test_ppl").template get<double>());
  }
  md += mc_md.empty() ? "" : "\n" + mc_md;
  write_text_atomic(out / "table.md", md);
  std::string files = "config.json, report.json, table.md";
  if (!curves.empty()) {
    plot_cumulative_error(curves, out / "cumulative_error.png");
    files += ", cumulative_error.png";
  }
  for (const auto& p : plots_) {
    write_plot(p, rows);
    files += ", " + p.file;
  }
  if (write_curves(rows)) files += ", quality_vs_seconds.png, quality_vs_flops.png";
  std::printf("%s: wrote %s/ (%s, one folder per method) in %.0f s\n", program_.c_str(), opt_.out.c_str(),
              files.c_str(), seconds_so_far);
}

template <class Backend, policies::pruning_criterion Criterion>
void comparison<Backend, Criterion>::keep_seed() {
  per_seed_.emplace_back(opt_.seed, rows());
  if (seed_columns_.empty()) seed_columns_ = columns_;
  recoveries_.clear();
  report_ = nlohmann::ordered_json::object();
  columns_.clear();
  notes_.clear();
  plots_.clear();
}

template <class Backend, policies::pruning_criterion Criterion>
void comparison<Backend, Criterion>::summarise_seeds(double seconds_so_far) {
  const nlohmann::ordered_json methods = summarise_methods(per_seed_);
  const int seeds = static_cast<int>(per_seed_.size());
  print_seeds(methods, seeds, protocol_);
  std::vector<std::string> seed_names;
  for (const auto& [seed, rows] : per_seed_) seed_names.push_back("seed_" + std::to_string(seed));
  const std::filesystem::path out(opt_.out);
  write_text_atomic(out / "config.json", config_json().dump(2) + "\n");
  nlohmann::ordered_json rep = {{"program", program_},     {"val_protocol", protocol_}, {"seeds", seed_names},
                                {"methods", methods},      {"wall_seconds_total", seconds_so_far}};
  write_text_atomic(out / "report.json", rep.dump(2) + "\n");
  write_text_atomic(out / "table.md", seeds_markdown(methods, seeds, protocol_, seed_columns_));
  std::printf("%s: wrote %s/ (config.json, report.json, table.md over the seeds; one folder per seed) in %.0f s\n",
              program_.c_str(), opt_.out.c_str(), seconds_so_far);
}

}  // namespace lwcl::studies
