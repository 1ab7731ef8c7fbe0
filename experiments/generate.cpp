// generate: text from one or more checkpoint folders (a teacher and its students) for the same prompt,
// side by side: each model's continuation, its size, and its decoding speed (tokens/s after the prompt,
// key/value cache). Greedy by default; --temperature, --top-k, --top-p and --seed sample (model/generate.hpp).
// The tokenizer is the first model's (a folder's vocab.json + merges.txt or tokenizer.json, or the one a GGUF
// file carries); every model must share its vocabulary. A model may be a GGUF file (experiments/export).
//   generate runs/teacher/model runs/prune/model --prompt "And God said" --max-new-tokens 40
#include <CLI/CLI.hpp>
#include <omp.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/fs.hpp"
#include "lwcl/core/program.hpp"
#include "lwcl/model/checkpoint/gguf_model.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/model/generate.hpp"
#include "lwcl/model/tokenizer/folder.hpp"

#include "host_instances.hpp"

using namespace lwcl;

int main(int argc, char** argv) {
  CLI::App app{"lwcl generate: text from a teacher and its students for one prompt, side by side"};
  std::vector<std::string> models;
  std::string prompt, prompt_file, out;
  int max_new = 40;
  model::sampling s;
  app.add_option("models", models, "checkpoint folders (config.json, model.safetensors) or GGUF files; the first holds the tokenizer")
      ->required()
      ->check(CLI::ExistingPath);
  app.add_option("--prompt", prompt, "the prompt text");
  app.add_option("--prompt-file", prompt_file, "read the prompt from this UTF-8 file")->check(CLI::ExistingFile);
  app.add_option("--max-new-tokens", max_new, "tokens to generate after the prompt")->capture_default_str();
  app.add_option("--temperature", s.temperature, "0 is greedy; above 0 samples")->capture_default_str();
  app.add_option("--top-k", s.top_k, "sample among the k most probable tokens (0: all)")->capture_default_str();
  app.add_option("--top-p", s.top_p, "sample among the most probable tokens whose probability reaches p, in (0, 1]")
      ->capture_default_str();
  app.add_option("--seed", s.seed, "seed of the sampling draws")->capture_default_str();
  app.add_option("--out", out, "also write every model's tokens, text and speed as JSON here");
  CLI11_PARSE(app, argc, argv);

  return lwcl::guard_main([&] {
    namespace fs = std::filesystem;
    s.validate();
    check(prompt.empty() != prompt_file.empty(), "generate: give the prompt with --prompt or --prompt-file (one of them)");
    if (!prompt_file.empty()) prompt = read_text(prompt_file);
    backend::cpu be;
    // A folder's model or a GGUF file's, frozen (no gradient buffer); the tokenizer a GGUF file carries.
    const auto load = [&](const std::string& path) {
      if (!checkpoint::is_gguf_file(path)) return checkpoint::load_hf(be, path, dtype::f32, model::frozen);
      return checkpoint::load_gguf(be, path, model::frozen).first;  // an xvalue: moved
    };
    std::unique_ptr<tokenizer::byte_bpe> gguf_tok;
    if (checkpoint::is_gguf_file(models.front())) {
      const checkpoint::gguf::file f(models.front());
      std::string why;
      gguf_tok = checkpoint::gguf_detail::tokenizer_of(f, checkpoint::gguf_detail::config_of(f).vocab, &why);
      check(gguf_tok != nullptr, "generate: '", models.front(), "' has ", why,
            " (expected llama.cpp's gpt2 tokenizer model with the gpt-2 pre-tokenizer, as experiments/export writes)");
    }
    const auto tok = gguf_tok ? std::move(*gguf_tok) : tokenizer::byte_bpe_of_folder(models.front());
    const auto ids = tok.encode(prompt);
    check(!ids.empty(), "generate: the prompt encodes to no token");
    std::printf("prompt (%zu tokens): %s\n", ids.size(), prompt.c_str());
    if (s.temperature == 0)
      std::printf("decoding: greedy, %d new tokens, %d threads\n", max_new, omp_get_max_threads());
    else
      std::printf("decoding: sampled at temperature %g, top-k %lld, top-p %g, seed %llu; %d new tokens, %d threads\n",
                  s.temperature, static_cast<long long>(s.top_k), s.top_p, static_cast<unsigned long long>(s.seed), max_new,
                  omp_get_max_threads());
    nlohmann::ordered_json runs = nlohmann::ordered_json::array();
    for (const auto& dir : models) {
      auto net = load(dir);
      // A model's vocabulary may be padded past its tokenizer's; ids the tokenizer lacks are never chosen.
      check(net->config().vocab >= static_cast<index_t>(tok.vocab_size()), "generate: '", dir, "' has a vocabulary of ",
            net->config().vocab, " tokens, fewer than the ", tok.vocab_size(), " of the tokenizer of '", models.front(), "'");
      model::sampling sv = s;
      sv.vocab = static_cast<index_t>(tok.vocab_size());
      const auto g = model::generate(*net, ids, max_new, sv);
      const std::string text = tok.decode(g.tokens);
      std::printf("\n== %s (%s, %lld layers, %lld parameters): %.1f tokens/s, prompt %.3f s\n%s%s\n", dir.c_str(),
                  std::string(model::family_name(net->config().fam)).c_str(), static_cast<long long>(net->config().n_layers()),
                  static_cast<long long>(net->num_parameters()), g.tokens_per_second(), g.prefill_seconds, prompt.c_str(),
                  text.c_str());
      runs.push_back({{"model", dir},
                      {"parameters", net->num_parameters()},
                      {"tokens", g.tokens},
                      {"text", text},
                      {"tokens_per_second", g.tokens_per_second()},
                      {"prefill_seconds", g.prefill_seconds}});
    }
    if (!out.empty())
      write_text_atomic(out, nlohmann::ordered_json{{"prompt", prompt},
                                                    {"prompt_tokens", ids},
                                                    {"temperature", s.temperature},
                                                    {"top_k", s.top_k},
                                                    {"top_p", s.top_p},
                                                    {"seed", s.seed},
                                                    {"runs", runs}}
                                 .dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) +
                                 "\n");  // a model's text may hold broken UTF-8: replaced in the JSON only
    return 0;
  });
}
