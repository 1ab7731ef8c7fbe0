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
  std::string data = "data/prepared", teacher_run = "runs/teacher_tiny_gpt2", out_dir = "runs/quickstart", budget_text = "90";
  double ratio = 0.5, lr = 2e-3;
  int batch = 16, seq = 128, feature_batches = 12, calib_batches = 8;
  bool no_baseline_lw = false;
  app.add_option("--data", data, "prepared data (tools/fetch_corpus.sh, experiments/prepare_data)");
  app.add_option("--teacher", teacher_run, "teacher run directory; trained (resumably) when it has no model/ yet");
  app.add_option("--budget", budget_text,
                 "budget of each recovery method: seconds (a plain number), or steps:N, tokens:N, seconds:N");
  app.add_option("--ratio", ratio, "fraction of heads (KV groups) and FFN channels pruned")->check(CLI::Range(0.0, 0.95));
  app.add_option("--lr", lr, "peak learning rate of every recovery")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "sequences per batch")->check(CLI::PositiveNumber);
  app.add_option("--seq", seq, "tokens per sequence")->check(CLI::PositiveNumber);
  app.add_option("--feature-batches", feature_batches, "batches whose boundary features the layer-wise methods cache")
      ->check(CLI::PositiveNumber);
  app.add_option("--calib-batches", calib_batches, "Wanda-sp calibration batches")->check(CLI::PositiveNumber);
  app.add_flag("--skip-no-curriculum", no_baseline_lw, "leave out the layer-wise baseline without curriculum");
  app.add_option("--out", out_dir, "run directory");
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  try {
    timer total;
    backend::cpu be;
    if (budget_text.find(':') == std::string::npos) budget_text = "seconds:" + budget_text;
    const distill::budget budget = distill::parse_budget(budget_text);
    fs::create_directories(out_dir);

    // 1. The teacher, and its Wanda-sp pruned student.
    const auto teacher = ensure_teacher(be, data, teacher_run, "tiny");
    const data::shard train_shard((fs::path(data) / "train.bin").string());
    const auto val = validation_ids(data);
    std::vector<method_row> rows;
    distill::student_state pruned;
    std::string protocol;
    index_t teacher_params = 0;
    {
      auto t = load_model(be, teacher.dir);
      check(seq <= t->config().max_seq, "quickstart: --seq ", seq, " exceeds the teacher's max_seq ", t->config().max_seq);
      teacher_params = t->num_parameters();
      timer clock;
      auto p = prune_model(*t, train_shard, policies::pruning::wanda_sp{}, ratio, batch, seq, calib_batches);
      const double prune_seconds = clock.seconds();
      std::printf("Wanda-sp %.0f%% of heads and FFN channels: %lld -> %lld parameters in %.1f s\n", 100 * ratio,
                  static_cast<long long>(teacher_params), static_cast<long long>(p->num_parameters()), prune_seconds);
      const auto pt = eval::perplexity(*t, val, seq, seq, "validation");
      protocol = pt.protocol();
      method_row tr;
      tr.name = "teacher";
      tr.val_ppl = pt.perplexity();
      tr.wall_seconds = teacher.seconds;
      tr.tokens = teacher.tokens;
      rows.push_back(tr);
      pruned = distill::student_state::of(*p);
      method_row pr;
      pr.name = "pruned";
      pr.val_ppl = eval::perplexity(*p, val, seq, seq, "validation").perplexity();
      pr.cumulative_error = eval::cumulative_error(*t, *p, model::identity_boundaries(p->config().n_layers()),
                                                   error_batches(val, batch, seq, 2), batch, seq);
      pr.wall_seconds = prune_seconds;
      pr.tokens = static_cast<long>(calib_batches) * batch * seq;
      rows.push_back(pr);
    }  // the teacher is released here; each method loads what it needs

    // 2. The recoveries, each under the same budget on the same training stream.
    const data::batch_loader loader(train_shard, batch, seq, 0x5EED);
    const study st{be, teacher.dir, model::identity_boundaries(pruned.config.n_layers()), loader, val, error_batches(val, batch, seq, 2),
                   batch, seq, out_dir};
    distill::pipeline_options po;
    po.total = budget;
    po.lr = lr;
    po.min_lr = lr / 10;
    po.feature_batches = feature_batches;
    const auto lwcl_bundle = make_policies(slot<key::pruning>(policies::pruning::wanda_sp{}),
                                           slot<key::cache>(policies::cache::host{}));  // two_stage<>, uniform<1>, nmse
    rows.push_back(run_pipeline(st, "lwcl", lwcl_bundle, pruned, po));
    if (!no_baseline_lw) {
      const auto no_cur = make_policies(slot<key::pruning>(policies::pruning::wanda_sp{}),
                                        slot<key::curriculum>(cur::curriculum<cur::front_to_back, cur::teacher_inputs>{}));
      rows.push_back(run_pipeline(st, "layerwise_no_curriculum", no_cur, pruned, po));
    }
    distill::e2e_options eo;
    eo.lr = lr;
    eo.min_lr = lr / 10;
    eo.steps = 1000000;
    if (budget.unit == distill::budget_unit::seconds) eo.time_budget_seconds = budget.amount;
    else eo.steps = static_cast<long>(budget.unit == distill::budget_unit::steps ? budget.amount : budget.amount / (batch * seq));
    rows.push_back(run_e2e_kd(st, "e2e_kd", pruned, eo));

    // 3. The table and the report.
    std::printf("\nteacher %lld parameters, student %lld (%s as f32)\n", static_cast<long long>(teacher_params),
                static_cast<long long>(pruned.layout.numel()),
                human_bytes(static_cast<double>(pruned.layout.numel()) * 4).c_str());
    print_table(rows, protocol);
    write_json(fs::path(out_dir) / "config.json",
               {{"program", "quickstart"}, {"teacher", teacher.dir.string()}, {"data", data}, {"criterion", "wanda_sp"},
                {"ratio", ratio}, {"budget", {{"unit", distill::budget_unit_name(budget.unit)}, {"amount", budget.amount}}},
                {"batch", batch}, {"seq", seq}, {"lr", lr}, {"feature_batches", feature_batches},
                {"calibration_batches", calib_batches}, {"backend", std::string(backend::cpu::name)}});
    write_report(out_dir, rows,
                 {{"val_protocol", protocol}, {"teacher_parameters", teacher_params},
                  {"student_parameters", pruned.layout.numel()}, {"wall_seconds_total", total.seconds()}});
    std::printf("quickstart: wrote %s/ (report.json, cumulative_error.png, one folder per method) in %.0f s\n",
                out_dir.c_str(), total.seconds());
    return 0;
  } catch (const lwcl::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
