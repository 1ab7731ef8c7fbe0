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
#include "lwcl/eval/teacher_agreement.hpp"
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

// The values of a list option's default as CLI11 writes it ("[a,b]", "[]" for none; a lone value bare).
inline std::vector<std::string> default_values(const std::string& text) {
  if (text.size() < 2 || text.front() != '[' || text.back() != ']') return {text};
  std::vector<std::string> out;
  std::string item;
  for (const char ch : text.substr(1, text.size() - 2)) {
    if (ch != ',') {
      item += ch;
      continue;
    }
    out.push_back(item);
    item.clear();
  }
  if (!item.empty() || !out.empty()) out.push_back(item);
  return out;
}

// An option's key in config.json: its first long name with '-' as '_' (--e2e-lr: e2e_lr).
inline std::string option_key(const CLI::Option& o) {
  std::string key = o.get_lnames().front();
  std::replace(key.begin(), key.end(), '-', '_');
  return key;
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
  // Marks one of them as the sweep's: which cells run (settings, fractions, criteria, teachers), not what
  // a cell does. A seed's config.json records it, but a finished seed is read back whatever it says, so
  // that a cell finished by a run that named other cells (a sweep split over processors, or widened
  // later) is not run again.
  CLI::Option* sweep_option(CLI::Option* o) { return o->group(sweep_group); }
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
      // Freed buffers handed back to the system, so that no method's resident peak holds an earlier one's.
      mmap_threshold_ = pin_mmap_threshold();
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
  // config.json is what this run would write (sweep options aside). Such a seed is not run again; with
  // --seeds > 1 its rows are read back for the summary. Every file is written whole (temporary name, then rename), so a seed is
  // either finished or run again from its start; a changed option runs it again (an option the seed's
  // config.json lacks, left at its default here, is no change).
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
  std::size_t mmap_threshold_ = 0;  // glibc's mmap threshold as run() pinned it (0: the allocator's own)
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
  std::printf("%s: end-to-end logit KD%s, teacher and student resident%s%s, budget %s\n", name.c_str(),
              eo.hidden_mse_weight > 0 ? " + hidden MSE" : "", eo.checkpoint_activations ? ", activations checkpointed" : "",
              eo.micro_batches > 1 ? report::format(", %lld micro-batches a step", static_cast<long long>(eo.micro_batches)).c_str()
                                   : "",
              b.str().c_str());
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
  r.row.details["warmup_steps"] = o.warmup_steps;
  r.row.details["temperature"] = o.temperature;
  r.row.details["hidden_mse_weight"] = o.hidden_mse_weight;
  r.row.details["checkpoint_activations"] = o.checkpoint_activations;
  r.row.details["micro_batches"] = o.micro_batches;
  r.row.details["batch_bytes"] = res.batch_bytes;
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

}  // namespace lwcl::studies

// The rest of the members, by job: the teacher, samples and pruned student of a run, and how a student
// is judged; and what a run leaves (config.json, report.json, table.md, the plots, the seeds' summary).
#include "studies/comparison_start.hpp"
#include "studies/comparison_output.hpp"
