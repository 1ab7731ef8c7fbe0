// Writes one GGUF file per shape class lwcl exports (gpt2, llama, llama.cpp's deci for per-layer widths,
// qwen2; f32, f16 and bf16 matrices; Q8_0 and Q4_0 from lwcl's own codes), each beside the same model as a
// Hugging Face folder (hf/, the dequantised weights in f32) and lwcl's own outputs for
// tests/model/gguf_interop_test.py: lwcl.json holds the token ids of a sentence, the logits lwcl computes
// from the GGUF file read back, and whether transformers' GGUF loader supports the class.
//   gguf_interop_writer <out dir>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/fs.hpp"
#include "lwcl/model/checkpoint/gguf_model.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/model/tokenizer/folder.hpp"
#include "lwcl/quant/gguf.hpp"
#include "lwcl/quant/rtn.hpp"

using namespace lwcl;
namespace fs = std::filesystem;
namespace gg = checkpoint::gguf;

namespace {

const char* sentence = "And the river ran past the mill, under the old stone bridge.";

struct shape_class {
  std::string name;
  model::model_config cfg;
  gg::tensor_type weights = gg::tensor_type::f32;
  std::string quantise{};     // "", "int8:g32" or "int4:g32": every block linear, round to nearest
  bool transformers = false;  // transformers 4.46's GGUF loader holds the class
};

model::model_config decoder(model::family f, index_t heads, index_t kv, index_t ffn, index_t max_seq = 64) {
  auto c = model::model_config::uniform(f, 400, max_seq, 64, 3, 8, f == model::family::gpt2 ? 8 : 2, ffn);
  for (auto& l : c.layers) l = {heads, kv, ffn};
  return c;
}

std::vector<shape_class> classes() {
  using model::family;
  using gg::tensor_type;
  std::vector<shape_class> v;
  // transformers' gpt2 reads n_ctx from context_length and assumes an FFN of 4 x n_embd.
  v.push_back({"gpt2_full", decoder(family::gpt2, 8, 8, 256, 1024), tensor_type::f32, "", true});
  v.push_back({"gpt2_ffn_pruned", decoder(family::gpt2, 8, 8, 96)});
  v.push_back({"gpt2_q8_0", decoder(family::gpt2, 8, 8, 256, 1024), tensor_type::f32, "int8:g32", true});
  v.push_back({"llama_full", decoder(family::llama, 8, 2, 96), tensor_type::f32, "", true});
  v.push_back({"llama_heads_pruned", decoder(family::llama, 4, 2, 64), tensor_type::f32, "", true});
  auto l = decoder(family::llama, 8, 2, 96);
  l.layers = {{8, 2, 64}, {2, 1, 96}, {4, 2, 32}};
  v.push_back({"llama_per_layer", l});
  auto lb = decoder(family::llama, 8, 2, 96);
  lb.output_bias = true;
  v.push_back({"llama_output_bias", lb});
  v.push_back({"llama_f16", decoder(family::llama, 8, 2, 96), tensor_type::f16, "", true});
  v.push_back({"llama_bf16", decoder(family::llama, 8, 2, 96), tensor_type::bf16, "", true});
  v.push_back({"llama_q8_0", decoder(family::llama, 8, 2, 96), tensor_type::f32, "int8:g32", true});
  v.push_back({"llama_q4_0", decoder(family::llama, 8, 2, 96), tensor_type::f16, "int4:g32", true});
  auto lq = l;  // every attention output 32 columns wide at least, for int4's 32-column tiles
  lq.layers = {{8, 2, 64}, {4, 1, 96}, {4, 2, 32}};
  v.push_back({"llama_per_layer_q4_0", lq, tensor_type::f32, "int4:g32"});
  v.push_back({"qwen2_full", decoder(family::qwen2, 8, 2, 96), tensor_type::f32, "", true});
  v.push_back({"qwen2_q4_0", decoder(family::qwen2, 8, 2, 96), tensor_type::f32, "int4:g32", true});
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
    std::fprintf(stderr, "usage: gguf_interop_writer <out dir>\n");
    return 2;
  }
  try {
    const fs::path out = argv[1], tok_dir = LWCL_TEST_DATA_DIR "/tokenizer/bpe";
    const auto tok = tokenizer::byte_bpe_of_folder(tok_dir);
    const auto ids = tok.encode(sentence);
    backend::cpu be;
    nlohmann::ordered_json index = nlohmann::ordered_json::array();
    std::uint32_t seed = 1;
    for (const auto& c : classes()) {
      const auto dir = out / c.name;
      fs::create_directories(dir);
      model::transformer<backend::cpu> net(be, c.cfg, dtype::f32);
      net.init(seed++);
      checkpoint::gguf_save_options o;
      o.weights = c.weights;
      o.tokenizer_from = tok_dir.string();
      if (!c.quantise.empty()) {
        // Every block linear quantised by round to nearest; the net holds the dequantised values, as quantize_model leaves it.
        std::vector<float> params(static_cast<std::size_t>(net.layout().numel()));
        net.backend().to_host(params.data(), net.params().data, params.size() * 4);
        std::vector<std::string> names;
        std::vector<quant::packed_weight> packed;
        for (const auto& e : net.layout().entries()) {
          if (e.name.rfind("layers.", 0) != 0 || e.shape.rank() != 2) continue;
          auto p = quant::quantize_rtn(params.data() + e.offset, e.shape[0], e.shape[1], quant::parse_format(c.quantise), e.name);
          const auto deq = quant::dequantize(p);
          std::memcpy(params.data() + e.offset, deq.data(), deq.size() * 4);
          names.push_back(e.name);
          packed.push_back(std::move(p));
        }
        net.backend().from_host(net.params().data, params.data(), params.size() * 4);
        o.blocks = quant::gguf_blocks_of(names, packed).blocks;
        o.quantiser = "rtn";
      }
      checkpoint::save_gguf(net, (dir / "model.gguf").string(), o);
      checkpoint::save_hf(net, (dir / "hf").string(), {.weights = dtype::f32, .tokenizer_from = tok_dir.string()});
      // lwcl's outputs from the GGUF file as lwcl reads it back.
      auto [back, contents] = checkpoint::load_gguf(be, (dir / "model.gguf").string());
      const auto T = static_cast<index_t>(ids.size());
      const tensor logits = back->forward_logits(tensor(const_cast<std::int32_t*>(ids.data()), {1, T}));
      nlohmann::ordered_json j = {{"sentence", sentence},
                                  {"ids", ids},
                                  {"logits", host_doubles(logits)},
                                  {"vocab", c.cfg.vocab},
                                  {"weights", std::string(gg::tensor_type_name(c.weights))},
                                  {"quantise", c.quantise},
                                  {"transformers", c.transformers}};
      write_text_atomic(dir / "lwcl.json", j.dump() + "\n");
      index.push_back({{"name", c.name}});
      std::printf("gguf_interop_writer: %s\n", c.name.c_str());
    }
    write_text_atomic(out / "index.json", index.dump(1) + "\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
