#pragma once
// The options every comparison program (and experiments/recover) takes on the command line, with the
// defaults of the tiny-teacher experiments, and what follows from them: the budget, the pipeline options
// every recovery starts from, and the training stream every method draws. Needs CLI11 (header-only).

#include <CLI/CLI.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "lwcl/data/loader.hpp"
#include "lwcl/data/shards.hpp"
#include "lwcl/distill/pipeline/budget.hpp"
#include "lwcl/distill/pipeline/options.hpp"
#include "lwcl/model/checkpoint/save_options.hpp"
#include "studies/dtype_option.hpp"
#include "studies/validators.hpp"

namespace lwcl::studies {

// The library's recovery vocabulary, which the harness speaks throughout.
using distill::budget;
using distill::budget_unit;
using distill::pipeline_options;

// The --help group of a sweep's own options (which settings, cells or scales run): config.json records
// them, and a finished seed is read back whatever they say, for a cell's seeds are the same whichever
// other cells the command names (comparison::sweep_option).
inline constexpr const char* sweep_group = "Sweep options (which cells run)";

struct options {
  std::string data = "data/prepared";
  std::string teacher = "runs/teacher_tiny_gpt2";  // a teacher run directory (recover: a model folder)
  std::string budget = "steps:400";
  std::string out;  // default: runs/<program>
  double lr = 2e-3, ratio = 0.5;  // ratio: the pruned fraction of every layer's KV groups and FFN channels
  int batch = 16, seq = 128, feature_batches = 12, calib_batches = 8;
  // The held-out sample (eval/held_out.hpp): predicted tokens in all, in windows of --seq over every
  // document of the split; the test split's sample is scored too only for a final table.
  int eval_tokens = 32768;
  bool test_split = false;
  // More held-out samples scored for the final tables, each <data>/<split>.bin (prepare_data writes
  // <split>.<corpus>.bin for each corpus: test.kjv, test.austen), reported as ppl_<split> ('.' -> '_').
  std::vector<std::string> eval_splits;
  // Repeated runs: seeds seed, seed + 1, ... (each its own calibration sample and training-data order;
  // the teacher and the held-out sample stay); seed 0 draws what a single run always drew.
  int seeds = 1;
  std::uint64_t seed = 0;
  // Depth: the fraction of the teacher's layers removed (block influence on the calibration batches,
  // before any width pruning), the layer map recording which teacher layers each student layer replaces.
  double depth = 0;
  // The quality curve (distill/curve.hpp): every method's held-out perplexity at about curve_points
  // evenly spaced points of its budget (and, layer-wise, after every visit), on a sample of curve_tokens
  // predicted tokens over every validation document; 0 points: no curve.
  int curve_points = 0;
  int curve_tokens = 8192;
  // Zero-shot multiple-choice tasks every method is scored on (eval/multiple_choice.hpp, lm-eval's
  // protocol; jsonl files such as tools/make_mc_tasks.py writes), the first mc_limit items of each
  // (0: all), reported as mc_<task>_acc and mc_<task>_acc_norm.
  std::vector<std::string> mc;
  int mc_limit = 0;
  // The dtype of every student's weights as written (f32, bf16 or f16).
  std::string save_dtype = "f32";
  // The arithmetic of the host GEMMs (studies/dtype_option.hpp): f32 or bf16; empty until the option is
  // added, which fills in LWCL_GEMM_PRECISION's value or f32.
  std::string dtype;
  // Each layer-wise visit's schedule (distill::pipeline_options): warm-up steps, the fewest steps a visit
  // is planned with, how the layer-wise budget is shared among the visits (equal or difficulty), and
  // whether a segment's optimiser state is kept across its visits, whether a visit with nothing to learn
  // (exactly 0 loss on the teacher's inputs) ends after its first step.
  long warmup_steps = 10, min_visit_steps = 1;
  std::string budget_share = "equal";
  bool keep_optimizer_state = false, end_exact_visits = false;
};

// The name a --mc task file's scores go by (mc_<name>_acc, ...): its file name without the extension,
// '.' and '-' made '_' (data/mc/kjv_next_verse.test.jsonl: kjv_next_verse_test).
inline std::string mc_task_name(const std::string& path) {
  std::string name = std::filesystem::path(path).stem().string();
  for (char& c : name)
    if (c == '.' || c == '-') c = '_';
  return name;
}

// The seed of a loader for run seed `s`: `base` for seed 0 (what a single run draws), another stream
// for every other seed.
inline std::uint64_t seeded(std::uint64_t base, std::uint64_t s) {
  return s == 0 ? base : base ^ (0x9E3779B97F4A7C15ULL * s + 0x632BE59BD9B4E019ULL);
}

// The options of a recovery study whatever its model: --budget (`budget_help` says what it means),
// --ratio, --depth, --lr, --batch, --seq, --feature-batches, --calib-batches, --test-split, --seeds,
// --seed, --curve-points, --dtype and --out; `pruning` false leaves out --ratio, --depth and --calib-batches (for
// a program handed a pruned student). A program with other defaults sets them in `o` first.
inline void add_recovery_options(CLI::App& app, options& o, const std::string& budget_help, bool pruning = true) {
  app.add_option("--budget", o.budget, budget_help);
  if (pruning)
    app.add_option("--ratio", o.ratio, "fraction of heads (KV groups) and FFN channels pruned")
        ->check(studies::within(0.0, 0.95));
  if (pruning)
    app.add_option("--depth", o.depth, "fraction of the teacher's layers removed by block influence (0.5: depth halved), "
                   "before --ratio's width pruning")->check(studies::within(0.0, 0.9));
  app.add_option("--lr", o.lr, "peak learning rate of every recovery")->check(studies::positive);
  app.add_option("--batch", o.batch, "sequences per batch")->check(studies::positive);
  app.add_option("--seq", o.seq, "tokens per sequence")->check(studies::positive);
  app.add_option("--feature-batches", o.feature_batches, "batches whose boundary features the layer-wise methods cache")
      ->check(studies::positive);
  if (pruning)
    app.add_option("--calib-batches", o.calib_batches, "calibration batches of the pruning criterion")
        ->check(studies::positive);
  app.add_flag("--test-split", o.test_split, "also score every method on the test split's sample (final tables only: "
               "choose settings on validation)");
  app.add_option("--seeds", o.seeds, "runs of every method, seeds --seed, --seed + 1, ... (calibration sample and data "
                 "order); with more than one, mean and standard deviation over them")->check(studies::positive);
  app.add_option("--seed", o.seed, "the first seed (0: the single run's calibration sample and data order)");
  app.add_option("--curve-points", o.curve_points, "held-out quality (perplexity; an encoder's embedding distance) at this "
                 "many points of every method's budget (and after every layer-wise visit); time to quality is read off "
                 "these curves (0: none)")->check(studies::non_negative);
  app.add_option("--warmup-steps", o.warmup_steps, "layer-wise visits: steps of a linear learning-rate warm-up at the "
                 "start of every visit (at most half of it; 0: none)")->check(studies::non_negative);
  app.add_option("--min-visit-steps", o.min_visit_steps, "layer-wise visits: the fewest steps a visit is planned with "
                 "(a steps budget too small is refused; under seconds a visit runs past its share to reach it)")
      ->check(studies::positive);
  app.add_option("--budget-share", o.budget_share, "layer-wise visits: the budget shared equally, or within each phase "
                 "in proportion to each segment's measured initial loss (difficulty)")
      ->check(CLI::IsMember({"equal", "difficulty"}));
  app.add_flag("--keep-optimizer-state", o.keep_optimizer_state, "layer-wise visits: a segment's AdamW moments and step "
               "count kept from one visit to its next (held in host memory), instead of a fresh AdamW every visit");
  app.add_flag("--end-exact-visits", o.end_exact_visits, "layer-wise visits: a visit whose first step has exactly 0 "
               "loss on the teacher's inputs (its segment already computes the teacher's function, as a kept layer of a "
               "depth-pruned student does) ends there, its time going to the visits after it");
  add_dtype_option(app, o.dtype);
  app.add_option("--out", o.out, "run directory");
}

// Every option of a comparison: --data --teacher, the recovery options above, and the held-out samples
// and tasks (--eval-tokens --eval-splits --curve-tokens --mc --mc-limit) and --save-dtype.
inline void add_options(CLI::App& app, options& o, const std::string& budget_help, bool pruning = true) {
  app.add_option("--data", o.data, "prepared data (tools/fetch_corpus.sh, experiments/prepare_data)");
  app.add_option("--teacher", o.teacher, "teacher run directory; trained (resumably) when it has no model/ yet");
  add_recovery_options(app, o, budget_help, pruning);
  app.add_option("--eval-tokens", o.eval_tokens, "predicted tokens of the held-out sample (windows of --seq over "
                 "every validation document)")->check(studies::positive);
  app.add_option("--eval-splits", o.eval_splits, "more held-out samples every method is scored on, each <data>/<split>.bin "
                 "(e.g. test.kjv,test.austen: one corpus's test documents), reported as ppl_<split>")
      ->delimiter(',');
  app.add_option("--curve-tokens", o.curve_tokens, "predicted tokens of the curves' held-out sample (windows of --seq "
                 "over every validation document)")->check(studies::positive);
  app.add_option("--mc", o.mc, "zero-shot multiple-choice task files every method is scored on (jsonl: context, choices, "
                 "gold; tools/make_mc_tasks.py writes data/mc/*.jsonl), comma-separated: acc and acc_norm by lm-eval's "
                 "protocol")->delimiter(',');
  app.add_option("--mc-limit", o.mc_limit, "score only the first N items of each --mc task (0: all)")
      ->check(studies::non_negative);
  app.add_option("--save-dtype", o.save_dtype, "weights of every student written: f32, bf16 or f16 (rounded to nearest "
                 "even; training is in f32 either way)")->check(CLI::IsMember({"f32", "bf16", "f16"}));
}

// How every student is written: --save-dtype, with the teacher's tokenizer (its model/ folder for a
// teacher run directory, else the teacher folder itself).
inline checkpoint::hf_save_options student_save_options(const options& o) {
  namespace fs = std::filesystem;
  const fs::path t(o.teacher);
  return {checkpoint::parse_save_dtype(o.save_dtype), fs::exists(t / "model" / "config.json") ? (t / "model").string() : t.string()};
}

// A --budget option: a plain number is seconds, otherwise steps:N, tokens:N or seconds:N.
inline budget budget_option(std::string text) {
  if (text.find(':') == std::string::npos) text = "seconds:" + text;
  return distill::parse_budget(text);
}

// The pipeline options every recovery starts from: the budget `total`, the peak learning rate `lr`
// decaying to a tenth of it, and `feature_batches` cached feature batches.
inline pipeline_options recovery_options(budget total, double lr, index_t feature_batches) {
  pipeline_options po;
  po.total = total;
  po.lr = lr;
  po.min_lr = lr / 10;
  po.feature_batches = feature_batches;
  return po;
}

// The visits' schedule as the options say (--warmup-steps, --min-visit-steps, --budget-share,
// --keep-optimizer-state, --end-exact-visits).
inline void visit_schedule_options(pipeline_options& po, const options& o) {
  po.warmup_steps = o.warmup_steps;
  po.min_visit_steps = o.min_visit_steps;
  po.share = distill::parse_budget_share(o.budget_share);
  po.keep_optimizer_state = o.keep_optimizer_state;
  po.end_exact_visits = o.end_exact_visits;
}

// The same from the common options, with the visits' schedule and the student saved as they say
// (--save-dtype, the tokenizer).
inline pipeline_options recovery_options(const options& o, budget total) {
  pipeline_options po = recovery_options(total, o.lr, o.feature_batches);
  visit_schedule_options(po, o);
  po.student_as = student_save_options(o);
  return po;
}

// The training batches every method draws: train.bin in batches of --batch x --seq under one seed (the
// run's --seed), so that all methods see the same stream. It stays where it is made: the loader refers to the shard.
struct training_stream {
  data::shard shard;
  data::batch_loader loader;

  explicit training_stream(const options& o)
      : shard((std::filesystem::path(o.data) / "train.bin").string()), loader(shard, o.batch, o.seq, seeded(0x5EED, o.seed)) {}
  training_stream(const training_stream&) = delete;
  training_stream& operator=(const training_stream&) = delete;
};

}  // namespace lwcl::studies
