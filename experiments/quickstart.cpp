// quickstart: the README's main job, on the CPU. Uses the cached `tiny` teacher (or trains it: a gpt2
// on the King James Bible and Jane Austen), prunes 50% of its heads and FFN channels with Wanda-sp, and
// recovers the student under one budget with layer-wise curriculum learning (the default two-stage
// bundle), layer-wise training without curriculum (teacher inputs only) and end-to-end KD. Prints a
// table (teacher, pruned, each method: validation perplexity, peak compute bytes, peak cache bytes,
// wall seconds, tokens) and writes runs/quickstart/{config.json, report.json, cumulative_error.png} and
// one run directory per method.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "common.hpp"
#include "lwcl/policies/cache/host.hpp"
#include "lwcl/policies/curriculum/curriculum.hpp"
#include "lwcl/policies/curriculum/teacher_inputs.hpp"
#include "lwcl/policies/pruning/wanda_sp.hpp"

using namespace lwcl;
using namespace lwcl::experiments;
namespace cur = lwcl::policies::curriculum;

int main(int argc, char** argv) {
  CLI::App app{"lwcl quickstart: teacher -> Wanda-sp 50% -> layer-wise curriculum vs baselines under one budget"};
  common_options opt;
  opt.budget = "90";
  opt.out = "runs/quickstart";
  bool no_baseline_lw = false;
  add_common_options(app, opt,
                     "budget of each recovery method: seconds (a plain number), or steps:N, tokens:N, seconds:N");
  app.add_flag("--skip-no-curriculum", no_baseline_lw, "leave out the layer-wise baseline without curriculum");
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  try {
    timer total;
    backend::cpu be;
    const distill::budget budget = budget_option(opt.budget);
    fs::create_directories(opt.out);

    // 1. The teacher and its Wanda-sp student (the teacher is released after; each method loads what it needs).
    const auto val = validation_ids(opt.data);
    auto start = start_pruned(be, opt, policies::pruning::wanda_sp{}, val, "quickstart");
    std::vector<method_row> rows = start.rows;
    const auto& pruned = start.pruned;

    // 2. The recoveries, each under the same budget on the same training stream.
    const auto st = make_study(be, opt, start, val);
    const auto po = recovery_options(opt, budget);
    const auto lwcl_bundle = make_policies(slot<key::pruning>(policies::pruning::wanda_sp{}),
                                           slot<key::cache>(policies::cache::host{}));  // two_stage<>, uniform<1>, nmse
    rows.push_back(run_pipeline(st, "lwcl", lwcl_bundle, pruned, po));
    if (!no_baseline_lw) {
      const auto no_cur = make_policies(slot<key::pruning>(policies::pruning::wanda_sp{}),
                                        slot<key::curriculum>(cur::curriculum<cur::front_to_back, cur::teacher_inputs>{}));
      rows.push_back(run_pipeline(st, "layerwise_no_curriculum", no_cur, pruned, po));
    }
    distill::e2e_options eo;
    eo.lr = opt.lr;
    eo.min_lr = opt.lr / 10;
    eo.steps = 1000000;
    if (budget.unit == distill::budget_unit::seconds) eo.time_budget_seconds = budget.amount;
    else if (budget.unit == distill::budget_unit::steps) eo.steps = static_cast<long>(budget.amount);
    else eo.steps = static_cast<long>(budget.amount / (opt.batch * opt.seq));
    rows.push_back(run_e2e_kd(st, "e2e_kd", pruned, eo));

    // 3. The table and the report.
    std::printf("\nteacher %lld parameters, student %lld (%s as f32)\n",
                static_cast<long long>(start.teacher_parameters), static_cast<long long>(pruned.layout.numel()),
                human_bytes(static_cast<double>(pruned.layout.numel()) * 4).c_str());
    print_table(rows, start.protocol);
    write_json(fs::path(opt.out) / "config.json",
               {{"program", "quickstart"}, {"teacher", start.teacher.dir.string()}, {"data", opt.data},
                {"criterion", "wanda_sp"}, {"ratio", opt.ratio},
                {"budget", {{"unit", distill::budget_unit_name(budget.unit)}, {"amount", budget.amount}}},
                {"batch", opt.batch}, {"seq", opt.seq}, {"lr", opt.lr}, {"feature_batches", opt.feature_batches},
                {"calibration_batches", opt.calib_batches}, {"backend", std::string(backend::cpu::name)}});
    write_report(opt.out, rows,
                 {{"val_protocol", start.protocol}, {"teacher_parameters", start.teacher_parameters},
                  {"student_parameters", pruned.layout.numel()}, {"wall_seconds_total", total.seconds()}});
    std::printf("quickstart: wrote %s/ (report.json, cumulative_error.png, one folder per method) in %.0f s\n",
                opt.out.c_str(), total.seconds());
    return 0;
  } catch (const lwcl::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
