// pruning_methods: the paper's table of pruning methods under equal training time on the LLaMA and Qwen
// families. Every criterion lwcl has, each with the allocation it is published with (FLAP: KV groups and
// FFN channels ranked together across layers by parameter cost, with bias compensation; block influence:
// whole layers; the rest: the same ratio in every layer, whole KV groups), cuts the deep llama and qwen2
// teachers (8 layers, GQA) to 20%, 35% and 50% fewer parameters; each student is left as it is, and the
// students of the criteria that matter for recovery (--recover: random, the floor; Wanda-sp, the criterion
// every other table prunes with; FLAP, published with its bias compensation; block influence, the one that
// removes whole layers) are also recovered by end-to-end KD and by LWCL, the two under the same budget (60 s
// each, 3 seeds). A recovery seed that trained fewer than --min-steps optimiser steps is marked in the
// table's "short" column, never averaged in unseen. Reports
// held-out perplexity on each sample of --eval-splits (test.kjv, test.austen: one corpus's test documents;
// for a teacher trained on one corpus, prepare_data --train-corpus, the other is out of its domain), or
// without them on the test split (every test document of both corpora), and each recovery's peak memory from the
// tracker. Writes <out>/<teacher>/<criterion>_<fraction>/ (one comparison run directory each) and in
// <out>/ table.md, table.csv and tables.json.
//   pruning_methods [--quick] [--teachers DIR[@DATA],...] [--criteria a,b,...] [--recover a,b,...]
//                   [--fractions 0.2,0.35,0.5] [--min-steps N] [--eval-splits test.kjv,test.austen]
//                   [--mc TASK.jsonl,... --mc-limit N]
// With --mc, a second table per teacher holds every student's zero-shot multiple-choice accuracy.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "host_instances.hpp"
#include "studies/efficiency.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/policies/pruning/by_name.hpp"
#include "lwcl/core/program.hpp"

using namespace lwcl;
namespace pr = lwcl::studies::repro;
namespace pp = lwcl::policies::pruning;
namespace fs = std::filesystem;

