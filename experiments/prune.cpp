// prune: structured pruning of a checkpoint with one criterion, granularity and ratio, without
// recovery. Gathers calibration statistics (and local gradients for Taylor) in one streaming pass over
// training batches, scores the groups, allocates (uniform or global), cuts a smaller dense model
// (FLAP with bias compensation), and writes it with the tokenizer plus summary.json: per-layer widths,
// parameters and FLOPs per token before and after, and validation perplexity before and after with
// its protocol.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/fs.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/data/loader.hpp"
#include "lwcl/data/shards.hpp"
#include "lwcl/eval/held_out.hpp"
#include "lwcl/eval/perplexity.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/model/layer_map.hpp"
#include "lwcl/policies/pruning/by_name.hpp"
#include "lwcl/prune/allocate.hpp"
#include "lwcl/prune/layer_collapse.hpp"
#include "lwcl/prune/surgery.hpp"

#include "host_instances.hpp"
#include "lwcl/core/program.hpp"
#include "studies/validators.hpp"

using namespace lwcl;
namespace pp = lwcl::policies::pruning;

namespace {

using net_t = model::transformer<backend::cpu>;

nlohmann::ordered_json widths(const model::model_config& cfg) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& l : cfg.layers) out.push_back({{"n_heads", l.n_heads}, {"n_kv_heads", l.n_kv_heads}, {"ffn", l.ffn}});
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lwcl prune: structured pruning of a checkpoint (no recovery), with a JSON summary"};
  std::string model_dir, data_dir = "data/prepared", out, criterion = "wanda_sp", gran = "heads_and_ffn", head_mode = "kv_groups";
  double ratio = 0.5, param_ratio = -1, threshold = 0.9;
  bool global = false, joint = false, no_compensation = false;
  int calib_batches = 8, batch = 8, seq = 0, eval_tokens = 32768;
  std::uint64_t seed = 0;
  app.add_option("--model", model_dir, "checkpoint folder (config.json, model.safetensors, tokenizer)")->required();
  app.add_option("--data", data_dir, "prepared data (train.bin for calibration, validation.bin for perplexity)");
  app.add_option("--out", out, "output folder (default runs/prune_<criterion>_<granularity>_<ratio>)");
  app.add_option("--criterion", criterion,
                 "random, magnitude_l1, magnitude_l2, wanda_sp, wanda_sp_in_out, flap, flap_pooled, taylor, activation, "
                 "block_influence, layer_collapse");
  app.add_option("--granularity", gran, "heads, ffn, heads_and_ffn or layers")
      ->check(CLI::IsMember({"heads", "ffn", "heads_and_ffn", "layers"}));
  app.add_option("--ratio", ratio, "fraction of the groups removed (layer_collapse: of the layers)");
  app.add_option("--param-ratio", param_ratio,
                 "instead of --ratio: remove this fraction of all parameters (the group ratio is searched for)")
      ->check(studies::within(0.0, 0.99));
  app.add_flag("--global", global, "rank groups across layers (adaptive widths) instead of the same ratio per layer");
  app.add_flag("--joint", joint, "with --global: rank KV groups and FFN channels together, weighted by the parameters "
               "each removes (FLAP's adaptive structure; --ratio is then the fraction of their parameters removed)");
  app.add_option("--head-mode", head_mode, "kv_groups (whole GQA groups) or query_heads (equal heads kept per group)")
      ->check(CLI::IsMember({"kv_groups", "query_heads"}));
  app.add_flag("--no-bias-compensation", no_compensation, "FLAP without folding removed channels' means into biases");
  app.add_option("--threshold", threshold, "layer_collapse: minimum mean cosine of the logits");
  app.add_option("--calib-batches", calib_batches, "calibration batches from the training split")->check(studies::positive);
  app.add_option("--batch", batch, "sequences per calibration batch")->check(studies::positive);
  app.add_option("--seq", seq, "tokens per sequence (default: the model's max_seq)")->check(studies::non_negative);
  app.add_option("--eval-tokens", eval_tokens, "predicted tokens of the held-out sample (windows of --seq over every "
                 "validation document)")->check(studies::positive);
  app.add_option("--seed", seed, "calibration batches and the random criterion");
  std::string save_dtype = "f32";
  app.add_option("--save-dtype", save_dtype, "weights of the student written: f32, bf16 or f16 (rounded to nearest even)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  return lwcl::guard_main([&] {
    namespace fs = std::filesystem;
    check(criterion == "layer_collapse" || pp::known_criterion(criterion), "prune: criterion '", criterion,
          "' is unknown (expected ", pp::criterion_names, " or layer_collapse)");
    const auto cfg = checkpoint::read_hf_config(model_dir);
    backend::cpu be;
    net_t teacher(be, cfg, dtype::f32);
    checkpoint::load_hf_weights(teacher, model_dir);
    const index_t T = seq ? seq : cfg.max_seq;
    if (out.empty()) {
      char r[16];
      std::snprintf(r, sizeof r, "%.2f", ratio);
      out = "runs/prune_" + criterion + "_" + gran + "_" + r;
    }
    const data::shard train_shard((fs::path(data_dir) / "train.bin").string());
    const data::batch_loader loader(train_shard, batch, T, 0x9e3779b9ULL + seed);
    // The held-out sample: windows of T over every validation document (eval/held_out.hpp).
    const auto val = eval::held_out_split(data_dir, "validation", T, eval_tokens);
    auto ppl = [&](net_t& net) { return eval::perplexity(net, val); };

    std::printf("prune: %s (%lld layers, %lld parameters), criterion %s, granularity %s, ratio %.2f%s\n", model_dir.c_str(),
                static_cast<long long>(cfg.n_layers()), static_cast<long long>(teacher.num_parameters()), criterion.c_str(),
                gran.c_str(), ratio, joint ? ", joint global ranking" : global ? ", global ranking" : "");
    const auto before = ppl(teacher);
    std::printf("before: perplexity %.3f (%s)\n", before.perplexity(), before.protocol().c_str());

    nlohmann::ordered_json summary = {{"model", model_dir}, {"criterion", criterion}, {"granularity", gran},
                                      {"ratio", ratio},      {"global", global},       {"joint", joint},
                                      {"calibration_tokens", 0}};
    timer clock;
    std::unique_ptr<net_t> student;
    std::vector<index_t> kept;  // the teacher layers the student's layers start from
    double calib_seconds = 0;
    index_t calib_tokens = static_cast<index_t>(calib_batches) * batch * T;
    if (criterion == "layer_collapse") {
      prune::collapse_options o;
      o.threshold = threshold;
      const double layer_fraction = param_ratio >= 0
                                        ? param_ratio * static_cast<double>(prune::model_parameters(cfg)) /
                                              static_cast<double>(prune::layer_parameters(cfg, cfg.layers[0]) * cfg.n_layers())
                                        : ratio;
      o.target_layers = std::max<index_t>(1, cfg.n_layers() - static_cast<index_t>(std::llround(layer_fraction * static_cast<double>(cfg.n_layers()))));
      o.merge = 1;
      std::vector<std::int32_t> ids, targets;
      loader.batch(0, ids, targets);
      calib_tokens = batch * T;
      std::vector<prune::collapse_step> log;
      student = prune::layer_collapse(teacher, ids, batch, T, o, &log);
      calib_seconds = clock.seconds();
      nlohmann::ordered_json steps = nlohmann::ordered_json::array();
      for (const auto& s : log) steps.push_back({{"layer", s.layer}, {"merged", s.merged}, {"cosine", s.cosine}, {"accepted", s.accepted}});
      summary["collapse_steps"] = steps;
      kept = prune::kept_layers(log, cfg.n_layers());  // the teacher layer each student layer starts from
    } else {
      prune::allocation a;
      a.gran = prune::parse_granularity(gran);
      a.ratio = ratio;
      a.global = global;
      a.joint = joint;
      a.heads = head_mode == "query_heads" ? prune::head_mode::query_heads : prune::head_mode::kv_groups;
      a.validate();
      pp::named_options no;
      no.criterion = criterion;
      no.alloc = a;
      no.param_ratio = param_ratio;
      no.bias_compensation = !no_compensation;
      no.seed = seed;
      no.calib_batches = calib_batches;
      auto cut = pp::prune_named(teacher, loader, no);
      student = std::move(cut.student);
      kept = std::move(cut.kept);
      calib_seconds = cut.calib_seconds;
      calib_tokens = cut.calib_tokens;
      if (param_ratio >= 0) {
        summary["ratio"] = cut.group_ratio;
        summary["target_parameter_fraction"] = param_ratio;
      }
      if (cut.bias_compensation) summary["bias_compensation"] = true;
    }
    summary["calibration_tokens"] = calib_tokens;
    summary["calibration_tokens_per_second"] =
        calib_seconds > 0 && calib_tokens > 0 ? static_cast<double>(calib_tokens) / calib_seconds : 0.0;
    const auto& sc = student->config();
    const auto after = ppl(*student);
    std::printf("after:  perplexity %.3f (%s)\n", after.perplexity(), after.protocol().c_str());
    const index_t p0 = teacher.num_parameters(), p1 = student->num_parameters();
    const double f0 = prune::flops_per_token(cfg, T), f1 = prune::flops_per_token(sc, T);
    std::printf("parameters %lld -> %lld (%.1f%% removed); forward FLOPs/token at %lld tokens %.3g -> %.3g (%.1f%% removed); "
                "calibration %.0f tokens/s\n",
                static_cast<long long>(p0), static_cast<long long>(p1), 100.0 * static_cast<double>(p0 - p1) / static_cast<double>(p0),
                static_cast<long long>(T), f0, f1, 100.0 * (f0 - f1) / f0,
                summary["calibration_tokens_per_second"].get<double>());

    checkpoint::save_hf(*student, (fs::path(out) / "model").string(), {checkpoint::parse_save_dtype(save_dtype), model_dir});
    summary["layers_before"] = widths(cfg);
    // The layer map for recovery (model/layer_map.hpp): student layer i replaces teacher layers [b[i], b[i+1]).
    summary["boundaries"] = model::boundaries_of_kept_layers(kept, cfg.n_layers());
    summary["layers_after"] = widths(sc);
    summary["parameters_before"] = p0;
    summary["parameters_after"] = p1;
    summary["parameters_removed_fraction"] = static_cast<double>(p0 - p1) / static_cast<double>(p0);
    summary["flops_per_token_before"] = f0;
    summary["flops_per_token_after"] = f1;
    summary["perplexity_before"] = before.perplexity();
    summary["perplexity_after"] = after.perplexity();
    summary["perplexity_protocol"] = after.protocol();
    const auto path = (fs::path(out) / "summary.json").string();
    write_text_atomic(path, summary.dump(2) + "\n");
    std::printf("prune: wrote %s/model and %s\n", out.c_str(), path.c_str());
    return 0;
  });
}
