// recover: layer-wise recovery of a pruned checkpoint from the command line, resumable. Takes a teacher
// folder and a pruned student folder (experiments/prune writes one, with the layer map in its
// summary.json), runs distill::pipeline with the chosen curriculum and cache under a budget, and leaves
// the run directory (config.json, metrics.jsonl, checkpoints/, report.json, student/ with the
// tokenizer, plots). Rerunning the same command after a kill continues from the last checkpoint.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "host_instances.hpp"
#include "lwcl/core/fs.hpp"
#include "studies/options.hpp"
#include "lwcl/distill/pipeline.hpp"
#include "lwcl/model/layer_map.hpp"
#include "lwcl/policies/bundle.hpp"
#include "lwcl/report/format.hpp"
#include "lwcl/policies/cache/compressed.hpp"
#include "lwcl/policies/cache/disk.hpp"
#include "lwcl/policies/cache/host.hpp"
#include "lwcl/policies/curriculum/curriculum.hpp"
#include "lwcl/policies/curriculum/doubling.hpp"
#include "lwcl/policies/curriculum/easy_to_hard.hpp"
#include "lwcl/policies/curriculum/ramp.hpp"
#include "lwcl/policies/curriculum/teacher_inputs.hpp"
#include "lwcl/policies/curriculum/two_stage.hpp"
#include "lwcl/policies/pruning/magnitude.hpp"
#include "lwcl/quant/format.hpp"
#include "lwcl/core/program.hpp"
#include "studies/validators.hpp"

using namespace lwcl;
namespace fs = std::filesystem;
namespace studies = lwcl::studies;
using report::human_bytes;
namespace cur = lwcl::policies::curriculum;
namespace tiers = lwcl::policies::cache;

