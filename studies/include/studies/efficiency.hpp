#pragma once
// The efficiency comparison of paper_repro's decoder tables: LWCL (the default bundle), layer-wise
// training without curriculum and end-to-end KD on one pruned student under one budget, the time to
// end-to-end KD's final quality read off the curves (studies/time_to_target.hpp), and the table
// and figures over the settings of a sweep, read back from each setting's report.json.

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "lwcl/core/error.hpp"
#include "lwcl/policies/bundle.hpp"
#include "lwcl/policies/cache/host.hpp"
#include "lwcl/policies/curriculum/curriculum.hpp"
#include "lwcl/policies/curriculum/teacher_inputs.hpp"
#include "lwcl/policies/curriculum/two_stage.hpp"
#include "lwcl/report/format.hpp"
#include "studies/options.hpp"
#include "studies/repro.hpp"
#include "studies/seeds.hpp"
#include "studies/table.hpp"
#include "studies/time_to_target.hpp"
#include "studies/validators.hpp"

namespace lwcl::studies::repro {

// The defaults of an efficiency table (before parse): the teacher, 3 seeds (2 with --quick), the test
// split scored, 12 curve points, the layer-wise methods' learning rate chosen on validation (4e-3).
inline void efficiency_defaults(studies::options& d, const std::string& teacher, bool quick) {
  d.teacher = teacher;
  d.seeds = quick ? 2 : 3;
  d.curve_points = quick ? 3 : 12;
  d.test_split = true;
  d.lr = 4e-3;
  if (quick) {  // 32 and 8 windows of 128 tokens: the error batches' 2 x 16, and more than the 7 documents
    d.eval_tokens = 4096;
    d.curve_tokens = 1024;
  }
}

// End-to-end KD's settings, chosen on validation like the layer-wise rate (experiments/evidence.md);
// memory_limited: also end-to-end KD as a user short of memory runs it (memory_limited_e2e).
// lwcl_kd_share > 0: also "lwcl_kd", LWCL closing with end-to-end KD on that share of its budget at
// kd_lr, with kd_hidden_mse times the last hidden states' MSE beside the logit KL and kd_warmup_steps of
// warm-up, its closing stage in kd_micro_batches micro-batches. The defaults are end-to-end KD's own rate
// and loss (2e-3, MSE weight 1), which beat logit KD alone at 1e-3 on validation
// (paper_repro/results/tune_closing: 23.904 against 23.946 at half the budget; the visits' rate throws
// the student off, experiments/evidence.md).
struct efficiency_knobs {
  double e2e_lr = 2e-3, e2e_hidden_mse = 1;
  long e2e_warmup_steps = 0;
  bool memory_limited = false;
  double lwcl_kd_share = 0, kd_lr = 2e-3, kd_hidden_mse = 1;
  long kd_warmup_steps = 0;
  index_t kd_micro_batches = 1;
};

inline void add_efficiency_knobs(CLI::App& cli, efficiency_knobs& k) {
  cli.add_option("--e2e-lr", k.e2e_lr, "end-to-end KD's peak learning rate (--lr is the layer-wise methods')")
      ->check(studies::positive);
  cli.add_option("--e2e-warmup-steps", k.e2e_warmup_steps, "end-to-end KD: steps of a linear learning-rate warm-up "
                 "before its cosine decay (--warmup-steps is the layer-wise visits')")->check(studies::within(0, 1000000));
  cli.add_option("--e2e-hidden-mse", k.e2e_hidden_mse, "weight of end-to-end KD's last-hidden-state MSE term (0: logit "
                 "KD alone)")->check(studies::non_negative);
  cli.add_option("--lwcl-kd-share", k.lwcl_kd_share, "also lwcl_kd: LWCL closing with end-to-end logit KD on this share "
                 "of its budget (0: not run; the stage holds teacher and student, end-to-end KD's memory)")
      ->check(CLI::Range(0.0, 0.95));
  cli.add_option("--kd-lr", k.kd_lr, "lwcl_kd's closing stage: its peak learning rate")->check(studies::positive);
  cli.add_option("--kd-hidden-mse", k.kd_hidden_mse, "lwcl_kd's closing stage: weight of a last-hidden-state MSE term "
                 "beside the logit KL (0: logit KD alone; --e2e-hidden-mse is end-to-end KD's)")->check(studies::non_negative);
  cli.add_option("--kd-warmup-steps", k.kd_warmup_steps, "lwcl_kd's closing stage: steps of a linear learning-rate "
                 "warm-up before its cosine decay")->check(studies::within(0, 1000000));
  cli.add_option("--kd-micro-batches", k.kd_micro_batches, "lwcl_kd's closing stage: each batch in this many micro-batches "
                 "with their gradients accumulated (a divisor of --batch; the same update, a smaller activation peak)")
      ->check(CLI::PositiveNumber);
  cli.add_flag("--e2e-memory-limited", k.memory_limited, "also end-to-end KD as a user short of memory runs it: with "
               "activation checkpointing (e2e_kd_checkpointed), and in micro-batches with gradient accumulation under "
               "LWCL's training peak (e2e_kd_capped)");
}

// --settings of a sweep over compression settings (parse_settings reads it); a sweep option (a finished
// setting is read back whichever others the command names).
inline void add_settings_option(CLI::App& cli, std::string& settings) {
  cli.add_option("--settings", settings, "the compression settings, comma-separated: ratio<r> (Wanda-sp on a fraction r "
                 "of every layer's heads and FFN channels), depth<d> (block influence on a fraction d of the layers) or both "
                 "joined by '+' (ratio0.7+depth0.5: half the layers removed, then 70% of the width of those kept)")
      ->group(studies::sweep_group);
}

// End-to-end KD's options at the knobs' learning rate and hidden-state MSE weight, under --budget.
template <class Comparison>
distill::e2e_options e2e_options_at(const Comparison& cmp, const efficiency_knobs& k) {
  auto eo = cmp.e2e_defaults(cmp.total());
  eo.lr = k.e2e_lr;
  eo.min_lr = k.e2e_lr / 10;
  eo.hidden_mse_weight = k.e2e_hidden_mse;
  eo.warmup_steps = k.e2e_warmup_steps;
  return eo;
}

// End-to-end KD ("e2e_kd") under --budget at the knobs (e2e_options_at).
// `Comparison`: a studies::comparison, here and below.
template <class Comparison>
studies::method_row& e2e_kd_at(Comparison& cmp, const efficiency_knobs& k) {
  return cmp.e2e_kd("e2e_kd", e2e_options_at(cmp, k), cmp.total()).row;
}

// The fewest micro-batches, a divisor of the batch of B sequences, that bring a run whose measured peak
// is `fixed` bytes plus `batch` bytes that scale with the micro-batch under `cap`; B (one sequence a
// micro-batch) when none does.
inline index_t micro_batches_under(double cap, double fixed, double batch, index_t B) {
  for (index_t m = 1; m <= B; ++m)
    if (B % m == 0 && fixed + batch / static_cast<double>(m) <= cap) return m;
  return B;
}

// End-to-end KD as a user short of memory runs it, beside the plain run `kd` and LWCL's row `lwcl`:
// "e2e_kd_checkpointed" (activation checkpointing), and "e2e_kd_capped", in the fewest micro-batches
// that bring kd's measured peak under LWCL's training peak (micro_batches_under), its row saying
// whether its own measured peak stayed under that cap.
template <class Comparison>
void memory_limited_e2e(Comparison& cmp, const efficiency_knobs& k, const studies::method_row& lwcl,
                        const studies::method_row& kd) {
  auto eo = e2e_options_at(cmp, k);
  eo.checkpoint_activations = true;
  cmp.e2e_kd("e2e_kd_checkpointed", eo, cmp.total());
  const double cap = lwcl.peak_compute_bytes, batch = kd.details.at("batch_bytes").template get<double>();
  eo.checkpoint_activations = false;
  eo.micro_batches = micro_batches_under(cap, kd.peak_compute_bytes - batch, batch, cmp.opt().batch);
  auto& capped = cmp.e2e_kd("e2e_kd_capped", eo, cmp.total()).row;
  capped.details["memory_cap_bytes"] = cap;
  capped.details["within_cap"] = capped.peak_compute_bytes <= cap;
  if (capped.peak_compute_bytes > cap)
    std::printf("e2e_kd_capped: %lld micro-batches of one sequence still hold %s, above LWCL's %s: the weights, gradients "
                "and moments alone exceed it\n", static_cast<long long>(eo.micro_batches),
                report::human_bytes(capped.peak_compute_bytes).c_str(), report::human_bytes(cap).c_str());
}

// With knobs.lwcl_kd_share > 0, "lwcl_kd": the default bundle whose two-stage curriculum closes with
// end-to-end KD on that share of the budget, at knobs.kd_lr with knobs.kd_hidden_mse.
// Returns its row, or nullptr when not asked for.
template <class Comparison>
studies::method_row* lwcl_kd_at(Comparison& cmp, const efficiency_knobs& k) {
  if (k.lwcl_kd_share <= 0) return nullptr;
  auto po = cmp.recovery_options();
  po.final_kd_share = k.lwcl_kd_share;
  po.kd_lr = k.kd_lr;
  po.kd_micro_batches = k.kd_micro_batches;
  po.kd_hidden_mse = k.kd_hidden_mse;
  po.kd_warmup_steps = k.kd_warmup_steps;
  policies::curriculum::two_stage<> c;
  c.final_kd = true;
  auto& row = cmp.recover("lwcl_kd", po, slot<key::cache>(policies::cache::host{}), slot<key::curriculum>(c)).row;
  row.details["final_kd_share"] = k.lwcl_kd_share;
  row.details["kd_lr"] = k.kd_lr;
  row.details["kd_micro_batches"] = k.kd_micro_batches;
  row.details["kd_hidden_mse"] = k.kd_hidden_mse;
  row.details["kd_warmup_steps"] = k.kd_warmup_steps;
  return &row;
}

// The recoveries of a table that compares students: "lwcl" (the default bundle over the host feature
// cache), "lwcl_kd" where asked for (lwcl_kd_at), then end-to-end KD at the knobs (e2e_kd_at), and with
// knobs.memory_limited the memory-limited end-to-end runs (memory_limited_e2e).
template <class Comparison>
void lwcl_and_e2e_kd(Comparison& cmp, const efficiency_knobs& k) {
  const auto& lwcl = cmp.recover("lwcl", cmp.recovery_options(), slot<key::cache>(policies::cache::host{})).row;
  lwcl_kd_at(cmp, k);
  const auto& kd = e2e_kd_at(cmp, k);
  if (k.memory_limited) memory_limited_e2e(cmp, k, lwcl, kd);
}

// The methods of an efficiency run, in this order: lwcl, layerwise_no_curriculum (unless left out),
// lwcl_kd (where asked for), e2e_kd; then the time to e2e_kd's final quality (report.json's "summary").
template <class Comparison>
void efficiency_methods(Comparison& cmp, const efficiency_knobs& k, bool no_curriculum = true) {
  namespace cur = lwcl::policies::curriculum;
  std::vector<studies::method_row*> layerwise;
  layerwise.push_back(&cmp.recover("lwcl", cmp.recovery_options(), slot<key::cache>(policies::cache::host{})).row);
  if (no_curriculum)
    layerwise.push_back(&cmp.recover("layerwise_no_curriculum", cmp.recovery_options(),
                                     slot<key::cache>(policies::cache::host{}),
                                     slot<key::curriculum>(cur::curriculum<cur::front_to_back, cur::teacher_inputs>{}))
                             .row);
  if (auto* with_kd = lwcl_kd_at(cmp, k)) layerwise.push_back(with_kd);
  auto& kd = e2e_kd_at(cmp, k);
  if (k.memory_limited) memory_limited_e2e(cmp, k, *layerwise.front(), kd);
  cmp.report()["summary"] = studies::time_to_target(cmp, kd, layerwise);
  cmp.columns(studies::time_to_target_columns());
}

// The --mc tasks' names, in the order given (their accuracy is mc_<name>_acc in every method's row).
inline std::vector<std::string> mc_tasks(const studies::options& o) {
  std::vector<std::string> names;
  for (const auto& path : o.mc) names.push_back(studies::mc_task_name(path));
  return names;
}

// The table's columns; each --mc task's accuracy after the perplexities.
inline std::vector<column> efficiency_columns(const studies::options& o) {
  std::vector<column> c = {{"test_ppl", "test ppl", unit::ppl},
          {"val_ppl", "val ppl", unit::ppl},
          {"kl_teacher", "KL to teacher", unit::cosine},
          {"top1_agreement", "top-1 agreement", unit::ratio},
          {"recovered_share", "recovered", unit::ratio},
          {"peak_compute_bytes", "peak training MiB", unit::mib},
          {"run_peak_compute_bytes", "run peak MiB", unit::mib},
          {"run_peak_total_bytes", "run + cache MiB", unit::mib, "run_peak_compute_bytes"},
          {"peak_resident_bytes", "peak RSS MiB", unit::mib},
          {"wall_seconds", "wall s", unit::seconds},
          {"cpu_seconds", "CPU s", unit::seconds},
          {"train_flops", "GFLOPs", unit::gflops},
          {"time_to_target_ratio", "wall x e2e to target", unit::ratio},
          {"flops_to_target_ratio", "FLOPs x e2e to target", unit::ratio},
          {"reached_target", "reached", unit::reached},
          {"equal_budget_ppl_ratio", "ppl / e2e at equal budget", unit::ratio}};
  for (const int q : gain_levels())  // wall time to a share of end-to-end KD's gain (time_to_target.hpp)
    c.push_back({time_to_level_key(q), report::format("wall x e2e to %d%% of its gain", q), unit::ratio});
  const auto tasks = mc_tasks(o);
  for (std::size_t i = 0; i < tasks.size(); ++i)
    c.insert(c.begin() + 2 + static_cast<std::ptrdiff_t>(i), {"mc_" + tasks[i] + "_acc", "acc " + tasks[i], unit::ratio});
  return c;
}

// A method's figures for the table: the seeds' summary, with the costs to the target taken over the
// seeds (their report.json, `seeds`) that reached it (the summary keeps a figure only when every seed has it).
inline json method_with_reach(const std::vector<json>& seeds, const json& summary_method) {
  json m = summary_method;
  const std::string name = m.at("name").get<std::string>();
  std::vector<std::string> keys = {"time_to_target_ratio", "flops_to_target_ratio"};
  for (const int q : gain_levels()) keys.push_back(time_to_level_key(q));
  for (const auto& key : keys) {
    std::vector<double> v;
    for (const auto& r : seeds)
      if (const auto* sm = method_of(r, name); sm && sm->contains(key)) v.push_back(sm->at(key).get<double>());
    if (v.empty()) continue;
    m[key] = seed_figure(v);
  }
  return m;
}

// The table over the settings of a sweep in <base>/<setting>/, its notes (each layer-wise method against
// end-to-end KD: training peak, time to its quality, test perplexity), and the figures of every setting.
inline void efficiency_report(const std::string& base, const std::string& heading, const std::vector<setting>& list,
                              const studies::options& o, double seconds) {
  std::vector<table> tables;
  std::vector<std::string> notes;
  json sources = json::array();
  const std::vector<std::string> methods = {"pruned", "layerwise_no_curriculum", "lwcl", "lwcl_kd", "e2e_kd"};
  for (const auto& s : list) {
    const fs::path dir = fs::path(base) / s.name;
    const json rep = read_json(dir / "report.json");
    const std::vector<std::string> trained = trained_methods(rep);
    const auto seeds_of = seed_reports(dir);
    sources.push_back((dir / "report.json").string());
    table t;
    t.label_headers = {"method"};
    t.columns = efficiency_columns(o);
    std::string shape;
    if (const auto* p = method_of(rep, "pruned")) {
      const auto layers = figure(*p, "layers"), removed = figure(*p, "removed_fraction");
      if (layers && removed)
        shape = report::format("; student %.0f layers, %.1f%% of all parameters removed", layers->mean, 100 * removed->mean);
    }
    const int seeds = static_cast<int>(seeds_of.size());
    t.title = report::format("%s: ratio %g, depth %g%s; %d seed%s", s.name.c_str(), s.ratio, s.depth, shape.c_str(),
                             seeds, seeds == 1 ? "" : "s");
    for (const char* name : {"teacher", "pruned"})
      if (const auto* m = method_of(rep, name)) {
        json q = {{"name", name}};  // quality only: their seconds are the teacher's training and the pruning
        for (const auto& [k, v] : m->items())
          if (k == "test_ppl" || k == "val_ppl" || k == "kl_teacher" || k == "top1_agreement" || k.starts_with("mc_"))
            q[k] = v;
        t.add({name == std::string("pruned") ? "pruned (no recovery)" : name}, q);
      }
    for (const auto& name : trained)
      if (const auto* m = method_of(rep, name)) t.add({name}, method_with_reach(seeds_of, *m));
    tables.push_back(t);
    // The claims: memory while training and time to equal quality against end-to-end KD.
    const auto* kd = method_of(rep, "e2e_kd");
    for (const char* name : {"lwcl", "layerwise_no_curriculum", "lwcl_kd"}) {
      const auto* m = method_of(rep, name);
      if (!m || !kd) continue;
      const json mr = method_with_reach(seeds_of, *m);
      const auto peak = figure(*m, "peak_compute_bytes"), kd_peak = figure(*kd, "peak_compute_bytes");
      const auto test = figure(*m, "test_ppl"), kd_test = figure(*kd, "test_ppl");
      const auto reached = figure(*m, "reached_target"), time = figure(mr, "time_to_target_ratio");
      std::string line = report::format("- %s, %s: training peak %.2f x end-to-end KD's", s.name.c_str(), name,
                                        peak && kd_peak && kd_peak->mean > 0 ? peak->mean / kd_peak->mean : 0.0);
      if (test && kd_test) line += report::format("; test perplexity %.3f against %.3f", test->mean, kd_test->mean);
      if (reached)
        line += report::format("; reaches end-to-end KD's final held-out perplexity in %d of %d seeds",
                               static_cast<int>(std::lround(reached->mean * reached->n)), reached->n);
      if (time) line += report::format(" (at %.2f x its wall time)", time->mean);
      notes.push_back(line + ".");
    }
    // End-to-end KD in LWCL's memory (--e2e-memory-limited): what micro-batching cost it.
    if (const auto* c = method_of(rep, "e2e_kd_capped"); c && kd) {
      const auto mb = figure(*c, "micro_batches"), peak = figure(*c, "peak_compute_bytes"), cap = figure(*c, "memory_cap_bytes");
      const auto val = figure(*c, "val_ppl"), kd_val = figure(*kd, "val_ppl"), wall = figure(*c, "wall_seconds"),
                 kd_wall = figure(*kd, "wall_seconds");
      if (mb && peak && cap && val && kd_val && wall && kd_wall && kd_wall->mean > 0)
        notes.push_back(report::format("- %s, e2e_kd_capped: %.0f micro-batches a step, training peak %.1f MiB against LWCL's "
                                       "%.1f MiB; validation perplexity %.3f against plain end-to-end KD's %.3f, at %.2f x "
                                       "its wall time.", s.name.c_str(), mb->mean, peak->mean / (1 << 20),
                                       cap->mean / (1 << 20), val->mean, kd_val->mean, wall->mean / kd_wall->mean));
    }
    const fs::path out(base);
    check(plot_cumulative_error(dir, methods, out / ("cumulative_error_" + s.name + ".png"),
                                "cumulative error by depth, " + s.name),
          "efficiency: no cumulative error in ", dir.string());
    check(plot_quality_vs_time(dir, trained, out / ("quality_vs_time_" + s.name + ".png"), "held-out perplexity, " + s.name),
          "efficiency: no held-out curves in ", dir.string(), " (give --curve-points)");
    check(plot_memory_over_time(dir, trained, out / ("memory_over_time_" + s.name + ".png"),
                                "memory while training, " + s.name),
          "efficiency: no step records with memory in ", dir.string());
  }
  notes.push_back("(mean +- sample sd over the seeds; costs to the target over the seeds that reached it; memory from "
                  "the tracker, and the process's peak resident set)");
  const json extra = {{"machine", machine()},
                      {"budget", o.budget},
                      {"seeds", o.seeds},
                      {"teacher", o.teacher},
                      {"sources", sources},
                      {"wall_seconds", seconds}};
  std::printf("machine: %s\n", machine().c_str());
  write_tables(base, heading, tables, notes, extra);
}

}  // namespace lwcl::studies::repro
