#pragma once
// Part of the comparison harness (studies/comparison.hpp, which includes this file last; include that):
// start(), the teacher (trained when absent), the held-out samples, the multiple-choice tasks, the
// pruned student and the training stream of a run, with the teacher's and the pruned student's rows; judge(),
// how every method's student is scored; mc_table(), the multiple-choice scores as a table.

#include "studies/comparison.hpp"

namespace lwcl::studies {

template <class Backend, policies::pruning_criterion Criterion>
void comparison<Backend, Criterion>::start() {
  namespace fs = std::filesystem;
  rows_.clear();
  const index_t B = opt_.batch, T = opt_.seq;
  teacher_ = train::ensure_lm(be_, opt_.data, opt_.teacher, "tiny");
  const auto eot = eval::end_of_text_id((fs::path(opt_.data) / "tokenizer").string());  // read once for every sample
  auto sample = [&](const char* split) { return eval::held_out_split(opt_.data, split, T, opt_.eval_tokens, eot); };
  val_ = sample("validation");
  if (opt_.test_split) test_ = sample("test");
  extra_.clear();
  for (const auto& split : opt_.eval_splits) {
    check(fs::exists(fs::path(opt_.data) / (split + ".bin")), program_, ": --eval-splits names '", split, "', but ",
          (fs::path(opt_.data) / (split + ".bin")).string(), " does not exist (prepare_data writes <split>.<corpus>.bin)");
    std::string key = "ppl_" + split;
    std::replace(key.begin(), key.end(), '.', '_');
    extra_.emplace_back(key, sample(split.c_str()));
  }
  mc_.clear();
  mc_tok_.reset();
  for (const auto& path : opt_.mc) {
    check(fs::exists(path), program_, ": --mc names '", path, "', which does not exist (python3 tools/make_mc_tasks.py "
          "writes data/mc/<task>.<split>.jsonl)");
    if (!mc_tok_) mc_tok_ = tokenizer::byte_bpe_of_folder(fs::path(opt_.data) / "tokenizer");
    mc_.emplace_back(mc_task_name(path), eval::read_mc_jsonl(path, opt_.mc_limit));
  }
  if (opt_.curve_points > 0) curve_ = eval::held_out_split(opt_.data, "validation", T, opt_.curve_tokens, eot);
  err_batches_ = eval::sample_batches(val_, B, T, 2);
  const data::shard train_shard((fs::path(opt_.data) / "train.bin").string());
  auto t = checkpoint::load_hf(be_, teacher_.dir.string());
  check(T <= t->config().max_seq, program_, ": --seq ", T, " exceeds the teacher's max_seq ", t->config().max_seq);
  teacher_parameters_ = t->num_parameters();
  timer clock;
  const auto calib = static_cast<index_t>(opt_.calib_batches);
  const data::batch_loader calib_loader(train_shard, B, T, seeded(0xC0FFEE, opt_.seed));  // this seed's calibration sample
  std::unique_ptr<net_t> p;
  std::vector<index_t> kept;
  if (opt_.depth > 0) {
    p = policies::pruning::prune_depth(*t, calib_loader, opt_.depth, calib, kept);
    std::string k;
    for (const auto l : kept) k += (k.empty() ? "" : " ") + std::to_string(l);
    std::printf("block_influence removes %.0f%% of the layers: %lld -> %lld, teacher layers kept: %s\n", 100 * opt_.depth,
                static_cast<long long>(t->config().n_layers()), static_cast<long long>(p->config().n_layers()), k.c_str());
  }
  if (pruner_) {
    const net_t& src = p ? *p : *t;
    std::vector<index_t> remain;
    auto w = pruner_(src, calib_loader, calib, remain);
    check(w != nullptr, program_, ": the pruner '", pruner_name_, "' returned no student");
    if (!remain.empty() && static_cast<index_t>(remain.size()) < src.config().n_layers()) {
      // Layers removed: the teacher layers kept, through the depth pruning's map when there was one.
      std::vector<index_t> composed;
      for (const index_t l : remain) composed.push_back(kept.empty() ? l : kept[static_cast<std::size_t>(l)]);
      kept = std::move(composed);
    }
    p = std::move(w);
  } else if (opt_.ratio > 0 || !p) {
    auto& src = p ? *p : *t;
    auto w = policies::pruning::prune_uniform(src, calib_loader, criterion_, opt_.ratio, calib);
    p = std::move(w);
  }
  const double prune_seconds = clock.seconds();
  auto block_parameters = [](const model::model_config& c) {
    double n = 0;
    for (const auto& L : c.layers) n += static_cast<double>(prune::layer_parameters(c, L));
    return n;
  };
  const double block0 = block_parameters(t->config()), block1 = block_parameters(p->config());
  const double removed_all = 1.0 - static_cast<double>(p->num_parameters()) / static_cast<double>(teacher_parameters_);
  std::printf("%s %.0f%%%s: %lld -> %lld parameters (%.1f%% removed; %.1f%% of the blocks') in "
              "%.1f s\n", criterion_name().c_str(), 100 * opt_.ratio, pruner_ ? "" : " of heads and FFN channels",
              static_cast<long long>(teacher_parameters_),
              static_cast<long long>(p->num_parameters()), 100 * removed_all, 100 * (1 - block1 / block0), prune_seconds);
  // The teacher's row depends on the teacher and the held-out samples alone, not on the seed or the
  // student: a program that runs the comparison many times (seeds, a sweep of settings) scores it once.
  std::string teacher_key = teacher_.dir.string() + "|" + opt_.data + "|" + std::to_string(T) + "|" +
                            std::to_string(opt_.eval_tokens) + "|" + std::to_string(opt_.test_split) + "|" +
                            std::to_string(opt_.curve_points) + "|" + std::to_string(opt_.curve_tokens) + "|" +
                            std::to_string(opt_.mc_limit);
  for (const auto& s : opt_.eval_splits) teacher_key += "|split " + s;
  for (const auto& m : opt_.mc) teacher_key += "|mc " + m;
  if (!teacher_row_ || std::get<0>(*teacher_row_) != teacher_key) {
    const auto pt = eval::perplexity(*t, val_);
    method_row tr;
    tr.name = "teacher";
    tr.val_ppl = pt.perplexity();
    if (opt_.test_split) tr.details["test_ppl"] = eval::perplexity(*t, test_).perplexity();
    for (const auto& [key, smp] : extra_) tr.details[key] = eval::perplexity(*t, smp).perplexity();
    if (opt_.curve_points > 0) tr.details["curve_ppl"] = eval::perplexity(*t, curve_).perplexity();
    score_mc(*t, tr);
    tr.wall_seconds = teacher_.seconds;
    tr.tokens = teacher_.tokens;
    teacher_row_.emplace(teacher_key, tr, pt.protocol());
  }
  protocol_ = std::get<2>(*teacher_row_);
  rows_.push_back(std::get<1>(*teacher_row_));
  pruned_ = student_state::of(*p);
  boundaries_ = !kept.empty() ? model::boundaries_of_kept_layers(kept, t->config().n_layers())
                              : model::identity_boundaries(p->config().n_layers());
  method_row pr;
  pr.name = "pruned";
  pr.val_ppl = eval::perplexity(*p, val_).perplexity();
  if (opt_.test_split) pr.details["test_ppl"] = eval::perplexity(*p, test_).perplexity();
  for (const auto& [key, smp] : extra_) pr.details[key] = eval::perplexity(*p, smp).perplexity();
  pr.cumulative_error = eval::cumulative_error(*t, *p, boundaries_, err_batches_, B, T);
  const auto pa = eval::teacher_agreement(*t, *p, val_);
  pr.details["kl_teacher"] = pa.kl;
  pr.details["top1_agreement"] = pa.top1;
  score_mc(*p, pr);
  pr.wall_seconds = prune_seconds;
  pr.tokens = static_cast<long>(opt_.calib_batches) * B * T;
  pr.details["criterion"] = criterion_name();
  pr.details["layers"] = p->config().n_layers();
  pr.details["boundaries"] = boundaries_;
  pr.details["parameters"] = p->num_parameters();
  pr.details["removed_fraction"] = removed_all;
  pr.details["block_removed_fraction"] = 1 - block1 / block0;
  stream_.emplace(opt_);
  // Which data this seed drew: the calibration batches and the first training batches every method reads.
  pr.details["calibration_hash"] = std::to_string(data::batches_hash(calib_loader, calib));
  pr.details["training_stream_hash"] = std::to_string(data::batches_hash(stream_->loader, 2));
  rows_.push_back(pr);
}

template <class Backend, policies::pruning_criterion Criterion>
method_row comparison<Backend, Criterion>::judge(const std::string& name, const student_state& s) {
  auto net = s.to_transformer(be_);
  method_row r;
  r.name = name;
  r.val_ppl = eval::perplexity(*net, val_).perplexity();
  if (opt_.test_split) r.details["test_ppl"] = eval::perplexity(*net, test_).perplexity();
  for (const auto& [key, smp] : extra_) r.details[key] = eval::perplexity(*net, smp).perplexity();
  score_mc(*net, r);
  auto teacher = checkpoint::load_hf(be_, teacher_.dir.string(), dtype::f32, model::frozen);
  r.cumulative_error = eval::cumulative_error(*teacher, *net, boundaries_, err_batches_, opt_.batch, opt_.seq);
  const auto a = eval::teacher_agreement(*teacher, *net, val_);
  r.details["kl_teacher"] = a.kl;
  r.details["top1_agreement"] = a.top1;
  if (rows_.size() >= 2 && rows_[0].name == "teacher" && rows_[1].name == "pruned")
    if (const auto share = eval::recovered_share(rows_[1].val_ppl, r.val_ppl, rows_[0].val_ppl)) r.details["recovered_share"] = *share;
  return r;
}

template <class Backend, policies::pruning_criterion Criterion>
std::string comparison<Backend, Criterion>::mc_table(const std::vector<method_row>& rows) const {
  if (mc_.empty()) return "";
  std::string md = "multiple choice: " + mc_protocol_ + "\n\n| method | task | n | acc | acc_norm |\n|---|---|---:|---:|---:|\n";
  for (const auto& r : rows)
    for (const auto& [task, items] : mc_) {
      const std::string k = "mc_" + task;
      if (!r.details.contains(k + "_acc")) continue;
      const auto v = [&](const std::string& f) { return r.details.at(k + f).template get<double>(); };
      md += report::format("| %s | %s | %zu | %.3f +- %.3f | %.3f +- %.3f |\n", r.name.c_str(), task.c_str(), items.size(),
                           v("_acc"), v("_acc_stderr"), v("_acc_norm"), v("_acc_norm_stderr"));
    }
  return md;
}

}  // namespace lwcl::studies
