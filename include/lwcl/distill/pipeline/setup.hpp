#pragma once
// What a pipeline run settles before it trains, and writes about itself: the check that the student,
// the layer map, the loader and the options fit together; the names of the bundle's policies (with
// pipeline_options::policy_labels applied); the fingerprint a checkpoint must match to be resumed; and
// the run's config.json. None of it depends on the policies' types, so it is compiled once per program.

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/cache/key.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/core/fs.hpp"
#include "lwcl/data/loader.hpp"
#include "lwcl/distill/pipeline/budget.hpp"
#include "lwcl/distill/pipeline/options.hpp"
#include "lwcl/distill/student_state.hpp"
#include "lwcl/model/config.hpp"
#include "lwcl/model/layer_map.hpp"

namespace lwcl::distill {

// Throws lwcl::error unless the student, the layer map `tlo`, the loader and the options fit together.
inline void validate_run(const pipeline_options& opt, const student_state& s, const std::vector<index_t>& tlo,
                         const data::batch_loader& loader) {
  const index_t L = s.config.n_layers();
  check(static_cast<index_t>(s.params.size()) == s.layout.numel(), "pipeline: the student holds ", s.params.size(),
        " parameters for a layout of ", s.layout.numel());
  model::check_boundary_map(tlo, L, -1, "pipeline");
  check(cache::is_feature_dtype(s.type), "pipeline: the student trains in ", dtype_name(s.type),
        ", expected f32, bf16 or f64 (the feature cache's dtypes)");
  check(opt.feature_batches >= 1, "pipeline: feature_batches is ", opt.feature_batches, ", expected at least 1");
  check(opt.total.amount > 0 && std::isfinite(opt.total.amount), "pipeline: the budget is ", opt.total.str(),
        ", expected a positive amount");
  check(opt.final_kd_share >= 0 && opt.final_kd_share < 1, "pipeline: final_kd_share is ", opt.final_kd_share,
        ", expected a share in [0, 1)");
  check(!s.is_encoder() || opt.validation_ids.empty(), "pipeline: validation_ids score a language model's perplexity; "
        "the student is an encoder (leave them empty and judge its embeddings)");
  check(opt.kd_lr >= 0 && std::isfinite(opt.kd_lr), "pipeline: kd_lr is ", opt.kd_lr, ", expected >= 0 (0: lr)");
  check(opt.kd_micro_batches >= 1 && loader.batch_size() % opt.kd_micro_batches == 0, "pipeline: kd_micro_batches is ",
        opt.kd_micro_batches, ", expected a divisor of the batch of ", loader.batch_size(), " sequences");
  check(opt.kd_hidden_mse >= 0 && std::isfinite(opt.kd_hidden_mse), "pipeline: kd_hidden_mse is ", opt.kd_hidden_mse,
        ", expected >= 0 (0: logit KD alone)");
  check(opt.kd_warmup_steps >= 0, "pipeline: kd_warmup_steps is ", opt.kd_warmup_steps, ", expected >= 0");
  check(opt.checkpoint_every >= 0, "pipeline: checkpoint_every is ", opt.checkpoint_every, ", expected >= 0");
  check(loader.batch_size() > 0 && loader.seq_len() > 0, "pipeline: the loader has no batch shape");
  if (!opt.validation_ids.empty()) {
    const index_t need = opt.eval_batches * loader.batch_size() * loader.seq_len();
    check(opt.eval_batches >= 1 && static_cast<index_t>(opt.validation_ids.size()) >= need, "pipeline: ",
          opt.validation_ids.size(), " validation tokens, expected at least eval_batches (", opt.eval_batches,
          ") batches of ", loader.batch_size(), " x ", loader.seq_len(), " = ", need);
  }
}

// The bundle's slot -> policy name (`names`, from describe()), with `labels` put in place of the
// names of the slots they name.
inline std::map<std::string, std::string> labelled_policies(std::map<std::string, std::string> names,
                                                             const std::map<std::string, std::string>& labels) {
  for (const auto& [slot, label] : labels) {
    check(names.count(slot) == 1, "pipeline: policy_labels names slot '", slot,
          "', expected one of segmentation, curriculum, pruning, cache, loss, backend");
    names[slot] = label;
  }
  return names;
}

// What must not change between a run and its resumption: the batch shape, the cached batches (their
// tokens, hashed), the layer map, the budget and how it is shared, the policies, the dtype and the fake
// quantisation. Options that leave the updates as they are (prefetching, kd_micro_batches) may change.
inline nlohmann::json run_fingerprint(const pipeline_options& opt, const data::batch_loader& loader,
                                      const std::vector<index_t>& tlo, const std::map<std::string, std::string>& policies,
                                      dtype type) {
  const std::uint64_t h = data::batches_hash(loader, opt.feature_batches);  // the feature batches' token ids
  return {{"batch", loader.batch_size()},
          {"seq_len", loader.seq_len()},
          {"feature_batches", opt.feature_batches},
          {"running_batches", opt.running_batches},
          {"feature_tokens_hash", std::to_string(h)},
          {"boundaries", tlo},
          {"budget", opt.total.str()},
          {"final_kd_share", opt.final_kd_share},
          {"min_visit_steps", opt.min_visit_steps},
          {"end_exact_visits", opt.end_exact_visits},
          {"budget_share", std::string(budget_share_name(opt.share))},
          {"keep_optimizer_state", opt.keep_optimizer_state},
          {"kd_lr", opt.kd_lr},
          {"kd_hidden_mse", opt.kd_hidden_mse},
          {"kd_encoder_objective", std::string(objective_name(opt.kd_encoder_objective))},
          {"kd_warmup_steps", opt.kd_warmup_steps},
          {"policies", policies},
          {"dtype", std::string(dtype_name(type))},
          {"fake_quant", opt.fake_quant ? opt.fake_quant->describe() : std::string("none")}};
}

// <run>/config.json: the policies, the budget, the options and the student's shape.
inline void write_run_config(const std::filesystem::path& path, const std::map<std::string, std::string>& policies,
                             const pipeline_options& opt, const data::batch_loader& loader, const student_state& s,
                             const std::vector<index_t>& tlo) {
  nlohmann::json j;
  j["policies"] = policies;
  j["budget"] = opt.total;
  j["options"] = {{"feature_batches", opt.feature_batches},
                  {"running_batches", opt.running_batches},
                  {"final_kd_share", opt.final_kd_share},
                  {"lr", opt.lr},
                  {"min_lr", opt.min_lr},
                  {"warmup_steps", opt.warmup_steps},
                  {"min_visit_steps", opt.min_visit_steps},
                  {"end_exact_visits", opt.end_exact_visits},
                  {"budget_share", std::string(budget_share_name(opt.share))},
                  {"keep_optimizer_state", opt.keep_optimizer_state},
                  {"kd_lr", opt.kd_lr},
                  {"kd_micro_batches", opt.kd_micro_batches},
                  {"kd_hidden_mse", opt.kd_hidden_mse},
                  {"kd_encoder_objective", std::string(objective_name(opt.kd_encoder_objective))},
                  {"kd_warmup_steps", opt.kd_warmup_steps},
                  {"weight_decay", opt.weight_decay},
                  {"clip", opt.clip},
                  {"kd_temperature", opt.kd_temperature},
                  {"checkpoint_every", opt.checkpoint_every},
                  {"prefetch_threads", opt.prefetch.threads},
                  {"prefetch_ring", opt.prefetch.ring},
                  {"batch", loader.batch_size()},
                  {"seq_len", loader.seq_len()},
                  {"fake_quant", opt.fake_quant ? opt.fake_quant->describe() : std::string("none")}};
  j["student"] = {{"family", std::string(model::family_name(s.config.fam))},
                  {"layers", s.config.n_layers()},
                  {"d_model", s.config.d_model},
                  {"dtype", std::string(dtype_name(s.type))},
                  {"boundaries", tlo}};
  write_text_atomic(path, j.dump(2) + "\n");
}

}  // namespace lwcl::distill
