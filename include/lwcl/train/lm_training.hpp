#pragma once
// Training a decoder language model from scratch (lwcl's own teachers): presets, a run directory with
// checkpoints every N steps and exact resume, validation loss against a unigram baseline, metrics.jsonl
// and a progress bar. Batch k, the learning rate of step k and the optimiser state are all functions of
// what a checkpoint holds, so a run killed at any point and resumed ends with bitwise the same weights.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/core/checkpoint_dir.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/core/fs.hpp"
#include "lwcl/core/memory.hpp"
#include "lwcl/core/metrics.hpp"
#include "lwcl/core/progress.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/data/loader.hpp"
#include "lwcl/data/shards.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/optim/adamw.hpp"
#include "lwcl/optim/clip.hpp"
#include "lwcl/optim/schedule.hpp"

namespace lwcl::train {

// Everything that determines a training run. Two runs with equal options over the same shards produce
// the same weights; resume refuses a run directory whose options differ.
struct lm_options {
  model::model_config model;
  index_t batch = 16, seq = 128;
  long steps = 400, warmup = 40;
  double lr = 3e-3, min_lr = 3e-4, weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, clip = 1.0;
  std::uint64_t init_seed = 1234, data_seed = 42;
  long checkpoint_every = 100;  // also at the last step
  long eval_every = 100;        // validation loss; also at the last step
  index_t eval_tokens = 65536;  // validation tokens scored per evaluation (the start of the split)
  long keep_checkpoints = 2;    // older checkpoints are deleted

  nlohmann::ordered_json to_json() const {
    nlohmann::ordered_json layers = nlohmann::ordered_json::array();
    for (const auto& l : model.layers) layers.push_back({l.n_heads, l.n_kv_heads, l.ffn});
    return {{"family", std::string(model::family_name(model.fam))},
            {"vocab", model.vocab},
            {"max_seq", model.max_seq},
            {"d_model", model.d_model},
            {"head_dim", model.head_dim},
            {"norm_eps", model.norm_eps},
            {"rope_theta", model.rope_theta},
            {"tie_embeddings", model.tie_embeddings},
            {"layers", layers},
            {"batch", batch},
            {"seq", seq},
            {"steps", steps},
            {"warmup", warmup},
            {"lr", lr},
            {"min_lr", min_lr},
            {"weight_decay", weight_decay},
            {"beta1", beta1},
            {"beta2", beta2},
            {"eps", eps},
            {"clip", clip},
            {"init_seed", init_seed},
            {"data_seed", data_seed},
            {"checkpoint_every", checkpoint_every},
            {"eval_every", eval_every},
            {"eval_tokens", eval_tokens}};
  }

