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
#include <memory>
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
#include "lwcl/report/format.hpp"

#include "host_instances.hpp"
#include "lwcl/core/program.hpp"
#include "studies/validators.hpp"

using namespace lwcl;
namespace pp = lwcl::policies::pruning;
namespace fs = std::filesystem;

namespace {

using net_t = model::transformer<backend::cpu>;

// The command line.
struct settings {
  std::string model_dir, data_dir = "data/prepared", out, criterion = "wanda_sp", gran = "heads_and_ffn",
                         head_mode = "kv_groups", save_dtype = "f32";
  double ratio = 0.5, param_ratio = -1, threshold = 0.9;
  bool global = false, joint = false, no_compensation = false;
  int calib_batches = 8, batch = 8, seq = 0, eval_tokens = 32768;
  std::uint64_t seed = 0;
};

void add_options(CLI::App& app, settings& st) {
  app.add_option("--model", st.model_dir, "checkpoint folder (config.json, model.safetensors, tokenizer)")->required();
  app.add_option("--data", st.data_dir, "prepared data (train.bin for calibration, validation.bin for perplexity)");
  app.add_option("--out", st.out, "output folder (default runs/prune_<criterion>_<granularity>_<ratio>)");
  app.add_option("--criterion", st.criterion,
                 "random, magnitude_l1, magnitude_l2, wanda_sp, wanda_sp_in_out, flap, flap_pooled, taylor, activation, "
                 "block_influence, layer_collapse");
  app.add_option("--granularity", st.gran, "heads, ffn, heads_and_ffn or layers")
      ->check(CLI::IsMember({"heads", "ffn", "heads_and_ffn", "layers"}));
  app.add_option("--ratio", st.ratio, "fraction of the groups removed (layer_collapse: of the layers)");
  app.add_option("--param-ratio", st.param_ratio,
                 "instead of --ratio: remove this fraction of all parameters (the group ratio is searched for)")
      ->check(studies::within(0.0, 0.99));
  app.add_flag("--global", st.global, "rank groups across layers (adaptive widths) instead of the same ratio per layer");
  app.add_flag("--joint", st.joint, "with --global: rank KV groups and FFN channels together, weighted by the parameters "
               "each removes (FLAP's adaptive structure; --ratio is then the fraction of their parameters removed)");
  app.add_option("--head-mode", st.head_mode, "kv_groups (whole GQA groups) or query_heads (equal heads kept per group)")
      ->check(CLI::IsMember({"kv_groups", "query_heads"}));
  app.add_flag("--no-bias-compensation", st.no_compensation, "FLAP without folding removed channels' means into biases");
  app.add_option("--threshold", st.threshold, "layer_collapse: minimum mean cosine of the logits");
  app.add_option("--calib-batches", st.calib_batches, "calibration batches from the training split")->check(studies::positive);
  app.add_option("--batch", st.batch, "sequences per calibration batch")->check(studies::positive);
  app.add_option("--seq", st.seq, "tokens per sequence (default: the model's max_seq)")->check(studies::non_negative);
  app.add_option("--eval-tokens", st.eval_tokens, "predicted tokens of the held-out sample (windows of --seq over every "
                 "validation document)")->check(studies::positive);
  app.add_option("--seed", st.seed, "calibration batches and the random criterion");
  app.add_option("--save-dtype", st.save_dtype, "weights of the student written: f32, bf16 or f16 (rounded to nearest even)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
}

// A cut: the smaller model, the teacher layer each of its layers starts from, and what calibration cost.
struct cut {
  std::unique_ptr<net_t> student;
  std::vector<index_t> kept;
  double calib_seconds = 0;
  index_t calib_tokens = 0;
};

// Layer collapse (prune/layer_collapse.hpp) on one calibration batch, down to --ratio of the layers
// (--param-ratio: the layers holding that share of the parameters); its steps go into `summary`.
cut collapse(const settings& st, net_t& teacher, const data::batch_loader& loader, index_t T,
             nlohmann::ordered_json& summary) {
  const auto& cfg = teacher.config();
  timer clock;
  prune::collapse_options o;
  o.threshold = st.threshold;
  const double layer_fraction = st.param_ratio >= 0
                                    ? st.param_ratio * static_cast<double>(prune::model_parameters(cfg)) /
                                          static_cast<double>(prune::layer_parameters(cfg, cfg.layers[0]) * cfg.n_layers())
                                    : st.ratio;
  o.target_layers = std::max<index_t>(
      1, cfg.n_layers() - static_cast<index_t>(std::llround(layer_fraction * static_cast<double>(cfg.n_layers()))));
  o.merge = 1;
  std::vector<std::int32_t> ids, targets;
  loader.batch(0, ids, targets);
  std::vector<prune::collapse_step> log;
  cut c;
  c.student = prune::layer_collapse(teacher, ids, st.batch, T, o, &log);
  c.calib_seconds = clock.seconds();
  c.calib_tokens = st.batch * T;
  nlohmann::ordered_json steps = nlohmann::ordered_json::array();
  for (const auto& s : log) steps.push_back({{"layer", s.layer}, {"merged", s.merged}, {"cosine", s.cosine}, {"accepted", s.accepted}});
  summary["collapse_steps"] = steps;
  c.kept = prune::kept_layers(log, cfg.n_layers());
  return c;
}

// A named criterion scored on the calibration batches, allocated as --granularity, --ratio, --global and
// --joint say (policies/pruning/by_name.hpp); the group ratio found for --param-ratio goes into `summary`.
cut by_criterion(const settings& st, const net_t& teacher, const data::batch_loader& loader, nlohmann::ordered_json& summary) {
  prune::allocation a;
  a.gran = prune::parse_granularity(st.gran);
  a.ratio = st.ratio;
  a.global = st.global;
  a.joint = st.joint;
  a.heads = st.head_mode == "query_heads" ? prune::head_mode::query_heads : prune::head_mode::kv_groups;
  a.validate();
  pp::named_options no;
  no.criterion = st.criterion;
  no.alloc = a;
  no.param_ratio = st.param_ratio;
  no.bias_compensation = !st.no_compensation;
  no.seed = st.seed;
  no.calib_batches = st.calib_batches;
  auto r = pp::prune_named(teacher, loader, no);
  if (st.param_ratio >= 0) {
    summary["ratio"] = r.group_ratio;
    summary["target_parameter_fraction"] = st.param_ratio;
  }
  if (r.bias_compensation) summary["bias_compensation"] = true;
  return {std::move(r.student), std::move(r.kept), r.calib_seconds, r.calib_tokens};
}

nlohmann::ordered_json widths(const model::model_config& cfg) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& l : cfg.layers) out.push_back({{"n_heads", l.n_heads}, {"n_kv_heads", l.n_kv_heads}, {"ffn", l.ffn}});
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lwcl prune: structured pruning of a checkpoint (no recovery), with a JSON summary"};
  settings st;
  add_options(app, st);
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  return lwcl::guard_main([&] {
    check(st.criterion == "layer_collapse" || pp::known_criterion(st.criterion), "prune: criterion '", st.criterion,
          "' is unknown (expected ", pp::criterion_names, " or layer_collapse)");
    const auto cfg = checkpoint::read_hf_config(st.model_dir);
    backend::cpu be;
    net_t teacher(be, cfg, dtype::f32);
    checkpoint::load_hf_weights(teacher, st.model_dir);
    const index_t T = st.seq ? st.seq : cfg.max_seq;
    const std::string out = st.out.empty() ? "runs/prune_" + st.criterion + "_" + st.gran + "_" + report::format("%.2f", st.ratio) : st.out;
    const data::shard train_shard((fs::path(st.data_dir) / "train.bin").string());
    const data::batch_loader loader(train_shard, st.batch, T, 0x9e3779b9ULL + st.seed);
    // The held-out sample: windows of T over every validation document (eval/held_out.hpp).
    const auto val = eval::held_out_split(st.data_dir, "validation", T, st.eval_tokens);
    std::printf("prune: %s (%lld layers, %lld parameters), criterion %s, granularity %s, ratio %.2f%s\n", st.model_dir.c_str(),
                static_cast<long long>(cfg.n_layers()), static_cast<long long>(teacher.num_parameters()), st.criterion.c_str(),
                st.gran.c_str(), st.ratio, st.joint ? ", joint global ranking" : st.global ? ", global ranking" : "");
    const auto before = eval::perplexity(teacher, val);
    std::printf("before: perplexity %.3f (%s)\n", before.perplexity(), before.protocol().c_str());

    nlohmann::ordered_json summary = {{"model", st.model_dir}, {"criterion", st.criterion}, {"granularity", st.gran},
                                      {"ratio", st.ratio},      {"global", st.global},       {"joint", st.joint},
                                      {"calibration_tokens", 0}};
    const cut c = st.criterion == "layer_collapse" ? collapse(st, teacher, loader, T, summary) : by_criterion(st, teacher, loader, summary);
    summary["calibration_tokens"] = c.calib_tokens;
    summary["calibration_tokens_per_second"] =
        c.calib_seconds > 0 && c.calib_tokens > 0 ? static_cast<double>(c.calib_tokens) / c.calib_seconds : 0.0;
    const auto& sc = c.student->config();
    const auto after = eval::perplexity(*c.student, val);
    std::printf("after:  perplexity %.3f (%s)\n", after.perplexity(), after.protocol().c_str());
    const index_t p0 = teacher.num_parameters(), p1 = c.student->num_parameters();
    const double f0 = prune::flops_per_token(cfg, T), f1 = prune::flops_per_token(sc, T);
    std::printf("parameters %lld -> %lld (%.1f%% removed); forward FLOPs/token at %lld tokens %.3g -> %.3g (%.1f%% removed); "
                "calibration %.0f tokens/s\n",
                static_cast<long long>(p0), static_cast<long long>(p1), 100.0 * static_cast<double>(p0 - p1) / static_cast<double>(p0),
                static_cast<long long>(T), f0, f1, 100.0 * (f0 - f1) / f0, summary["calibration_tokens_per_second"].get<double>());

    checkpoint::save_hf(*c.student, (fs::path(out) / "model").string(), {checkpoint::parse_save_dtype(st.save_dtype), st.model_dir});
    summary["layers_before"] = widths(cfg);
    // The layer map for recovery (model/layer_map.hpp): student layer i replaces teacher layers [b[i], b[i+1]).
    summary["boundaries"] = model::boundaries_of_kept_layers(c.kept, cfg.n_layers());
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
