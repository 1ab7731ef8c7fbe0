// Writes one checkpoint folder per shape class lwcl produces, each as save_hf writes it (the plain
// family form where transformers' class holds the shapes, lwcl's module form otherwise), with the
// tokenizer of tests/data/tokenizer/bpe, and beside it lwcl's own outputs for tests/model/hf_interop_test.py
// to compare with transformers: lwcl.json holds the token ids lwcl's tokenizer gives for a sentence,
// the logits (or the encoder's last hidden state) of those ids, and greedy generate()'s tokens.
//   hf_interop_writer <out dir>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/fs.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/model/encoder.hpp"
#include "lwcl/model/generate.hpp"
#include "lwcl/model/tokenizer/folder.hpp"

using namespace lwcl;
namespace fs = std::filesystem;

namespace {

const char* sentence = "And the river ran past the mill, under the old stone bridge.";

struct shape_class {
  std::string name;
  model::model_config cfg;
  dtype weights = dtype::f32;
};

model::model_config decoder(model::family f, index_t heads, index_t kv, index_t ffn) {
  auto c = model::model_config::uniform(f, 400, 64, 48, 3, 6, f == model::family::gpt2 ? 6 : 2, 72);
  for (auto& l : c.layers) l = {heads, kv, ffn};
  return c;
}

std::vector<shape_class> classes() {
  using model::family;
  std::vector<shape_class> v;
  v.push_back({"gpt2_full", decoder(family::gpt2, 6, 6, 72)});
  v.push_back({"gpt2_ffn_pruned", decoder(family::gpt2, 6, 6, 36)});
  v.push_back({"gpt2_heads_pruned", decoder(family::gpt2, 3, 3, 72)});
  auto g = decoder(family::gpt2, 6, 6, 72);
  g.layers = {{5, 5, 40}, {2, 2, 72}, {6, 6, 20}};
  v.push_back({"gpt2_per_layer", g});
  auto gd = decoder(family::gpt2, 6, 6, 72);
  gd.layers.resize(2);
  v.push_back({"gpt2_depth_pruned", gd});
  v.push_back({"llama_uniform_heads_pruned", decoder(family::llama, 4, 2, 40)});
  auto l = decoder(family::llama, 6, 2, 72);
  l.layers = {{6, 2, 50}, {2, 1, 72}, {4, 2, 16}};
  v.push_back({"llama_per_layer", l});
  auto lb = decoder(family::llama, 6, 2, 72);
  lb.output_bias = true;
  v.push_back({"llama_output_bias", lb});
  v.push_back({"qwen2_full", decoder(family::qwen2, 6, 2, 72)});
  v.push_back({"qwen2_heads_pruned", decoder(family::qwen2, 4, 2, 72)});
  v.push_back({"llama_bf16", decoder(family::llama, 6, 2, 72), dtype::bf16});
  v.push_back({"gpt2_f16_heads_pruned", decoder(family::gpt2, 3, 3, 72), dtype::f16});
  return v;
}

std::vector<double> host_doubles(const tensor& t) {
  std::vector<float> f(static_cast<std::size_t>(t.numel()));
  std::memcpy(f.data(), t.data, f.size() * sizeof(float));
  return {f.begin(), f.end()};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: hf_interop_writer <out dir>\n");
    return 2;
  }
  try {
    const fs::path out = argv[1], tok_dir = LWCL_TEST_DATA_DIR "/tokenizer/bpe";
    const auto tok = tokenizer::byte_bpe_of_folder(tok_dir);
    const auto ids = tok.encode(sentence);
    backend::cpu be;
    nlohmann::ordered_json index = nlohmann::ordered_json::array();
    std::uint64_t seed = 1;
    for (const auto& c : classes()) {
      const auto dir = out / c.name;
      {
        model::transformer<backend::cpu> net(be, c.cfg, dtype::f32);
        net.init(seed++);
        checkpoint::save_hf(net, dir.string(), {.weights = c.weights, .tokenizer_from = tok_dir.string()});
      }
      // lwcl's outputs from what it wrote (half-precision weights included), read back by lwcl.
      auto net = checkpoint::load_hf(be, dir.string(), dtype::f32);
      const auto T = static_cast<index_t>(ids.size());
      const tensor logits = net->forward_logits(tensor(const_cast<std::int32_t*>(ids.data()), {1, T}));
      const auto g = model::generate(*net, std::vector<std::int32_t>(ids.begin(), ids.begin() + 6), 10, model::sampling{});
      nlohmann::ordered_json j = {{"sentence", sentence}, {"ids", ids},           {"logits", host_doubles(logits)},
                                  {"vocab", c.cfg.vocab}, {"generated", g.tokens}, {"weights", dtype_name(c.weights)}};
      write_text_atomic(dir / "lwcl.json", j.dump() + "\n");
      index.push_back({{"name", c.name}, {"kind", "decoder"}});
      std::printf("hf_interop_writer: %s\n", c.name.c_str());
    }
    // BERT: uniform and per-layer, from the transformers-made tiny BertModel's config.
    for (const bool per_layer : {false, true}) {
      auto ec = checkpoint::read_hf_encoder_config(LWCL_TEST_DATA_DIR "/hf/bert");
      if (per_layer) {
        ec.model.layers.front().n_heads = ec.model.layers.front().n_kv_heads = 1;
        ec.model.layers.back().ffn /= 2;
      }
      const std::string name = per_layer ? "bert_per_layer" : "bert_full";
      model::encoder<backend::cpu> net(be, ec, dtype::f32);
      net.init(seed++);
      checkpoint::save_hf(net, (out / name).string());
      std::vector<std::int32_t> bids;
      for (std::int32_t i = 0; i < 10; ++i) bids.push_back((i * 7 + 3) % static_cast<std::int32_t>(ec.model.vocab));
      const tensor h = net.forward(tensor(bids.data(), {1, 10}));  // the last hidden state (1, 10, C)
      nlohmann::ordered_json j = {{"ids", bids}, {"hidden", host_doubles(h)}};
      write_text_atomic(out / name / "lwcl.json", j.dump() + "\n");
      index.push_back({{"name", name}, {"kind", "encoder"}});
      std::printf("hf_interop_writer: %s\n", name.c_str());
    }
    write_text_atomic(out / "index.json", index.dump(1) + "\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
