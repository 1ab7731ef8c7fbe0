// compress: a teacher checkpoint to a smaller, recovered student in one command (distill::compress): the
// teacher cut by a pruning criterion named on the command line (the bundle's pruning slot), then
// recovered layer-wise by the default bundle (two_stage curriculum, one layer per segment, features in
// RAM, normalised MSE) under a budget. Leaves the run directory: pruning.json (the cut), config.json,
// metrics.jsonl, checkpoints/, report.json, student/ (with the teacher's tokenizer) and the plots.
// Rerunning the same command after a kill cuts the teacher again (the same cut: the criteria are
// deterministic) and resumes the recovery from its last checkpoint.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <string>

#include "host_instances.hpp"
#include "lwcl/core/fs.hpp"
#include "lwcl/core/program.hpp"
#include "lwcl/data/shards.hpp"
#include "lwcl/distill/compress.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/policies/bundle.hpp"
#include "lwcl/policies/pruning/by_name.hpp"
#include "lwcl/prune/allocate.hpp"
#include "lwcl/report/format.hpp"
#include "studies/options.hpp"
#include "studies/validators.hpp"

using namespace lwcl;
namespace fs = std::filesystem;
namespace pp = lwcl::policies::pruning;

int main(int argc, char** argv) {
  CLI::App app{"lwcl compress: a teacher pruned by a criterion and recovered layer-wise, in one call (resumable)"};
  studies::options opt;
  opt.budget = "steps:400";
  std::string criterion = "wanda_sp", granularity = "heads_and_ffn";
  double param_ratio = -1;
  long checkpoint_every = 50;
  studies::add_options(app, opt, "steps:N, tokens:N or seconds:N for the recovery", /*pruning=*/false);
  app.add_option("--ratio", opt.ratio, "fraction of the --granularity groups removed")->check(studies::within(0.0, 0.95));
  app.add_option("--calib-batches", opt.calib_batches, "calibration batches of the criterion")->check(studies::positive);
  app.get_option("--teacher")->required()->description("teacher folder (config.json + model.safetensors)");
  app.get_option("--out")->required()->description("run directory; rerun the same command to resume");
  app.add_option("--criterion", criterion, std::string("pruning criterion: ") + pp::criterion_names)
      ->check([](const std::string& c) {
        return pp::known_criterion(c) ? std::string() : "--criterion: must be one of " + std::string(pp::criterion_names);
      });
  app.add_option("--granularity", granularity, "what --ratio removes: heads_and_ffn, heads, ffn or layers");
  app.add_option("--param-ratio", param_ratio, "instead of --ratio: the group ratio that removes this fraction of all "
                                               "parameters (searched)")
      ->check(studies::within(0.0, 0.95));
  app.add_option("--checkpoint-every", checkpoint_every, "segment steps between checkpoints (0: visit ends only)")
      ->check(studies::non_negative);
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  return guard_main([&] {
    backend::cpu be;
    const studies::training_stream train(opt);
    distill::compress_options o;
    o.prune.alloc.gran = prune::parse_granularity(granularity);
    o.prune.alloc.ratio = opt.ratio;
    o.prune.param_ratio = param_ratio;
    o.prune.calib_batches = opt.calib_batches;
    o.recovery = studies::recovery_options(opt, distill::parse_budget(opt.budget));
    o.recovery.checkpoint_every = checkpoint_every;
    o.recovery.validation_ids = data::read_tokens((fs::path(opt.data) / "validation.bin").string(),
                                                  static_cast<std::uint64_t>(2 * opt.batch * opt.seq) + 1);
    const distill::teacher_loader<backend::cpu> teacher = [&] { return checkpoint::load_hf(be, opt.teacher); };
    const auto r = pp::with_criterion(criterion, opt.seed, [&](const auto& c) {
      return distill::compress(be, teacher, make_policies(slot<key::pruning>(c)), train.loader, opt.out, o);
    });
    for (const char* f : {"vocab.json", "merges.txt", "tokenizer.json"})
      if (fs::exists(fs::path(opt.teacher) / f))
        write_file_atomic(fs::path(opt.out) / "student" / f, read_text(fs::path(opt.teacher) / f));
    const auto& rec = r.recovery;
    std::printf("compress: %s removed %.1f%% of %lld parameters (%lld left) in %.1f s\n", criterion.c_str(),
                100.0 * static_cast<double>(r.teacher_parameters - r.student_parameters) /
                    static_cast<double>(r.teacher_parameters),
                static_cast<long long>(r.teacher_parameters), static_cast<long long>(r.student_parameters), r.prune_seconds);
    std::printf("compress: recovery %ld segment steps, %ld tokens in %.1f s%s; peak compute %s, peak cache %s\n",
                rec.segment_steps, rec.tokens, rec.seconds, rec.resumed ? " (resumed)" : "",
                report::human_bytes(static_cast<double>(rec.peak_compute_bytes)).c_str(),
                report::human_bytes(static_cast<double>(rec.peak_cache_bytes)).c_str());
    std::printf("compress: validation perplexity %.3f (%s); last-layer error %.4f -> %.4f; wrote %s/\n", rec.val_ppl,
                rec.val_protocol.c_str(), rec.cumulative_error_before.back(), rec.cumulative_error.back(),
                opt.out.c_str());
    return 0;
  });
}