namespace {

// The layer map: --boundaries, else summary.json beside the student folder, else the identity when the
// depths agree.
std::vector<index_t> layer_map(const std::vector<index_t>& given, const fs::path& student_dir, index_t student_layers,
                               index_t teacher_layers) {
  if (!given.empty()) return given;
  const auto summary = student_dir.parent_path() / "summary.json";
  if (fs::exists(summary)) {
    const auto j = nlohmann::json::parse(read_text(summary));
    if (j.contains("boundaries")) return j.at("boundaries").get<std::vector<index_t>>();
  }
  check(student_layers == teacher_layers, "recover: the student has ", student_layers, " layers and the teacher ",
        teacher_layers, "; give the layer map with --boundaries (student layer i replaces teacher layers [b[i], b[i+1]))");
  return model::identity_boundaries(student_layers);
}

// The criterion that pruned the student, from experiments/prune's summary.json beside its folder: the
// run is labelled with it (a pipeline handed a pruned student does not run its pruning slot).
std::string pruned_by(const fs::path& student_dir) {
  const auto summary = student_dir.parent_path() / "summary.json";
  if (!fs::exists(summary)) return "unknown (no summary.json beside the student)";
  const auto j = nlohmann::json::parse(read_text(summary));
  check(j.contains("criterion") && j.at("criterion").is_string(), "recover: '", summary.string(),
        "' has no string field 'criterion' (experiments/prune writes one)");
  return j.at("criterion").get<std::string>();
}

// The command line: the harness's recovery options and this program's own.
struct settings {
  studies::options opt;
  std::string student_dir, curriculum = "two_stage", cache_name = "host", fake_quant;
  std::vector<index_t> boundaries;
  double kd_share = 0.2;
  int ramp_steps = 0;
  long checkpoint_every = 50;
};

void add_options(CLI::App& app, settings& st) {
  st.opt.budget = "steps:400";
  studies::add_options(app, st.opt, "steps:N, tokens:N or seconds:N for the whole recovery", /*pruning=*/false);
  app.get_option("--teacher")->required()->description("teacher folder (config.json + model.safetensors)");
  app.get_option("--out")->required()->description("run directory; rerun the same command to resume");
  app.add_option("--student", st.student_dir, "pruned student folder (experiments/prune's <out>/model)")->required();
  app.add_option("--curriculum", st.curriculum,
                 "two_stage (teacher inputs, then student inputs front to back), none (teacher inputs only), or lwcl "
                 "(easy to hard, teacher->student ramp, segments doubling, final logit KD)")
      ->check(CLI::IsMember({"two_stage", "none", "lwcl"}));
  app.add_option("--cache", st.cache_name, "host (RAM), disk (<out>/features) or compressed (exponent-coded on disk)")
      ->check(CLI::IsMember({"host", "disk", "compressed"}));
  app.add_option("--boundaries", st.boundaries, "layer map b[0..L] (default: summary.json beside the student, or identity)");
  app.add_option("--kd-share", st.kd_share, "budget share of the final KD stage (curriculum lwcl)")->check(studies::within(0.0, 0.9));
  app.add_option("--ramp-steps", st.ramp_steps, "curriculum lwcl: steps of a visit over which inputs move from teacher to "
                                                "student (default: a third of a visit's steps)");
  app.add_option("--checkpoint-every", st.checkpoint_every, "segment steps between checkpoints (0: visit ends only)")
      ->check(studies::non_negative);
  app.add_option("--fake-quant", st.fake_quant, "quantisation-aware recovery: train every segment on its linear weights "
                                                "fake-quantised to this format (int4:g64, int8:g0:asym, ...; straight through); "
                                                "needs a curriculum without final KD (two_stage or none)");
}

// The pipeline options of the recovery: the budget, the final KD share, checkpoints, a validation sample
// of two batches, the pruning label and the fake-quantised format.
distill::pipeline_options recovery_of(const settings& st) {
  auto po = studies::recovery_options(st.opt, distill::parse_budget(st.opt.budget));
  po.final_kd_share = st.kd_share;
  po.checkpoint_every = st.checkpoint_every;
  po.validation_ids = data::read_tokens((fs::path(st.opt.data) / "validation.bin").string(),
                                       static_cast<std::uint64_t>(2 * st.opt.batch * st.opt.seq) + 1);
  po.policy_labels["pruning"] = pruned_by(st.student_dir);
  if (!st.fake_quant.empty()) {
    po.fake_quant = quant::parse_format(st.fake_quant);
    std::printf("recover: segments train on linear weights fake-quantised to %s (the student written keeps the f32 "
                "weights; experiments/quantize --methods rtn at the same format gives the quantised model)\n",
                po.fake_quant->describe().c_str());
  }
  return po;
}

// The recovery under --curriculum and --cache.
distill::pipeline_result recover(backend::cpu& be, const settings& st, distill::student_state& student,
                                 const std::vector<index_t>& map, const distill::pipeline_options& po,
                                 const data::batch_loader& loader) {
  auto teacher = [&] { return checkpoint::load_hf(be, st.opt.teacher); };
  auto go = [&](auto curriculum_policy, auto cache_policy) {
    // The pruning slot must hold a criterion; policy_labels writes the real one into the run's files.
    const auto bundle = make_policies(slot<key::pruning>(policies::pruning::magnitude_l2{}),
                                      slot<key::curriculum>(curriculum_policy), slot<key::cache>(cache_policy));
    return distill::make_pipeline(be, bundle, po).run(teacher, student, map, loader, st.opt.out);
  };
  auto with_cache = [&](auto curriculum_policy) {
    if (st.cache_name == "disk") return go(curriculum_policy, tiers::disk{});
    if (st.cache_name == "compressed") return go(curriculum_policy, tiers::compressed<tiers::disk, codec::exponent_codec>{});
    return go(curriculum_policy, tiers::host{});
  };
  if (st.curriculum == "none") return with_cache(cur::curriculum<cur::front_to_back, cur::teacher_inputs>{});
  if (st.curriculum == "two_stage") return with_cache(cur::two_stage<>{});
  cur::curriculum<cur::easy_to_hard, cur::ramp, cur::doubling> c;
  // A visit's steps under a step budget with doubling segments: about budget / (2 L - 1) visits.
  const index_t L = student.config.n_layers();
  const long visit = po.total.unit == distill::budget_unit::steps
                         ? static_cast<long>(po.total.amount * (1 - st.kd_share)) / std::max<index_t>(1, 2 * L - 1)
                         : 30;
  c.inputs = {0, static_cast<index_t>(st.ramp_steps > 0 ? st.ramp_steps : std::max(1L, visit / 3))};
  c.growth.final_kd = true;
  return with_cache(c);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lwcl recover: layer-wise curriculum recovery of a pruned checkpoint (resumable)"};
  settings st;
  add_options(app, st);
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  return lwcl::guard_main([&] {
    const auto& opt = st.opt;
    backend::cpu be;
    distill::student_state student;
    index_t teacher_layers = 0;
    {
      auto s = checkpoint::load_hf(be, st.student_dir);
      student = distill::student_state::of(*s);
      teacher_layers = checkpoint::read_hf_config(opt.teacher).n_layers();
    }
    const auto map = layer_map(st.boundaries, st.student_dir, student.config.n_layers(), teacher_layers);
    std::string shown;
    for (const auto b : map) shown += (shown.empty() ? "" : ", ") + std::to_string(b);
    std::printf("recover: layer map [%s] (student layer i stands for teacher layers [b[i], b[i+1]) of %lld)\n",
                shown.c_str(), static_cast<long long>(teacher_layers));
    const studies::training_stream train(opt);
    const auto po = recovery_of(st);
    const auto r = recover(be, st, student, map, po, train.loader);
    for (const char* f : {"vocab.json", "merges.txt", "tokenizer.json"})
      if (fs::exists(fs::path(opt.teacher) / f))
        write_file_atomic(fs::path(opt.out) / "student" / f, read_text(fs::path(opt.teacher) / f));
    std::printf("recover: %ld segment steps + %ld KD steps, %ld tokens in %.1f s%s; peak compute %s, peak cache %s, "
                "stall %.1f%% of step time\n",
                r.segment_steps, r.kd_steps, r.tokens, r.seconds, r.resumed ? " (resumed)" : "",
                human_bytes(static_cast<double>(r.peak_compute_bytes)).c_str(),
                human_bytes(static_cast<double>(r.peak_cache_bytes)).c_str(),
                r.step_seconds > 0 ? 100 * r.stall_seconds / r.step_seconds : 0.0);
    std::printf("recover: validation perplexity %.3f (%s); last-layer error %.4f -> %.4f; wrote %s/\n", r.val_ppl,
                r.val_protocol.c_str(), r.cumulative_error_before.back(), r.cumulative_error.back(), opt.out.c_str());
    return 0;
  });
}
