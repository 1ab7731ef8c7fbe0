// eval_model: perplexity of a checkpoint folder (config.json, model.safetensors and the tokenizer:
// vocab.json + merges.txt or tokenizer.json) on a text file, printed with its protocol. With
// --dump-logits FILE it also writes the logits of the first sequence, so that another system's logits
// for the same token ids can be compared (format in docs/file-formats.md; tools/compare_logits.py).
// With --mc TASK.jsonl (one or more) it scores zero-shot multiple-choice tasks with lm-eval's protocol
// (eval/multiple_choice.hpp; tools/make_mc_tasks.py builds two from the corpora). A packed folder
// (experiments/quantize --save) is read with its weights dequantised, and so is a GGUF file (experiments/export,
// or one written elsewhere for llama.cpp's gpt2, llama, deci or qwen2), with the tokenizer it carries.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/fs.hpp"
#include "lwcl/eval/multiple_choice.hpp"
#include "lwcl/eval/perplexity.hpp"
#include "lwcl/model/checkpoint/gguf_model.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/model/tokenizer/folder.hpp"
#include "lwcl/quant/checkpoint.hpp"
#include "lwcl/report/format.hpp"

#include "host_instances.hpp"
#include "lwcl/core/program.hpp"
#include "studies/validators.hpp"

using namespace lwcl;