namespace {

using sample_list = std::vector<std::pair<std::string, std::string>>;  // (column key, split)
// The criteria recovered by default: the floor, the criterion every other table prunes with, the published
// method with bias compensation, and the one that removes whole layers.
const std::string default_recover = "random,wanda_sp,flap,block_influence";
// The methods of a cell; lwcl_kd with --lwcl-kd-share.
using method_list = std::vector<pr::method_columns>;
method_list cell_methods(bool with_kd) {
  method_list m = {{"pruned", "pruned_", "no recovery"}, {"e2e_kd", "e2e_", "e2e KD"}, {"lwcl", "lwcl_", "LWCL"}};
  if (with_kd) m.push_back({"lwcl_kd", "lwcl_kd_", "LWCL+KD"});
  return m;
}

// The teacher's family (it names the table) and what it was trained on, from its model/ and the data's summary.json.
std::string table_title(const std::string& teacher, const std::string& data) {
  std::string family = fs::path(teacher).filename().string();
  if (fs::exists(fs::path(teacher) / "model" / "config.json"))
    family = std::string(model::family_name(checkpoint::read_hf_config((fs::path(teacher) / "model").string()).fam));
  std::string trained_on = "both corpora";
  const fs::path data_summary = fs::path(data) / "summary.json";
  if (fs::exists(data_summary))
    if (const auto j = pr::read_json(data_summary); j.contains("train_corpus"))
      trained_on = j.at("train_corpus").get<std::string>() + " only";
  return family + " (" + teacher + ", trained on " + trained_on + "): held-out perplexity after equal training time";
}

// A teacher's perplexity table: the fraction removed, each method's perplexity on each sample, the peaks.
pr::table perplexity_table(const std::string& title, const sample_list& samples, const method_list& methods) {
  pr::table t;
  t.title = title;
  t.label_headers = {"removed", "criterion"};
  t.columns = {{"removed_fraction", "params removed", pr::unit::ratio}};
  for (const auto& [key, split] : samples)
    for (const auto& [name, prefix, label] : methods) t.columns.push_back({prefix + key, label + " " + split, pr::unit::ppl});
  pr::add_peak_columns(t, methods);
  for (const auto& [name, prefix, label] : methods)
    if (name != "pruned") t.columns.push_back({prefix + "steps", label + " steps", pr::unit::count});
  t.columns.push_back({"short", "short", pr::unit::text});
  return t;
}

// With --mc: each task's accuracy (lm-eval's acc) of the same students.
pr::table accuracy_table(const std::vector<std::string>& tasks, const method_list& methods) {
  pr::table mc;
  mc.label_headers = {"removed", "criterion"};
  for (const auto& task : tasks)
    for (const auto& [name, prefix, label] : methods)
      mc.columns.push_back({prefix + ("mc_" + task + "_acc"), label + " acc " + task, pr::unit::ratio});
  return mc;
}

// A figure of a method per seed (one value for a single seed); empty when the method lacks it.
std::vector<double> per_seed(const pr::json& m, const std::string& key) {
  if (!m.contains(key)) return {};
  const auto& v = m.at(key);
  if (v.is_number()) return {v.get<double>()};
  if (v.is_object() && v.contains("values")) return v.at("values").get<std::vector<double>>();
  return {};
}

// The optimiser steps of a recovery in each seed: end-to-end KD's steps, LWCL's segment and KD steps.
std::vector<double> steps_per_seed(const pr::json& m) {
  auto steps = per_seed(m, "steps");
  if (!steps.empty()) return steps;
  steps = per_seed(m, "segment_steps");
  const auto kd = per_seed(m, "kd_steps");
  for (std::size_t i = 0; i < steps.size() && i < kd.size(); ++i) steps[i] += kd[i];
  return steps;
}

// A cell's row of both tables from its report.json: every figure of each method under its prefix; each
// recovery's steps (mean over the seeds) and, in "short", the seeds of each that trained fewer than
// min_steps steps ("e2e KD 1/3, LWCL 2/3"; "-" when none did).
pr::json cell_row(const pr::json& rep, const sample_list& samples, const std::vector<std::string>& tasks, long min_steps,
                  const method_list& methods) {
  pr::json row = pr::json::object();
  const auto copy = [&](const char* method, const std::string& key, const std::string& as) {
    if (const auto* m = pr::method_of(rep, method); m && m->contains(key)) row[as] = m->at(key);
  };
  copy("pruned", "removed_fraction", "removed_fraction");
  std::vector<std::string> keys = {"val_ppl", "peak_compute_bytes", "run_peak_total_bytes"};
  for (const auto& [key, split] : samples) keys.push_back(key);
  for (const auto& task : tasks) keys.push_back("mc_" + task + "_acc");
  for (const auto& key : keys)
    for (const auto& [name, prefix, label] : methods) copy(name.c_str(), key, prefix + key);
  std::string marks;
  for (const auto& [name, prefix, label] : methods) {
    if (name == "pruned") continue;
    const std::string as = prefix + "steps";
    const auto* m = pr::method_of(rep, name);
    if (!m) continue;
    const auto steps = steps_per_seed(*m);
    if (steps.empty()) continue;
    double sum = 0;
    int short_seeds = 0;
    for (const double n : steps) {
      sum += n;
      short_seeds += n < static_cast<double>(min_steps) ? 1 : 0;
    }
    row[as] = sum / static_cast<double>(steps.size());
    if (short_seeds > 0)
      marks += report::format("%s%s %d/%zu", marks.empty() ? "" : ", ", label.c_str(), short_seeds, steps.size());
  }
  row["short"] = marks.empty() ? "-" : marks;
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = pr::quick_requested(argc, argv);
  experiments::comparison cmp("pruning_methods", "paper_repro pruning_methods: every pruning criterion x {no recovery, "
                              "end-to-end KD, LWCL} at 20%, 35% and 50% of the parameters, under equal training time",
                              quick ? "steps:8" : "60", "budget of each recovery: seconds (a plain number), steps:N or tokens:N");
  auto& d = cmp.defaults();
  d.lr = 4e-3;
  d.seeds = quick ? 1 : 3;
  d.test_split = true;
  d.eval_tokens = quick ? 4096 : 16384;  // quick: 32 windows of 128, the error batches' 2 x 16
  bool quick_flag = false;
  std::string teachers = "runs/teacher_deep_llama,runs/teacher_deep_qwen2", criteria,
              recover = default_recover, fractions = quick ? "0.35" : "0.2,0.35,0.5";
  long min_steps = 20;
  for (const auto c : pp::criteria) {
    if (!criteria.empty()) criteria += ",";
    criteria += c;
  }
  pr::efficiency_knobs k;
  cmp.cli().add_flag("--quick", quick_flag, "a run of about a minute: small budgets and samples, one fraction (35%)");
  // Which cells run: a cell finished by a run that named other teachers, criteria or fractions is read
  // back (say the fractions split over the two processors, then the whole table).
  cmp.sweep_option(cmp.cli().add_option("--teachers", teachers, "teacher run directories, comma-separated (trained by "
                                        "train_teacher --preset deep; each a table of its own), each DIR or DIR@DATA (the "
                                        "prepared data it was trained on, when not --data)"));
  cmp.sweep_option(cmp.cli().add_option("--criteria", criteria, std::string("pruning criteria, comma-separated, of: ") +
                                        pp::criterion_names));
  cmp.cli().add_option("--recover", recover, "the criteria whose students are also recovered by end-to-end KD and "
                       "LWCL, comma-separated, where --criteria has them (every criterion is scored without recovery)");
  cmp.sweep_option(cmp.cli().add_option("--fractions", fractions, "fractions of all parameters removed, comma-separated"));
  cmp.sweep_option(cmp.cli().add_option("--min-steps", min_steps, "a recovery seed that trained fewer optimiser steps is "
                                        "marked in the table's short column"))->check(CLI::NonNegativeNumber);
  pr::add_efficiency_knobs(cmp.cli(), k);
  if (const int rc = cmp.parse(argc, argv); rc >= 0) return rc;
  // The --eval-splits samples are each corpus's test documents; the combined sample would repeat them.
  if (!cmp.opt().eval_splits.empty()) d.test_split = false;

  return lwcl::guard_main([&] {
    const auto teacher_list = pr::split_list(teachers), criterion_list = pr::split_list(criteria),
               recover_list = pr::split_list(recover);
    std::vector<double> fraction_list;
    for (const auto& f : pr::split_list(fractions))
      fraction_list.push_back(pr::parse_fraction(f, 0.9, "pruning_methods: --fractions"));
    for (const auto& c : criterion_list)
      check(pp::known_criterion(c), "pruning_methods: criterion '", c, "' is unknown (expected ", pp::criterion_names, ")");
    // A recovered criterion this run does not prune with is left out here, so that a table split over
    // processors by --criteria keeps one --recover (a cell's configuration) in every part.
    for (const auto& c : recover_list)
      check(pp::known_criterion(c), "pruning_methods: --recover names '", c, "', which is not a criterion (expected ",
            pp::criterion_names, ")");
    check(!teacher_list.empty() && !criterion_list.empty() && !fraction_list.empty(),
          "pruning_methods: --teachers, --criteria and --fractions each need at least one entry");
    const std::string base = cmp.opt().out;
    const method_list methods = cell_methods(k.lwcl_kd_share > 0);
    const std::size_t cells = teacher_list.size() * criterion_list.size() * fraction_list.size();
    pr::sweep_progress progress("pruning_methods", std::vector<double>(cells, 1.0));
    std::vector<pr::table> tables;
    std::vector<std::string> notes;
    pr::json sources = pr::json::array();
    std::size_t cell = 0;
    const std::string data = cmp.opt().data;
    // The held-out samples of the table: each --eval-splits sample, or without them the test split.
    std::vector<std::pair<std::string, std::string>> samples;
    if (cmp.opt().test_split) samples.emplace_back("test_ppl", "test");
    for (const auto& split : cmp.opt().eval_splits) {
      std::string key = "ppl_" + split;
      std::replace(key.begin(), key.end(), '.', '_');
      samples.emplace_back(key, split);
    }
    for (const auto& spec : teacher_list) {
      const auto at = spec.find('@');
      const std::string teacher = spec.substr(0, at);
      cmp.defaults().teacher = teacher;
      cmp.defaults().data = at == std::string::npos ? data : spec.substr(at + 1);
      // A teacher not trained yet is trained by the first run (its preset tiny).
      pr::table t = perplexity_table(table_title(teacher, cmp.opt().data), samples, methods);
      const auto tasks = pr::mc_tasks(cmp.opt());
      pr::table mc = accuracy_table(tasks, methods);
      std::string teacher_acc;
      int mc_items = 0;
      const std::string teacher_name = fs::path(teacher).filename().string();
      for (const double fraction : fraction_list)
        for (const auto& criterion : criterion_list) {
          const std::string name = criterion + "_" + report::format("%g", fraction);
          progress.begin(cell++, teacher_name + " " + name);
          cmp.prune_with(criterion, [&, criterion, fraction](const experiments::comparison::net_t& src,
                                                            const data::batch_loader& calib, index_t calib_batches,
                                                            std::vector<index_t>& kept) {
            pp::named_options no;
            no.criterion = criterion;
            no.alloc = pp::published_allocation(criterion);
            no.param_ratio = fraction;
            no.calib_batches = calib_batches;
            no.seed = cmp.opt().seed;
            auto cut = pp::prune_named(src, calib, no);
            kept = cut.kept;
            return std::move(cut.student);
          });
          const pr::setting s{teacher_name + "/" + name, fraction, 0};
          const bool recovered = std::find(recover_list.begin(), recover_list.end(), criterion) != recover_list.end();
          const int rc = pr::run_setting(cmp, base, s, [&] {
            if (recovered) pr::lwcl_and_e2e_kd(cmp, k);
          });
          if (rc != 0) return rc;
          const fs::path dir = fs::path(base) / s.name;
          const pr::json rep = pr::read_json(dir / "report.json");
          sources.push_back((dir / "report.json").string());
          const pr::json row = cell_row(rep, samples, tasks, min_steps, methods);
          t.add({report::format("%.0f%%", 100 * fraction), criterion}, row);
          if (tasks.empty()) continue;
          mc.add({report::format("%.0f%%", 100 * fraction), criterion}, row);
          if (const auto* m = pr::method_of(rep, "teacher"); m && teacher_acc.empty())
            for (const auto& task : tasks)
              if (const auto a = pr::figure(*m, "mc_" + task + "_acc"))
                teacher_acc += report::format("%s%s %.3f", teacher_acc.empty() ? "" : ", ", task.c_str(), a->mean);
          if (const auto* m = pr::method_of(rep, "lwcl"))
            if (const auto n = pr::figure(*m, "mc_" + tasks.front() + "_n")) mc_items = static_cast<int>(n->mean);
        }
      mc.title = t.title.substr(0, t.title.find(':')) +
                 report::format(": zero-shot multiple-choice accuracy (lm-eval's acc, %d items a task; teacher: %s)",
                                mc_items, teacher_acc.c_str());
      tables.push_back(std::move(t));
      if (!tasks.empty()) tables.push_back(std::move(mc));
    }
    cmp.defaults().data = data;
    notes.push_back(report::format("(budget %s for each recovery; %d seed%s; criteria with their published allocation, "
                                   "the group ratio searched for the parameter fraction; recovered: %s%s, the rest scored "
                                   "without recovery; short: the seeds of a recovery that trained fewer than %ld optimiser "
                                   "steps, counted in its mean; %s)", cmp.opt().budget.c_str(),
                                   cmp.opt().seeds, cmp.opt().seeds == 1 ? "" : "s", recover.c_str(),
                                   recover == default_recover ? " (the floor, the criterion the other tables prune with, "
                                   "the published method with bias compensation, and the one that removes whole layers)" : "",
                                   min_steps,
                                   cmp.opt().test_split ? "test split: every test document of both corpora"
                                                        : "each sample: every test document of one corpus"));
    const pr::json extra = {{"machine", pr::machine()}, {"budget", cmp.opt().budget}, {"seeds", cmp.opt().seeds},
                            {"sources", sources}, {"wall_seconds", progress.seconds()}};
    std::printf("machine: %s\n", pr::machine().c_str());
    pr::write_tables(base, "Pruning methods under equal training time (LLaMA and Qwen families)", tables, notes, extra);
    return 0;
  });
}
