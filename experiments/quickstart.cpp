// quickstart: the README's main job, on the CPU. Uses the cached `tiny` teacher (or trains it: a
// gpt2 on the King James Bible and Jane Austen), prunes 50% of its heads and FFN channels with
// Wanda-sp, recovers the student with layer-wise curriculum learning and with end-to-end KD under the
// same wall-clock budget, and prints a table: teacher, pruned, LWCL, E2E KD with validation
// perplexity, peak compute bytes, peak cache bytes, wall seconds and tokens. Writes
// runs/quickstart/{config.json, metrics_lwcl.jsonl, metrics_e2e_kd.jsonl, report.json, student_lwcl/, student_e2e_kd/}.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/distill/e2e_kd.hpp"
#include "lwcl/distill/layerwise.hpp"
#include "lwcl/eval/perplexity.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/policies/pruning/wanda_sp.hpp"
#include "lwcl/prune/allocate.hpp"
#include "lwcl/prune/stats.hpp"
#include "lwcl/prune/surgery.hpp"
#include "lwcl/train/lm_training.hpp"

using namespace lwcl;
namespace fs = std::filesystem;

namespace {

using net_t = model::transformer<backend::cpu>;

void write_json(const fs::path& path, const nlohmann::ordered_json& j) {
  {
    std::ofstream f(path.string() + ".tmp");
    f << j.dump(2) << '\n';
    check(f.good(), "quickstart: writing '", path.string(), ".tmp' failed");
  }
  fs::rename(path.string() + ".tmp", path);
}

std::string human_bytes(double b) {
  char buf[32];
  if (b <= 0) return "-";
  if (b >= 1 << 20)
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1 << 20));
  else
    std::snprintf(buf, sizeof buf, "%.0f KiB", b / 1024);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lwcl quickstart: teacher -> Wanda-sp 50% -> layer-wise curriculum vs end-to-end KD, same wall-clock budget"};
  std::string data = "data/prepared", teacher_run = "runs/teacher_tiny_gpt2", out_dir = "runs/quickstart";
  double budget = 90, ratio = 0.5, lr = 2e-3;
  int batch = 16, seq = 128, feature_batches = 12, calib_batches = 8;
  app.add_option("--data", data, "prepared data (tools/fetch_corpus.sh, experiments/prepare_data)");
  app.add_option("--teacher", teacher_run, "teacher run directory; trained (resumably) when it has no model/ yet");
  app.add_option("--budget", budget, "wall-clock seconds for each recovery method")->check(CLI::PositiveNumber);
  app.add_option("--ratio", ratio, "fraction of heads (KV groups) and FFN channels pruned")->check(CLI::Range(0.0, 0.95));
  app.add_option("--lr", lr, "peak learning rate of both recoveries")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "sequences per batch")->check(CLI::PositiveNumber);
  app.add_option("--seq", seq, "tokens per sequence")->check(CLI::PositiveNumber);
  app.add_option("--feature-batches", feature_batches, "batches whose boundary features LWCL caches")->check(CLI::PositiveNumber);
  app.add_option("--calib-batches", calib_batches, "Wanda-sp calibration batches")->check(CLI::PositiveNumber);
  app.add_option("--out", out_dir, "run directory");
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  try {
    timer total;
    backend::cpu be;
    fs::create_directories(out_dir);
    const auto train_path = fs::path(data) / "train.bin";
    check(fs::exists(train_path), "quickstart: no '", train_path.string(),
          "' (tools/quickstart.sh prepares it: tools/fetch_corpus.sh, then experiments/prepare_data)");

    // 1. The teacher.
    const auto teacher_dir = fs::path(teacher_run) / "model";
    double teacher_seconds = 0;
    long teacher_tokens = 0;
    {
      const data::shard probe(train_path.string());
      const auto opt = train::lm_preset("tiny", model::family::gpt2, static_cast<index_t>(probe.vocab_size()));
      teacher_tokens = opt.steps * opt.batch * opt.seq;
      if (!fs::exists(teacher_dir / "model.safetensors")) {
        std::printf("quickstart: training the tiny teacher into %s (a few minutes; rerun resumes after a kill)\n",
                    teacher_run.c_str());
        const auto r = train::train_lm(be, opt, data, teacher_run);
        teacher_seconds = r.seconds;
      } else {
        std::printf("quickstart: using the cached teacher %s\n", teacher_dir.string().c_str());
        const auto rep = nlohmann::json::parse(std::ifstream((fs::path(teacher_run) / "report.json").string()));
        teacher_seconds = rep.value("wall_seconds", 0.0);
      }
    }
    net_t teacher(be, checkpoint::read_hf_config(teacher_dir.string()), dtype::f32);
    checkpoint::load_hf_weights(teacher, teacher_dir.string());
    const auto& tcfg = teacher.config();
    check(seq <= tcfg.max_seq, "quickstart: --seq ", seq, " exceeds the teacher's max_seq ", tcfg.max_seq);

    const data::shard train_shard(train_path.string());
    const data::shard val_shard((fs::path(data) / "validation.bin").string());
    std::vector<std::int32_t> val_ids(static_cast<std::size_t>(std::min<std::uint64_t>(val_shard.size(), 32769)));
    for (std::size_t i = 0; i < val_ids.size(); ++i) val_ids[i] = val_shard[i];
    auto ppl = [&](net_t& net) { return eval::perplexity(net, val_ids, seq, seq, "validation"); };

    // 2. Wanda-sp, 50% of KV groups (heads) and FFN channels in every layer.
    timer prune_clock;
    const data::batch_loader calib(train_shard, batch, seq, 0xC0FFEE);
    const auto stats = prune::collect_statistics(teacher, calib, batch, seq, calib_batches);
    const auto scores = policies::score_groups(policies::pruning::wanda_sp{}, prune::make_scoring_input(teacher, stats));
    prune::allocation alloc;
    alloc.ratio = ratio;
    const auto plan = prune::allocate(tcfg, scores, alloc);
    auto pruned = prune::apply_plan(teacher, plan);
    const double prune_seconds = prune_clock.seconds();
    std::printf("quickstart: Wanda-sp %.0f%% of heads and FFN channels: %lld -> %lld parameters in %.1f s\n", 100 * ratio,
                static_cast<long long>(teacher.num_parameters()), static_cast<long long>(pruned->num_parameters()), prune_seconds);

    // 3. Recoveries under the same wall-clock budget, on the same training stream.
    std::vector<index_t> identity(static_cast<std::size_t>(tcfg.n_layers()));
    for (index_t i = 0; i < tcfg.n_layers(); ++i) identity[static_cast<std::size_t>(i)] = i;
    const data::batch_loader train_loader(train_shard, batch, seq, 0x5EED);

    auto lwcl_student = prune::apply_plan(*pruned, prune::keep_all(pruned->config()));
    distill::layerwise_options lo;
    lo.stage1_steps = 100000;  // the budget decides
    lo.stage2_steps = 100000;
    lo.lr = lr;
    lo.min_lr = lr / 10;
    lo.feature_batches = feature_batches;
    lo.time_budget_seconds = budget;
    std::printf("quickstart: layer-wise curriculum (stage 1 teacher inputs, stage 2 student inputs), %.0f s\n", budget);
    metrics_writer lwcl_metrics((fs::path(out_dir) / "metrics_lwcl.jsonl").string());
    const auto lr_res = distill::train_layerwise(teacher, *lwcl_student, identity, train_loader, batch, seq, lo, &lwcl_metrics);

    auto kd_student = prune::apply_plan(*pruned, prune::keep_all(pruned->config()));
    distill::e2e_options eo;
    eo.steps = 100000;
    eo.lr = lr;
    eo.min_lr = lr / 10;
    eo.time_budget_seconds = budget;
    std::printf("quickstart: end-to-end KD (logit KL, teacher and student resident), %.0f s\n", budget);
    metrics_writer kd_metrics((fs::path(out_dir) / "metrics_e2e_kd.jsonl").string());
    const auto kd_res = distill::train_e2e_kd(teacher, *kd_student, train_loader, batch, seq, eo, &kd_metrics);

    // 4. The table.
    const auto p_teacher = ppl(teacher), p_pruned = ppl(*pruned), p_lwcl = ppl(*lwcl_student), p_kd = ppl(*kd_student);
    checkpoint::save_hf(*lwcl_student, (fs::path(out_dir) / "student_lwcl").string());
    checkpoint::save_hf(*kd_student, (fs::path(out_dir) / "student_e2e_kd").string());
    struct row {
      const char* name;
      double ppl;
      double compute, cache, seconds;
      long tokens;
    };
    const double tp = static_cast<double>(teacher.params().bytes()), sp = static_cast<double>(pruned->params().bytes());
    const std::vector<row> rows = {
        {"teacher", p_teacher.perplexity(), 0, 0, teacher_seconds, teacher_tokens},
        {"pruned", p_pruned.perplexity(), 0, 0, prune_seconds, static_cast<long>(calib_batches) * batch * seq},
        {"lwcl", p_lwcl.perplexity(), static_cast<double>(lr_res.peak_compute_bytes), static_cast<double>(lr_res.cache_bytes),
         lr_res.seconds, lr_res.tokens},
        {"e2e_kd", p_kd.perplexity(), static_cast<double>(kd_res.peak_compute_bytes), 0, kd_res.seconds, kd_res.tokens}};
    std::printf("\nvalidation perplexity: %s\n", p_teacher.protocol().c_str());
    std::printf("teacher %lld parameters (%s), student %lld (%s)\n", static_cast<long long>(teacher.num_parameters()),
                human_bytes(tp).c_str(), static_cast<long long>(pruned->num_parameters()), human_bytes(sp).c_str());
    std::printf("%-8s %12s %18s %16s %12s %12s\n", "method", "val ppl", "peak compute", "peak cache", "wall s", "tokens");
    nlohmann::ordered_json methods = nlohmann::ordered_json::array();
    for (const auto& r : rows) {
      std::printf("%-8s %12.3f %18s %16s %12.1f %12ld\n", r.name, r.ppl, human_bytes(r.compute).c_str(),
                  human_bytes(r.cache).c_str(), r.seconds, r.tokens);
      methods.push_back({{"name", r.name},
                         {"val_ppl", r.ppl},
                         {"peak_compute_bytes", static_cast<std::int64_t>(r.compute)},
                         {"peak_cache_bytes", static_cast<std::int64_t>(r.cache)},
                         {"wall_seconds", r.seconds},
                         {"tokens", r.tokens}});
    }
    std::printf("(peak compute: bytes resident for training (weights, gradients, AdamW moments, activations); teacher and "
                "pruned rows are not trained here)\n");
    write_json(fs::path(out_dir) / "config.json",
               {{"program", "quickstart"}, {"teacher", teacher_dir.string()}, {"data", data}, {"criterion", "wanda_sp"},
                {"ratio", ratio}, {"budget_seconds", budget}, {"batch", batch}, {"seq", seq}, {"lr", lr},
                {"feature_batches", feature_batches}, {"calibration_batches", calib_batches},
                {"backend", std::string(backend::cpu::name)}});
    write_json(fs::path(out_dir) / "report.json",
               {{"methods", methods}, {"val_protocol", p_teacher.protocol()}, {"teacher_parameters", teacher.num_parameters()},
                {"student_parameters", pruned->num_parameters()}, {"wall_seconds_total", total.seconds()}});
    std::printf("quickstart: wrote %s/ in %.0f s\n", out_dir.c_str(), total.seconds());
    return 0;
  } catch (const lwcl::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