namespace {

// Logits dump: a 32-byte header, then the T input token ids (int32), then T x V float32 logits, row
// major, all little-endian. Header: magic "LWCLLGT1", uint32 version 1, uint32 dtype 0 (float32),
// int64 T, int64 V.
void dump_logits(const std::string& path, const std::vector<std::int32_t>& ids, const float* logits, index_t V) {
  const auto T = static_cast<std::int64_t>(ids.size());
  const std::int64_t v = V;
  const std::uint32_t version = 1, type = 0;
  atomic_file f(path);
  f.write("LWCLLGT1", 8);
  f.write(&version, 4);
  f.write(&type, 4);
  f.write(&T, 8);
  f.write(&v, 8);
  f.write(ids.data(), ids.size() * sizeof(std::int32_t));
  f.write(logits, static_cast<std::size_t>(T * v) * sizeof(float));
  f.commit();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lwcl eval_model: perplexity of a checkpoint on a text file, with its protocol"};
  std::string model_dir, text_path, dump, split = "-", mc_out;
  std::vector<std::string> mc;
  int seq_len = 0, stride = 0, mc_limit = 0;
  app.add_option("model", model_dir, "checkpoint folder (config.json, model.safetensors, tokenizer) or a GGUF file")->required();
  app.add_option("text", text_path, "UTF-8 text file to score (perplexity)")->check(CLI::ExistingFile);
  app.add_option("--mc", mc, "zero-shot multiple-choice task files (jsonl: context, choices, gold), scored with "
                             "lm-eval's protocol")->check(CLI::ExistingFile);
  app.add_option("--mc-limit", mc_limit, "score only the first N items of each task")->check(studies::positive);
  app.add_option("--mc-out", mc_out, "write the multiple-choice results (every choice's log-likelihood) as JSON here");
  app.add_option("--seq-len", seq_len, "tokens of context per window (default: the model's max_seq)")->check(studies::positive);
  app.add_option("--stride", stride, "targets scored per window (default: seq_len / 2)")->check(studies::positive);
  app.add_option("--split", split, "name printed in the protocol (e.g. validation)");
  app.add_option("--dump-logits", dump, "write the first sequence's logits (raw float32 with a header) to this file");
  CLI11_PARSE(app, argc, argv);

  return lwcl::guard_main([&] {
    namespace fs = std::filesystem;
    check(!text_path.empty() || !mc.empty(), "eval_model: nothing to score; give a text file, --mc TASK.jsonl, or both");
    backend::cpu be;
    std::unique_ptr<model::transformer<backend::cpu>> loaded;
    std::unique_ptr<tokenizer::byte_bpe> gguf_tok;
    if (checkpoint::is_gguf_file(model_dir)) {
      // A GGUF file (model/checkpoint/gguf_model.hpp) carries its tokenizer; quantised blocks are dequantised.
      auto [g, contents] = checkpoint::load_gguf(be, model_dir);
      check(contents.tokenizer != nullptr, "eval_model: '", model_dir, "' has ", contents.tokenizer_note,
            " (expected llama.cpp's gpt2 tokenizer model with the gpt-2 pre-tokenizer, as experiments/export writes)");
      std::map<std::string, int> types;
      for (const auto& [name, t] : contents.types) ++types[std::string(checkpoint::gguf::tensor_type_name(t))];
      std::string listed;
      for (const auto& [t, n] : types) listed += (listed.empty() ? "" : ", ") + std::to_string(n) + " " + t;
      std::printf("eval_model: GGUF file, architecture %s, tensors %s, %s on disk\n", contents.architecture.c_str(), listed.c_str(),
                  report::human_bytes(static_cast<double>(fs::file_size(model_dir))).c_str());
      loaded = std::move(g);
      gguf_tok = std::move(contents.tokenizer);
    } else {
      loaded = std::make_unique<model::transformer<backend::cpu>>(be, checkpoint::read_hf_config(model_dir), dtype::f32);
      // A packed folder (quant/checkpoint.hpp) is scored through its dequantised weights.
      const bool packed = !fs::exists(fs::path(model_dir) / "model.safetensors") && fs::exists(fs::path(model_dir) / quant::packed_file);
      if (packed) {
        const auto p = quant::load_packed_weights(*loaded, model_dir);
        std::printf("eval_model: packed checkpoint, %zu quantised linears (%s), %s on disk\n", p.names.size(),
                    p.weights.empty() ? "none" : p.weights.front().format.describe().c_str(),
                    report::human_bytes(static_cast<double>(p.file_bytes)).c_str());
      } else {
        checkpoint::load_hf_weights(*loaded, model_dir);
      }
    }
    auto& net = *loaded;
    const auto& cfg = net.config();
    const auto tok = gguf_tok ? std::move(*gguf_tok) : tokenizer::byte_bpe_of_folder(model_dir);
    if (!mc.empty()) {
      nlohmann::ordered_json out = nlohmann::ordered_json::array();
      for (const auto& path : mc) {
        const auto items = eval::read_mc_jsonl(path, mc_limit);
        const auto r = eval::multiple_choice(net, tok, items, fs::path(path).stem().string());
        std::printf("%s: acc %.4f +- %.4f, acc_norm %.4f +- %.4f  (%s)\n", r.task.c_str(), r.acc, r.acc_stderr, r.acc_norm,
                    r.acc_norm_stderr, r.protocol().c_str());
        nlohmann::ordered_json j = {{"task", r.task},         {"file", path},
                                    {"n", r.n},               {"acc", r.acc},
                                    {"acc_stderr", r.acc_stderr}, {"acc_norm", r.acc_norm},
                                    {"acc_norm_stderr", r.acc_norm_stderr}, {"protocol", r.protocol()}};
        nlohmann::ordered_json lls = nlohmann::ordered_json::array();
        for (const auto& s : r.items) lls.push_back(s.loglikelihoods);
        j["loglikelihoods"] = lls;
        out.push_back(j);
      }
      if (!mc_out.empty()) write_text_atomic(mc_out, out.dump(1) + "\n");
      if (text_path.empty()) return 0;
    }
    const auto ids = tok.encode(read_text(text_path));
    check(ids.size() >= 2, "eval_model: '", text_path, "' gives ", ids.size(), " tokens, need at least 2");
    for (auto id : ids)
      check(id >= 0 && id < cfg.vocab, "eval_model: the tokenizer produced id ", id, " outside the model's vocabulary of ",
            cfg.vocab);
    const index_t L = seq_len ? seq_len : cfg.max_seq;
    const index_t S = stride ? stride : std::max<index_t>(1, L / 2);
    std::printf("eval_model: %s, %lld layers, %lld parameters; %s: %zu bytes -> %zu tokens\n",
                std::string(model::family_name(cfg.fam)).c_str(), static_cast<long long>(cfg.n_layers()),
                static_cast<long long>(net.num_parameters()), text_path.c_str(), static_cast<std::size_t>(fs::file_size(text_path)),
                ids.size());
    const auto r = eval::perplexity(net, ids, L, S, split);
    std::printf("perplexity %.4f  (mean nll %.5f nats/token; %s)\n", r.perplexity(), r.mean_nll(), r.protocol().c_str());

    if (!dump.empty()) {
      const index_t T = std::min<index_t>(L, static_cast<index_t>(ids.size()));
      const std::vector<std::int32_t> first(ids.begin(), ids.begin() + T);
      const tensor logits = net.forward_logits(tensor(first.data(), {1, T}));
      dump_logits(dump, first, static_cast<const float*>(logits.data), cfg.vocab);
      std::printf("eval_model: wrote logits of the first %lld tokens (%lld x %lld float32) to %s\n", static_cast<long long>(T),
                  static_cast<long long>(T), static_cast<long long>(cfg.vocab), dump.c_str());
    }
    return 0;
  });
}