  void validate() const {
    model.validate();
    check(batch > 0 && seq > 0, "lm_options: batch ", batch, " x seq ", seq, " must be positive");
    check(seq <= model.max_seq, "lm_options: seq ", seq, " exceeds the model's max_seq ", model.max_seq);
    check(steps > 0, "lm_options: steps must be positive, got ", steps);
    check(warmup >= 0 && warmup < steps, "lm_options: warmup ", warmup, " must be in [0, steps = ", steps, ")");
    check(checkpoint_every > 0 && eval_every > 0, "lm_options: checkpoint_every and eval_every must be positive");
    check(eval_tokens > seq, "lm_options: eval_tokens ", eval_tokens, " must exceed seq ", seq);
    check(clip > 0, "lm_options: clip must be positive, got ", clip);
    check(keep_checkpoints >= 1, "lm_options: keep_checkpoints must be at least 1");
  }
};

// Presets of lwcl's own teachers. `tiny` trains in a few minutes on a 2-core CPU (quickstart, tests);
// `small` (6 layers, width 256) takes tens of minutes there and is the paper_repro teacher; `deep` (8
// layers, width 192) is the teacher whose depth is halved in the harder comparisons.
inline lm_options lm_preset(std::string_view name, model::family fam, index_t vocab) {
  check(fam == model::family::gpt2 || fam == model::family::llama || fam == model::family::qwen2, "lm_preset: family ",
        model::family_name(fam), " is not a decoder (expected gpt2, llama or qwen2)");
  const bool gated = model::traits_of(fam).gated_mlp;
  lm_options o;
  if (name == "tiny") {
    // SwiGLU has three FFN matrices: width 2/3 of 4C (rounded to 32) keeps the parameter count equal.
    o.model = model::model_config::uniform(fam, vocab, 128, 128, 4, 4, gated ? 2 : 4, gated ? 352 : 512);
    o.batch = 16;
    o.seq = 128;
    o.steps = 600;
    o.warmup = 60;
    o.lr = 3e-3;
    o.min_lr = 3e-4;
    o.checkpoint_every = 100;
    o.eval_every = 100;
    o.eval_tokens = 32768;
  } else if (name == "small") {
    o.model = model::model_config::uniform(fam, vocab, 256, 256, 6, 8, gated ? 4 : 8, gated ? 704 : 1024);
    o.batch = 16;
    o.seq = 256;
    o.steps = 1200;  // about 2.1 s per step on 2 CPU cores: some 45 minutes
    o.warmup = 100;
    o.lr = 1.5e-3;
    o.min_lr = 1.5e-4;
    o.checkpoint_every = 200;
    o.eval_every = 200;
    o.eval_tokens = 131072;
  } else if (name == "deep") {
    // Eight layers, so that depth can be halved with a layer map; width 192 keeps it under about 40
    // minutes on a 2-core CPU.
    o.model = model::model_config::uniform(fam, vocab, 128, 192, 8, 6, gated ? 2 : 6, gated ? 512 : 768);
    o.batch = 16;
    o.seq = 128;
    o.steps = 2000;
    o.warmup = 100;
    o.lr = 2e-3;
    o.min_lr = 2e-4;
    o.checkpoint_every = 200;
    o.eval_every = 200;
    o.eval_tokens = 32768;
  } else {
    fail("lm_preset: preset '", name, "' is unknown (expected tiny, small or deep)");
  }
  return o;
}

// Cross-entropy (nats/token) of a unigram model fitted on `train` (add-one smoothing) on the first
// `count` targets of `eval` after its first token: the baseline a language model must beat.
inline double unigram_cross_entropy(const data::shard& train, const data::shard& eval, std::uint64_t count) {
  const auto V = train.vocab_size();
  std::vector<double> freq(V, 1.0);
  for (std::uint64_t i = 0; i < train.size(); ++i) freq[static_cast<std::size_t>(train[i])] += 1.0;
  const double total = static_cast<double>(train.size()) + static_cast<double>(V);
  const std::uint64_t n = std::min<std::uint64_t>(count, eval.size() - 1);
  double nll = 0;
  for (std::uint64_t i = 1; i <= n; ++i) nll -= std::log(freq[static_cast<std::size_t>(eval[i])] / total);
  return nll / static_cast<double>(n);
}

struct lm_result {
  long first_step = 0;  // 1 for a fresh run, the checkpoint's step + 1 after a resume
  long steps = 0;
  double final_train_loss = 0, val_loss = 0, unigram_val_loss = 0;
  double seconds = 0, tokens_per_second = 0;
  bool resumed = false;
};

// Hooks for programs and tests: progress output, and a step after which training stops abruptly (no
// checkpoint, no final save), as a kill would.
struct lm_hooks {
  bool progress_bar = true;
  std::FILE* log = stdout;
  long halt_after_step = 0;  // 0: never
};

struct halted {};  // thrown by train_lm when halt_after_step is reached

namespace detail {

inline std::string step_name(long step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08ld", step);
  return buf;
}

}  // namespace detail

// Mean next-token loss over the first `tokens` targets of `s` in non-overlapping windows of seq tokens,
// `batch` windows per forward. Deterministic: the same tokens every call.
template <class Backend>
double validation_loss(model::transformer<Backend>& net, const data::shard& s, index_t batch, index_t seq, index_t tokens) {
  auto& be = net.backend();
  const index_t windows = std::min<index_t>(tokens, static_cast<index_t>(s.size()) - 1) / seq;
  check(windows >= 1, "validation_loss: '", s.path(), "' holds ", s.size(), " tokens, too few for one window of ", seq);
  buffer<Backend> dtok(be, static_cast<std::size_t>(batch * seq) * sizeof(std::int32_t));
  buffer<Backend> dtgt(be, dtok.bytes());
  std::vector<std::int32_t> tok, tgt;
  double sum = 0;
  for (index_t w0 = 0; w0 < windows; w0 += batch) {
    const index_t b = std::min(batch, windows - w0);
    tok.resize(static_cast<std::size_t>(b * seq));
    tgt.resize(tok.size());
    for (index_t i = 0; i < b; ++i)
      for (index_t t = 0; t < seq; ++t) {
        const auto pos = static_cast<std::uint64_t>((w0 + i) * seq + t);
        tok[static_cast<std::size_t>(i * seq + t)] = s[pos];
        tgt[static_cast<std::size_t>(i * seq + t)] = s[pos + 1];
      }
    be.from_host(dtok.data(), tok.data(), tok.size() * sizeof(std::int32_t));
    be.from_host(dtgt.data(), tgt.data(), tgt.size() * sizeof(std::int32_t));
    const double mean = net.forward(tensor(dtok.data(), dtype::i32, {b, seq}), tensor(dtgt.data(), dtype::i32, {b, seq}));
    check(std::isfinite(mean), "validation_loss: non-finite loss on windows [", w0, ", ", w0 + b, ")");
    sum += mean * static_cast<double>(b);
  }
  return sum / static_cast<double>(windows);
}

// The step a teacher checkpoint's state.json ({"step": N}) records, checked to lie in [1, steps].
inline long read_lm_step(const std::filesystem::path& path, long steps) {
  long step = 0;
  try {
    const auto state = nlohmann::json::parse(read_text(path));
    check(state.is_object() && state.contains("step") && state.at("step").is_number_integer(), "train_lm: '",
          path.string(), "' holds no integer \"step\"");
    step = state.at("step").get<long>();
  } catch (const nlohmann::json::exception& e) {
    fail("train_lm: '", path.string(), "' is not a checkpoint state: ", e.what());
  }
  check(step >= 1 && step <= steps, "train_lm: '", path.string(), "' records step ", step, ", expected 1 to ", steps);
  return step;
}

// Trains (or resumes) the run in `run_dir` on `data_dir`/{train,validation}.bin. Layout of the run:
//   config.json            the options (a resume must match them)
//   metrics.jsonl          one record per step: loss, grad_norm, lr, seconds (+ val_loss at evaluations)
//   checkpoints/step_N/    config.json, model.safetensors, optimizer.bin, state.json, tokenizer files
//   checkpoints/latest     the name of the newest complete checkpoint (written last, atomically)
//   model/                 the final model as a Hugging Face folder with the tokenizer
//   report.json            losses, unigram baseline, wall time, tokens/s, peak bytes
template <class Backend>
lm_result train_lm(Backend& be, const lm_options& opt, const std::string& data_dir, const std::string& run_dir,
                   const lm_hooks& hooks = {}) {
  namespace fs = std::filesystem;
  opt.validate();
  const fs::path run(run_dir), ckdir = fs::path(run_dir) / "checkpoints";
  const data::shard train_shard((fs::path(data_dir) / "train.bin").string());
  const data::shard val_shard((fs::path(data_dir) / "validation.bin").string());
  check(train_shard.vocab_size() <= static_cast<std::uint64_t>(opt.model.vocab), "train_lm: the data's vocabulary (",
        train_shard.vocab_size(), ") is larger than the model's (", opt.model.vocab, ")");
  fs::create_directories(ckdir);

  // A run directory belongs to one set of options.
  const auto options_json = opt.to_json();
  const auto cfg_path = run / "config.json";
  if (fs::exists(cfg_path)) {
    nlohmann::ordered_json saved;
    try {
      saved = nlohmann::ordered_json::parse(read_text(cfg_path));
    } catch (const nlohmann::json::exception& e) {
      fail("train_lm: '", cfg_path.string(), "' is malformed JSON: ", e.what());
    }
    for (auto it = options_json.begin(); it != options_json.end(); ++it)
      check(saved.contains("options") && saved["options"].contains(it.key()) && saved["options"][it.key()] == it.value(),
            "train_lm: run directory '", run_dir, "' was started with different options (", it.key(), " was ",
            saved.contains("options") && saved["options"].contains(it.key()) ? saved["options"][it.key()].dump() : "absent",
            ", now ", it.value().dump(), "); use a new run directory");
  } else {
    nlohmann::ordered_json j = {{"program", "train_lm"}, {"data", data_dir}, {"backend", std::string(Backend::name)},
                                {"options", options_json}};
    write_text_atomic(cfg_path, j.dump(2) + "\n");
  }

  model::transformer<Backend> net(be, opt.model);
  optim::adamw_config oc;
  oc.lr = opt.lr;
  oc.beta1 = opt.beta1;
  oc.beta2 = opt.beta2;
  oc.eps = opt.eps;
  oc.weight_decay = opt.weight_decay;
  optim::adamw<Backend> adam(be, net.params(), oc);
  const optim::cosine_schedule sched{opt.lr, opt.min_lr, opt.warmup, opt.steps};

  lm_result res;
  long step0 = 0;
  const checkpoint_dir checkpoints(ckdir, "step_", static_cast<std::size_t>(opt.keep_checkpoints));
  if (const auto latest = checkpoints.latest()) {
    const auto dir = *latest;
    step0 = read_lm_step(dir / "state.json", opt.steps);
    checkpoint::load_hf_weights(net, dir.string());
    std::ifstream os(dir / "optimizer.bin", std::ios::binary);
    check(os.good(), "train_lm: cannot read '", (dir / "optimizer.bin").string(), "'");
    adam.load(os);
    check(adam.steps() == step0, "train_lm: checkpoint '", dir.string(), "' is at step ", step0, " but its optimiser at ",
          adam.steps());
    res.resumed = true;
    if (hooks.log) std::fprintf(hooks.log, "train_lm: resuming from %s (step %ld of %ld)\n", dir.string().c_str(), step0, opt.steps);
  } else {
    net.init(opt.init_seed);
  }
  truncate_metrics(run / "metrics.jsonl", "step", step0);
  metrics_writer metrics((run / "metrics.jsonl").string(), true);

  const data::batch_loader loader(train_shard, opt.batch, opt.seq, opt.data_seed);
  const double unigram = unigram_cross_entropy(train_shard, val_shard, static_cast<std::uint64_t>(opt.eval_tokens));
  res.unigram_val_loss = unigram;
  if (hooks.log)
    std::fprintf(hooks.log,
                 "train_lm: %s, %lld layers, width %lld, %lld parameters; batch %lld x %lld; %ld steps; "
                 "unigram validation loss %.4f\n",
                 std::string(model::family_name(opt.model.fam)).c_str(), static_cast<long long>(opt.model.n_layers()),
                 static_cast<long long>(opt.model.d_model), static_cast<long long>(net.num_parameters()),
                 static_cast<long long>(opt.batch), static_cast<long long>(opt.seq), opt.steps, unigram);

  const fs::path tok_dir = fs::path(data_dir) / "tokenizer";
  auto save_checkpoint = [&](long step) {
    const auto name = detail::step_name(step);
    const auto dir = checkpoints.start(name);  // emptied: a half-written folder of a killed run goes
    checkpoint::save_hf(net, dir.string(), {.weights = {}, .tokenizer_from = tok_dir.string()});
    write_stream_atomic(dir / "optimizer.bin", [&](std::ostream& f) { adam.save(f); });
    write_text_atomic(dir / "state.json", nlohmann::json({{"step", step}}).dump() + "\n");
    checkpoints.commit(name);  // `latest`, then only the newest keep_checkpoints folders remain
  };

  buffer<Backend> dtok(be, static_cast<std::size_t>(opt.batch * opt.seq) * sizeof(std::int32_t));
  buffer<Backend> dtgt(be, dtok.bytes());
  const tensor tok(dtok.data(), dtype::i32, {opt.batch, opt.seq}), tgt(dtgt.data(), dtype::i32, {opt.batch, opt.seq});
  std::vector<std::int32_t> htok, htgt;
  std::unique_ptr<progress> bar;
  if (hooks.progress_bar) {
    bar = std::make_unique<progress>("train", opt.steps);
    bar->starts_at(step0);  // a resumed run: its time left from this process's steps
  }
  timer clock;
  double smooth = 0, val = 0;
  res.first_step = step0 + 1;
  for (long step = step0 + 1; step <= opt.steps; ++step) {
    loader.batch(static_cast<std::uint64_t>(step - 1), htok, htgt);
    be.from_host(dtok.data(), htok.data(), htok.size() * sizeof(std::int32_t));
    be.from_host(dtgt.data(), htgt.data(), htgt.size() * sizeof(std::int32_t));
    const double lr = sched.lr(step);
    double loss = 0, norm = 0;
    try {
      net.zero_grad();
      loss = net.forward(tok, tgt);
      check(std::isfinite(loss), "the loss is ", loss);
      net.backward();
      norm = optim::clip_grad_norm(be, net.grads(), opt.clip);  // throws on a non-finite norm
      adam.step(net.grads(), lr);
    } catch (const lwcl::error& e) {
      fail("train_lm: training stopped at step ", step, ": ", e.what());
    }
    smooth = step == step0 + 1 ? loss : 0.95 * smooth + 0.05 * loss;
    nlohmann::json rec = {{"step", step}, {"loss", loss}, {"grad_norm", norm}, {"lr", lr}, {"seconds", clock.seconds()}};
    if (step % opt.eval_every == 0 || step == opt.steps) {
      val = validation_loss(net, val_shard, opt.batch, opt.seq, opt.eval_tokens);
      rec["val_loss"] = val;
      rec["unigram_val_loss"] = unigram;
      if (hooks.log)
        std::fprintf(hooks.log, "step %6ld  loss %.4f  val_loss %.4f  (unigram %.4f)  lr %.2e  %.1f s\n", step, smooth, val,
                     unigram, lr, clock.seconds());
    }
    metrics.write(rec);
    if (hooks.halt_after_step == step) throw halted{};
    if (step % opt.checkpoint_every == 0 || step == opt.steps) save_checkpoint(step);
    char note[64];
    std::snprintf(note, sizeof note, "loss %.3f", smooth);
    if (bar) bar->update(step, note);
  }
  if (bar) bar->finish();
  res.seconds = clock.seconds();
  res.steps = opt.steps;
  const long trained = opt.steps - step0;
  res.tokens_per_second = res.seconds > 0 ? static_cast<double>(trained * opt.batch * opt.seq) / res.seconds : 0;
  res.final_train_loss = smooth;
  res.val_loss = step0 == opt.steps ? validation_loss(net, val_shard, opt.batch, opt.seq, opt.eval_tokens) : val;

  const auto model_dir = run / "model";
  checkpoint::save_hf(net, model_dir.string(), {.weights = {}, .tokenizer_from = tok_dir.string()});
  nlohmann::ordered_json report = {{"steps", opt.steps},
                                   {"resumed_from_step", step0},
                                   {"final_train_loss", res.final_train_loss},
                                   {"val_loss", res.val_loss},
                                   {"val_perplexity", std::exp(res.val_loss)},
                                   {"unigram_val_loss", unigram},
                                   {"val_protocol", "split=validation seq_len=" + std::to_string(opt.seq) + " stride=" +
                                                        std::to_string(opt.seq) + " tokens=" +
                                                        std::to_string(std::min<index_t>(opt.eval_tokens, static_cast<index_t>(val_shard.size()) - 1) / opt.seq * opt.seq)},
                                   {"parameters", net.num_parameters()},
                                   {"wall_seconds", res.seconds},
                                   {"tokens", static_cast<long>(opt.steps) * opt.batch * opt.seq},
                                   {"tokens_per_second", res.tokens_per_second},
                                   {"peak_host_bytes", memory().peak(tier::host)},
                                   {"peak_device_bytes", memory().peak(tier::device)},
                                   {"backend", std::string(Backend::name)}};
  write_text_atomic(run / "report.json", report.dump(2) + "\n");
  return res;
}

// A teacher a program may ask for by run directory: trained there (resumably, with the preset's
// options) when `run`/model holds no weights yet, used as it is otherwise.
struct cached_lm {
  std::filesystem::path dir;  // <run>/model: config.json, model.safetensors and the tokenizer
  double seconds = 0;         // its training time, from the run's report.json
  long tokens = 0;            // its training tokens, from report.json (the preset's when it does not say)
};

// The `preset` gpt2 teacher of the prepared data in `data_dir` (train.bin, validation.bin) in run/model,
// trained first when absent. The run's report.json, written last, marks it finished: a run killed while
// it saved its model is resumed (from its final checkpoint), not taken as trained.
template <class Backend>
cached_lm ensure_lm(Backend& be, const std::string& data_dir, const std::string& run, const std::string& preset = "tiny") {
  namespace fs = std::filesystem;
  const auto train_path = fs::path(data_dir) / "train.bin";
  check(fs::exists(train_path), "no '", train_path.string(),
        "' (tools/quickstart.sh prepares it: tools/fetch_corpus.sh, then experiments/prepare_data)");
  cached_lm t;
  t.dir = fs::path(run) / "model";
  const data::shard probe(train_path.string());
  const auto opt = lm_preset(preset, model::family::gpt2, static_cast<index_t>(probe.vocab_size()));
  t.tokens = static_cast<long>(opt.steps) * opt.batch * opt.seq;
  if (!fs::exists(fs::path(run) / "report.json") || !fs::exists(t.dir / "model.safetensors")) {
    std::printf("training the %s teacher into %s (rerun resumes after a kill)\n", preset.c_str(), run.c_str());
    t.seconds = train_lm(be, opt, data_dir, run).seconds;
    return t;
  }
  std::printf("using the cached teacher %s\n", t.dir.string().c_str());
  if (const auto report = fs::path(run) / "report.json"; fs::exists(report)) {
    const auto j = nlohmann::json::parse(read_text(report));
    t.seconds = j.value("wall_seconds", 0.0);
    t.tokens = j.value("tokens", t.tokens);
  }
  return t;
}

}  // namespace lwcl::train
