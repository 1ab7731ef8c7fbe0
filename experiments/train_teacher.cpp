// train_teacher: trains a gpt2- or llama-family language model from scratch on token shards written by
// experiments/prepare_data, with checkpoints every N steps and exact resume (run it again with the same
// arguments after a kill), validation loss beside a unigram baseline, metrics.jsonl and a progress bar.
// Built with CUDA (train_teacher_cuda) it trains on the GPU when one is present.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <string>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/train/lm_training.hpp"
#ifdef __CUDACC__
#include "lwcl/backend/cuda/cuda.cuh"
#include "lwcl/core/program.hpp"
#include "studies/dtype_option.hpp"
#include "studies/validators.hpp"
#endif

using namespace lwcl;

#ifdef __CUDACC__
constexpr const char* no_gpu = "no CUDA device was found";
#else
constexpr const char* no_gpu = "this is the CPU build (build train_teacher_cuda with the cuda preset)";
#endif

int main(int argc, char** argv) {
  CLI::App app{"lwcl train_teacher: train a gpt2/llama teacher language model from scratch, resumably"};
  std::string data = "data/prepared", out, preset = "tiny", family = "gpt2", device = "auto";
  long steps = 0, checkpoint_every = 0, eval_every = 0;
  int batch = 0, seq = 0, width = 0, layers = 0, heads = 0, kv_heads = 0, ffn = 0;
  double lr = 0;
  bool quiet = false;
  app.add_option("--data", data, "folder written by prepare_data (train.bin, validation.bin, tokenizer/)");
  app.add_option("--out", out, "run directory (default runs/teacher_<preset>_<family>); rerun to resume");
  app.add_option("--preset", preset, "tiny (minutes on 2 CPU cores), small or deep (8 layers; tens of minutes)")
      ->check(CLI::IsMember({"tiny", "small", "deep"}));
  app.add_option("--family", family, "gpt2, llama or qwen2")->check(CLI::IsMember({"gpt2", "llama", "qwen2"}));
  app.add_option("--device", device, "auto (CUDA when built with it and a GPU is present), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--steps", steps, "override the preset's optimisation steps")->check(studies::positive);
  app.add_option("--batch", batch, "override sequences per batch")->check(studies::positive);
  app.add_option("--seq", seq, "override tokens per sequence")->check(studies::positive);
  app.add_option("--lr", lr, "override the peak learning rate (min is a tenth)")->check(studies::positive);
  app.add_option("--width", width, "override d_model")->check(studies::positive);
  app.add_option("--layers", layers, "override the number of layers")->check(studies::positive);
  app.add_option("--heads", heads, "override attention heads")->check(studies::positive);
  app.add_option("--kv-heads", kv_heads, "override KV heads (llama/qwen2)")->check(studies::positive);
  app.add_option("--ffn", ffn, "override the FFN width")->check(studies::positive);
  app.add_option("--checkpoint-every", checkpoint_every, "steps between checkpoints")->check(studies::positive);
  app.add_option("--eval-every", eval_every, "steps between validation losses")->check(studies::positive);
  app.add_flag("--quiet", quiet, "no progress bar");
  std::string dtype;
  studies::add_dtype_option(app, dtype);
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  return lwcl::guard_main([&] {
    namespace fs = std::filesystem;
    const auto train_path = (fs::path(data) / "train.bin").string();
    check(fs::exists(train_path), "train_teacher: no '", train_path,
          "' (run tools/fetch_corpus.sh and experiments/prepare_data first, see docs/data.md)");
    const data::shard probe(train_path);
    const auto fam = model::parse_family(family);
    auto opt = train::lm_preset(preset, fam, static_cast<index_t>(probe.vocab_size()));
    auto& m = opt.model;
    if (width || layers || heads || kv_heads || ffn) {
      const auto L0 = m.layers.front();
      const index_t w = width ? width : m.d_model, h = heads ? heads : L0.n_heads;
      const index_t kv = kv_heads ? kv_heads : (heads && !model::traits_of(fam).gated_mlp ? h : std::min(L0.n_kv_heads, h));
      check(w % h == 0, "train_teacher: width ", w, " is not a multiple of ", h, " heads");
      m = model::model_config::uniform(fam, m.vocab, m.max_seq, w, layers ? layers : m.n_layers(), h,
                                       fam == model::family::gpt2 ? h : kv, ffn ? ffn : L0.ffn);
    }
    if (steps) {
      opt.steps = steps;
      opt.warmup = std::min(opt.warmup, std::max(0L, steps / 10));
    }
    if (batch) opt.batch = batch;
    if (seq) {
      opt.seq = seq;
      m.max_seq = std::max<index_t>(m.max_seq, seq);
      opt.eval_tokens = std::max<index_t>(opt.eval_tokens, 2 * static_cast<index_t>(seq));
    }
    if (lr > 0) {
      opt.lr = lr;
      opt.min_lr = lr / 10;
    }
    if (checkpoint_every) opt.checkpoint_every = checkpoint_every;
    if (eval_every) opt.eval_every = eval_every;
    if (out.empty()) out = "runs/teacher_" + preset + "_" + family;

    train::lm_hooks hooks;
    hooks.progress_bar = !quiet;
    auto report = [&](const train::lm_result& r, std::string_view backend) {
      std::printf("train_teacher: %s, %ld steps on %s: validation loss %.4f (perplexity %.2f) vs unigram %.4f; "
                  "%.0f tokens/s; model in %s/model\n",
                  r.resumed ? "resumed" : "trained", r.steps, std::string(backend).c_str(), r.val_loss, std::exp(r.val_loss),
                  r.unigram_val_loss, r.tokens_per_second, out.c_str());
      if (r.val_loss >= r.unigram_val_loss)
        std::printf("train_teacher: warning: the validation loss is not below the unigram baseline; train longer\n");
      return 0;
    };
#ifdef __CUDACC__
    if (device != "cpu" && backend::cuda_device_count() > 0) {
      backend::cuda be;
      return report(train::train_lm(be, opt, data, out, hooks), backend::cuda::name);
    }
#endif
    check(device != "cuda", "train_teacher: --device cuda needs a GPU: ", no_gpu);
    backend::cpu be;
    return report(train::train_lm(be, opt, data, out, hooks), backend::cpu::name);
  });
}
