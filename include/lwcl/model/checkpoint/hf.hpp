#pragma once
// Loading and saving Hugging Face checkpoints: decoders (gpt2, llama, qwen2) into a transformer, BERT
// into an encoder. config.json becomes a model_config; model.safetensors (or a sharded
// model.safetensors.index.json) fills the parameter buffer. Names are mapped to lwcl's layout; GPT-2's
// Conv1D weights are stored (in, out) and its q/k/v are fused in c_attn, so those are transposed and
// sliced. A config may carry lwcl's per-layer widths ("lwcl_layers", see docs/file-formats.md).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/core/fs.hpp"
#include "lwcl/model/checkpoint/hf_module_source.hpp"
#include "lwcl/model/checkpoint/safetensors.hpp"
#include "lwcl/model/checkpoint/save_options.hpp"
#include "lwcl/model/config.hpp"
#include "lwcl/model/encoder.hpp"
#include "lwcl/model/transformer.hpp"

namespace lwcl::checkpoint {

// Copies the tokenizer files of folder `from` (vocab.json + merges.txt, tokenizer.json, vocab.txt and
// the Hugging Face tokenizer settings) into `to`, each to a temporary name and renamed, so that
// AutoTokenizer loads the checkpoint folder and gives lwcl's ids. A byte-level BPE without settings
// (lwcl's prepare_data writes none) gets a tokenizer_config.json naming GPT2Tokenizer with no special
// tokens, as lwcl's tokenizer has none. Returns the files written.
inline std::vector<std::string> copy_tokenizer(const std::filesystem::path& from, const std::filesystem::path& to,
                                               index_t max_seq) {
  namespace fs = std::filesystem;
  std::vector<std::string> written;
  for (const char* f : {"vocab.json", "merges.txt", "tokenizer.json", "vocab.txt", "tokenizer_config.json",
                        "special_tokens_map.json", "added_tokens.json"}) {
    if (!fs::exists(from / f)) continue;
    if (fs::exists(to / f) && fs::equivalent(from / f, to / f)) continue;
    write_file_atomic(to / f, read_text(from / f));
    written.push_back(f);
  }
  if (fs::exists(from / "vocab.json") && fs::exists(from / "merges.txt") && !fs::exists(from / "tokenizer_config.json")) {
    const nlohmann::ordered_json t = {{"tokenizer_class", "GPT2Tokenizer"}, {"add_prefix_space", false},
                                      {"add_bos_token", false},            {"bos_token", nullptr},
                                      {"eos_token", nullptr},              {"unk_token", nullptr},
                                      {"pad_token", nullptr},              {"model_max_length", max_seq},
                                      {"clean_up_tokenization_spaces", false}};
    write_text_atomic(to / "tokenizer_config.json", t.dump(2) + "\n");
    written.push_back("tokenizer_config.json");
  }
  return written;
}

namespace hf_detail {

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  check(in.good(), "checkpoint: cannot open '", path, "'");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint: '", path, "' is malformed JSON: ", e.what());
  }
}

// The JSON type a field of type T must have, for the error that names it.
template <class T>
constexpr const char* json_kind() {
  if constexpr (std::is_same_v<T, bool>) return "a boolean";
  else if constexpr (std::is_integral_v<T>) return "an integer";
  else if constexpr (std::is_floating_point_v<T>) return "a number";
  else return "a string";
}

template <class T>
T get(const nlohmann::json& j, const char* key, const std::string& path) {
  check(j.is_object(), "checkpoint: '", path, "' is not a JSON object");
  check(j.contains(key) && !j[key].is_null(), "checkpoint: '", path, "' has no '", key, "'");
  const auto& v = j[key];
  bool ok = false;
  if constexpr (std::is_same_v<T, bool>) ok = v.is_boolean();
  else if constexpr (std::is_integral_v<T>) ok = v.is_number_integer();
  else if constexpr (std::is_floating_point_v<T>) ok = v.is_number();
  else ok = v.is_string();
  check(ok, "checkpoint: '", path, "': '", key, "' is ", v.dump().substr(0, 40), ", expected ", json_kind<T>());
  return v.get<T>();
}

// A field that may be absent (or null): `fallback` then, else the field, of the right type.
template <class T>
T get_or(const nlohmann::json& j, const char* key, T fallback, const std::string& path) {
  check(j.is_object(), "checkpoint: '", path, "' is not a JSON object");
  return j.contains(key) && !j[key].is_null() ? get<T>(j, key, path) : fallback;
}

// Where one lwcl tensor comes from: an HF tensor, optionally transposed (Conv1D), and for fused
// GPT-2 q/k/v the slice of its output features [first, first + count).
struct source {
  std::string name;
  bool transpose = false;
  index_t first = 0;
  index_t count = -1;  // -1: all
};

// BERT (BertModel's names; a task model's "bert." prefix is resolved by the loader). lwcl's post-norm
// block calls the norm after attention norm1 and the one after the MLP norm2.
inline source map_bert_name(const std::string& lwcl_name) {
  static const std::map<std::string, std::string> global = {
      {"wte", "embeddings.word_embeddings.weight"},
      {"wpe", "embeddings.position_embeddings.weight"},
      {"wtt", "embeddings.token_type_embeddings.weight"},
      {"norm_emb.weight", "embeddings.LayerNorm.weight"},
      {"norm_emb.bias", "embeddings.LayerNorm.bias"}};
  static const std::map<std::string, std::string> layer = {
      {"attn.q.weight", "attention.self.query.weight"},   {"attn.q.bias", "attention.self.query.bias"},
      {"attn.k.weight", "attention.self.key.weight"},     {"attn.k.bias", "attention.self.key.bias"},
      {"attn.v.weight", "attention.self.value.weight"},   {"attn.v.bias", "attention.self.value.bias"},
      {"attn.o.weight", "attention.output.dense.weight"}, {"attn.o.bias", "attention.output.dense.bias"},
      {"norm1.weight", "attention.output.LayerNorm.weight"}, {"norm1.bias", "attention.output.LayerNorm.bias"},
      {"mlp.fc.weight", "intermediate.dense.weight"},     {"mlp.fc.bias", "intermediate.dense.bias"},
      {"mlp.proj.weight", "output.dense.weight"},         {"mlp.proj.bias", "output.dense.bias"},
      {"norm2.weight", "output.LayerNorm.weight"},        {"norm2.bias", "output.LayerNorm.bias"}};
  if (auto it = global.find(lwcl_name); it != global.end()) return {it->second};
  if (lwcl_name.rfind("layers.", 0) == 0) {
    const auto dot = lwcl_name.find('.', 7);
    if (auto it = layer.find(lwcl_name.substr(dot + 1)); it != layer.end())
      return {"encoder.layer." + lwcl_name.substr(7, dot - 7) + "." + it->second};
  }
  fail("checkpoint: no Hugging Face name for lwcl tensor '", lwcl_name, "' of family bert");
}

inline source map_name(model::family fam, const std::string& lwcl_name, const model::block_shape* sh) {
  if (fam == model::family::bert) return map_bert_name(lwcl_name);
  const bool gpt2 = fam == model::family::gpt2;
  if (lwcl_name == "wte") return {gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight"};
  if (lwcl_name == "wpe") return {"transformer.wpe.weight"};
  if (lwcl_name == "norm_f.weight") return {gpt2 ? "transformer.ln_f.weight" : "model.norm.weight"};
  if (lwcl_name == "norm_f.bias") return {"transformer.ln_f.bias"};
  if (lwcl_name == "lm_head.weight") return {"lm_head.weight"};
  // layers.<i>.<param>
  const auto dot = lwcl_name.find('.', 7);
  const std::string layer = lwcl_name.substr(7, dot - 7), p = lwcl_name.substr(dot + 1);
  if (gpt2) {
    const std::string h = "transformer.h." + layer + ".";
    const index_t qw = sh->H * sh->D, kw = sh->KVH * sh->D;
    if (p == "norm1.weight") return {h + "ln_1.weight"};
    if (p == "norm1.bias") return {h + "ln_1.bias"};
    if (p == "norm2.weight") return {h + "ln_2.weight"};
    if (p == "norm2.bias") return {h + "ln_2.bias"};
    if (p == "attn.q.weight") return {h + "attn.c_attn.weight", true, 0, qw};
    if (p == "attn.k.weight") return {h + "attn.c_attn.weight", true, qw, kw};
    if (p == "attn.v.weight") return {h + "attn.c_attn.weight", true, qw + kw, kw};
    if (p == "attn.q.bias") return {h + "attn.c_attn.bias", false, 0, qw};
    if (p == "attn.k.bias") return {h + "attn.c_attn.bias", false, qw, kw};
    if (p == "attn.v.bias") return {h + "attn.c_attn.bias", false, qw + kw, kw};
    if (p == "attn.o.weight") return {h + "attn.c_proj.weight", true};
    if (p == "attn.o.bias") return {h + "attn.c_proj.bias"};
    if (p == "mlp.fc.weight") return {h + "mlp.c_fc.weight", true};
    if (p == "mlp.fc.bias") return {h + "mlp.c_fc.bias"};
    if (p == "mlp.proj.weight") return {h + "mlp.c_proj.weight", true};
    if (p == "mlp.proj.bias") return {h + "mlp.c_proj.bias"};
  } else {
    const std::string h = "model.layers." + layer + ".";
    static const std::map<std::string, std::string> names = {
        {"norm1.weight", "input_layernorm.weight"},     {"norm2.weight", "post_attention_layernorm.weight"},
        {"attn.q.weight", "self_attn.q_proj.weight"},  {"attn.q.bias", "self_attn.q_proj.bias"},
        {"attn.k.weight", "self_attn.k_proj.weight"},  {"attn.k.bias", "self_attn.k_proj.bias"},
        {"attn.v.weight", "self_attn.v_proj.weight"},  {"attn.v.bias", "self_attn.v_proj.bias"},
        {"attn.o.weight", "self_attn.o_proj.weight"},  {"mlp.gate.weight", "mlp.gate_proj.weight"},
        {"mlp.up.weight", "mlp.up_proj.weight"},        {"mlp.down.weight", "mlp.down_proj.weight"},
        {"attn.o.bias", "self_attn.o_proj.bias"},      {"mlp.down.bias", "mlp.down_proj.bias"}};
    auto it = names.find(p);
    if (it != names.end()) return {h + it->second};
  }
  fail("checkpoint: no Hugging Face name for lwcl tensor '", lwcl_name, "' of family ", model::family_name(fam));
}

// The source of lwcl tensor `name` in a model of config `cfg` (layer tensors need their layer's widths).
inline source source_for(const model::model_config& cfg, const std::string& name) {
  if (name.rfind("layers.", 0) != 0) return map_name(cfg.fam, name, nullptr);
  const model::block_shape sh = model::shape_of_layer(cfg, std::stoll(name.substr(7, name.find('.', 7) - 7)));
  return map_name(cfg.fam, name, &sh);
}

// The safetensors file(s) of a checkpoint folder, by tensor name.
class tensor_source {
 public:
  explicit tensor_source(const std::string& dir) {
    namespace fs = std::filesystem;
    const auto single = fs::path(dir) / "model.safetensors";
    const auto index = fs::path(dir) / "model.safetensors.index.json";
    if (fs::exists(single)) {
      files_.push_back(std::make_unique<safetensors_file>(single.string()));
      for (const auto& e : files_.back()->entries()) where_[e.name] = 0;
    } else if (fs::exists(index)) {
      const auto j = read_json(index.string());
      check(j.contains("weight_map") && j["weight_map"].is_object(), "checkpoint: '", index.string(), "' has no weight_map");
      std::map<std::string, std::size_t> opened;
      for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
        check(it.value().is_string(), "checkpoint: '", index.string(), "': weight_map entry '", it.key(),
              "' is not a file name");
        const auto file = it.value().get<std::string>();
        check(file.find('/') == std::string::npos, "checkpoint: '", index.string(), "' names shard '", file,
              "' outside its folder");
        auto o = opened.find(file);
        if (o == opened.end()) {
          files_.push_back(std::make_unique<safetensors_file>((fs::path(dir) / file).string()));
          o = opened.emplace(file, files_.size() - 1).first;
        }
        check(files_[o->second]->contains(it.key()), "checkpoint: '", index.string(), "' maps '", it.key(), "' to '", file,
              "', which does not hold it");
        where_[it.key()] = o->second;
      }
    } else {
      fail("checkpoint: '", dir, "' has neither model.safetensors nor model.safetensors.index.json");
    }
  }
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  const safetensors_file& file_of(const std::string& name) const {
    auto it = where_.find(name);
    check(it != where_.end(), "checkpoint: tensor '", name, "' is missing");
    return *files_[it->second];
  }

 private:
  std::vector<std::unique_ptr<safetensors_file>> files_;
  std::map<std::string, std::size_t> where_;
};

// The prefix a checkpoint puts before the names map_name gives: BERT task models (BertForMaskedLM,
// BertForSequenceClassification, ...) nest BertModel's tensors under "bert.".
inline std::string name_prefix(model::family fam, const tensor_source& src) {
  if (fam == model::family::bert && !src.contains("embeddings.word_embeddings.weight") &&
      src.contains("bert.embeddings.word_embeddings.weight"))
    return "bert.";
  return "";
}

// Fills the parameters of net (a transformer or an encoder) from the checkpoint folder `dir`.
template <class Net>
void load_weights(Net& net, const std::string& dir) {
  const auto& cfg = net.config();
  const auto& layout = net.layout();
  tensor_source src(dir);
  const std::string prefix = name_prefix(cfg.fam, src);
  // Converted once, straight into the model's dtype: F16, BF16 and F32 widen exactly; F64 into an f32
  // model rounds once.
  ops::dispatch_float("load_hf_weights", net.type(), [&](auto z) {
    using T = decltype(z);
    std::vector<T> staging(static_cast<std::size_t>(layout.numel()), T(0));
    std::vector<T> tmp;
    std::string tmp_name;  // the Hugging Face tensor in tmp: GPT-2's fused c_attn feeds q, k and v in turn
    for (const auto& e : layout.entries()) {
      auto s = source_for(cfg, e.name);
      s.name = prefix + s.name;
      const auto& file = src.file_of(s.name);
      const auto& info = file.entry(s.name);
      if (s.name != tmp_name) {
        tmp.resize(static_cast<std::size_t>(info.dims.numel()));
        file.template read<T>(s.name, info.dims, tmp.data());
        tmp_name = s.name;
      }
      T* out = staging.data() + e.offset;
      const index_t n = e.shape.numel();
      if (e.shape.rank() == 1) {
        const index_t first = s.first, count = s.count < 0 ? info.dims.numel() : s.count;
        check(info.dims.rank() == 1 && count == n && first + count <= info.dims[0], "checkpoint: '", s.name, "' has shape ",
              info.dims.str(), ", which does not hold lwcl's '", e.name, "' ", e.shape.str());
        for (index_t i = 0; i < n; ++i) out[i] = tmp[static_cast<std::size_t>(first + i)];
      } else if (!s.transpose) {
        check(info.dims == e.shape, "checkpoint: '", s.name, "' has shape ", info.dims.str(), ", expected ", e.shape.str(),
              " for lwcl's '", e.name, "'");
        for (index_t i = 0; i < n; ++i) out[i] = tmp[static_cast<std::size_t>(i)];
      } else {
        // Conv1D (in, out): lwcl's (out_slice, in) is rows [first, first + rows) of the transpose.
        const index_t rows = e.shape[0], cols = e.shape[1];
        check(info.dims.rank() == 2 && info.dims[0] == cols && s.first + rows <= info.dims[1], "checkpoint: '", s.name,
              "' has shape ", info.dims.str(), ", which does not hold lwcl's '", e.name, "' ", e.shape.str(), " transposed");
        const index_t width = info.dims[1];
        constexpr index_t tile = 32;  // tiles keep both the strided reads and the writes in cache
        for (index_t r0 = 0; r0 < rows; r0 += tile)
          for (index_t c0 = 0; c0 < cols; c0 += tile)
            for (index_t r = r0; r < std::min(rows, r0 + tile); ++r)
              for (index_t c = c0; c < std::min(cols, c0 + tile); ++c)
                out[r * cols + c] = tmp[static_cast<std::size_t>(c * width + s.first + r)];
      }
    }
    net.backend().from_host(net.params().data, staging.data(), staging.size() * sizeof(T));
  });
}

// IEEE binary16 bits of f, rounded to nearest even (overflow to infinity; NaN stays NaN, quiet).
inline std::uint16_t f16_bits(float f) { return f16_from_float(f); }

// Converts `n` elements of type `from` at src into type `to` at dst (f32, f64, bf16 or f16; widening is
// exact, narrowing rounds to nearest even).
inline void convert_elements(const char* src, dtype from, char* dst, dtype to, std::size_t n) {
  auto read = [&](std::size_t i) -> double {
    switch (from) {
      case dtype::f32: { float v; std::memcpy(&v, src + 4 * i, 4); return v; }
      case dtype::f64: { double v; std::memcpy(&v, src + 8 * i, 8); return v; }
      case dtype::bf16: { std::uint16_t b; std::memcpy(&b, src + 2 * i, 2); return bf16::from_bits(b).to_float(); }
      case dtype::f16: { std::uint16_t b; std::memcpy(&b, src + 2 * i, 2); return f16_to_float(b); }
      default: fail("save_hf: cannot convert from ", dtype_name(from));
    }
  };
  for (std::size_t i = 0; i < n; ++i) {
    const double v = read(i);
    switch (to) {
      case dtype::f32: { const auto f = static_cast<float>(v); std::memcpy(dst + 4 * i, &f, 4); break; }
      case dtype::f64: std::memcpy(dst + 8 * i, &v, 8); break;
      case dtype::bf16: { const auto b = bf16(static_cast<float>(v)).bits; std::memcpy(dst + 2 * i, &b, 2); break; }
      case dtype::f16: { const auto b = f16_bits(static_cast<float>(v)); std::memcpy(dst + 2 * i, &b, 2); break; }
      default: fail("save_hf: cannot write ", dtype_name(to), " weights (expected f32, bf16 or f16)");
    }
  }
}

// Why the family's own transformers class cannot hold `cfg`'s shapes (then the folder carries lwcl's
// module, model_type "lwcl"); empty when it can (a plain config). Llama reads head_dim (transformers
// 4.45 on); gpt2, qwen2 and BERT derive the head width from the hidden size.
inline std::string lwcl_form_reason(const model::model_config& cfg) {
  const auto& L0 = cfg.layers.front();
  for (std::size_t l = 1; l < cfg.layers.size(); ++l) {
    const auto& L = cfg.layers[l];
    if (L.n_heads != L0.n_heads || L.n_kv_heads != L0.n_kv_heads || L.ffn != L0.ffn)
      return "per-layer widths: layer " + std::to_string(l) + " has " + std::to_string(L.n_heads) + " heads, " +
             std::to_string(L.n_kv_heads) + " KV heads and FFN " + std::to_string(L.ffn) + ", layer 0 " +
             std::to_string(L0.n_heads) + ", " + std::to_string(L0.n_kv_heads) + " and " + std::to_string(L0.ffn);
  }
  if (cfg.output_bias) return "biases on the attention and MLP output projections (bias compensation)";
  if (cfg.fam != model::family::llama && L0.n_heads * cfg.head_dim != cfg.d_model)
    return std::string(model::family_name(cfg.fam)) + " derives the head width from the hidden size, and " +
           std::to_string(L0.n_heads) + " heads of " + std::to_string(cfg.head_dim) + " are not " +
           std::to_string(cfg.d_model);
  return "";
}

// config.json (with the module file when the plain form cannot hold the net) and the tokenizer, for
// weights of dtype out_type.
template <class Net>
void write_config(const Net& net, nlohmann::ordered_json j, const std::string& dir, dtype out_type, const hf_save_options& o) {
  namespace fs = std::filesystem;
  const auto& cfg = net.config();
  fs::create_directories(dir);
  const std::string reason = lwcl_form_reason(cfg);
  const auto module_path = fs::path(dir) / std::string(hf_module_file);
  if (!reason.empty()) {
    const bool encoder = cfg.fam == model::family::bert;
    j["architectures"] = nlohmann::ordered_json::array({encoder ? "LwclModel" : "LwclForCausalLM"});
    j["model_type"] = "lwcl";
    j["lwcl_family"] = std::string(model::family_name(cfg.fam));
    j["lwcl_form"] = reason;
    j["auto_map"] = {{"AutoConfig", "lwcl_modeling.LwclConfig"},
                     {encoder ? "AutoModel" : "AutoModelForCausalLM",
                      encoder ? "lwcl_modeling.LwclModel" : "lwcl_modeling.LwclForCausalLM"}};
    write_text_atomic(module_path, std::string(hf_module_source));
  } else {
    std::error_code ec;
    fs::remove(module_path, ec);  // a folder written again in the plain form keeps no stale module
  }
  j["head_dim"] = cfg.head_dim;
  j["torch_dtype"] = out_type == dtype::f64 ? "float64" : out_type == dtype::bf16 ? "bfloat16" : out_type == dtype::f16 ? "float16" : "float32";
  nlohmann::ordered_json layers = nlohmann::ordered_json::array();
  for (const auto& l : cfg.layers) layers.push_back({{"n_heads", l.n_heads}, {"n_kv_heads", l.n_kv_heads}, {"ffn", l.ffn}});
  j["lwcl_layers"] = layers;
  if (cfg.output_bias) j["lwcl_output_bias"] = true;
  const auto cfg_path = (fs::path(dir) / "config.json").string();
  write_text_atomic(cfg_path, j.dump(2) + "\n");
  if (!o.tokenizer_from.empty()) copy_tokenizer(o.tokenizer_from, dir, cfg.max_seq);
}

// Writes net (a transformer or an encoder) as a checkpoint folder: config.json is `j` (the family's
// fields) plus head_dim and lwcl_layers, so that uneven pruned layers reload; model.safetensors holds
// the weights in the net's dtype. Each file goes to a temporary name and is renamed.
template <class Net>
void write_folder(const Net& net, nlohmann::ordered_json j, const std::string& dir, const hf_save_options& o) {
  namespace fs = std::filesystem;
  const auto& cfg = net.config();
  const auto& layout = net.layout();
  const dtype out_type = o.weights.value_or(net.type());
  check(out_type == dtype::f32 || out_type == dtype::bf16 || out_type == dtype::f16 ||
            (out_type == dtype::f64 && net.type() == dtype::f64),
        "save_hf: weights in ", dtype_name(out_type), " are not written (expected f32, bf16 or f16, or f64 for an f64 model)");
  fs::create_directories(dir);

  // Gather lwcl's tensors into the Hugging Face tensors (fused and transposed where the format wants).
  struct hf_tensor {
    lwcl::shape dims;
    std::vector<char> bytes;
  };
  const std::size_t esize = dtype_size(net.type());
  std::vector<char> params(static_cast<std::size_t>(layout.numel()) * esize);
  net.backend().to_host(params.data(), net.params().data, params.size());
  std::map<std::string, hf_tensor> out;
  for (const auto& e : layout.entries()) {  // first pass: the Hugging Face shapes
    const auto s = source_for(cfg, e.name);
    auto& t = out[s.name];
    if (e.shape.rank() == 1 && s.count >= 0)
      t.dims = shape{std::max(t.dims.rank() ? t.dims[0] : 0, s.first + s.count)};
    else if (s.transpose)
      t.dims = shape{e.shape[1], std::max(t.dims.rank() ? t.dims[1] : 0, s.first + e.shape[0])};
    else
      t.dims = e.shape;
  }
  for (auto& [name, t] : out) t.bytes.assign(static_cast<std::size_t>(t.dims.numel()) * esize, 0);
  for (const auto& e : layout.entries()) {  // second pass: the values
    const auto s = source_for(cfg, e.name);
    auto& t = out[s.name];
    const char* src = params.data() + static_cast<std::size_t>(e.offset) * esize;
    if (s.transpose) {
      const index_t rows = e.shape[0], cols = e.shape[1], width = t.dims[1];
      for (index_t r = 0; r < rows; ++r)
        for (index_t c = 0; c < cols; ++c)
          std::memcpy(t.bytes.data() + static_cast<std::size_t>(c * width + s.first + r) * esize,
                      src + static_cast<std::size_t>(r * cols + c) * esize, esize);
    } else {
      std::memcpy(t.bytes.data() + static_cast<std::size_t>(s.first) * esize, src, static_cast<std::size_t>(e.shape.numel()) * esize);
    }
  }
  if (out_type != net.type())
    for (auto& [name, t] : out) {
      std::vector<char> converted(static_cast<std::size_t>(t.dims.numel()) * dtype_size(out_type));
      convert_elements(t.bytes.data(), net.type(), converted.data(), out_type, static_cast<std::size_t>(t.dims.numel()));
      t.bytes = std::move(converted);
    }
  std::vector<safetensors_item> items;
  for (const auto& [name, t] : out) items.push_back({name, out_type, t.dims, t.bytes.data()});
  write_safetensors((fs::path(dir) / "model.safetensors").string(), items, {{"format", "pt"}});
  write_config(net, std::move(j), dir, out_type, o);
}

}  // namespace hf_detail

// Reads <dir>/config.json of a gpt2, llama, qwen2 or bert checkpoint (for bert, read_hf_encoder_config
// also gives the token-type count).
inline model::model_config read_hf_config(const std::string& dir) {
  using hf_detail::get;
  using hf_detail::get_or;
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  const auto j = hf_detail::read_json(path);
  auto type = get<std::string>(j, "model_type", path);
  if (type == "lwcl") {  // lwcl's own form (per-layer shapes the family's class cannot express)
    type = get<std::string>(j, "lwcl_family", path);
    check(type == "gpt2" || type == "llama" || type == "qwen2" || type == "bert", "checkpoint: '", path,
          "': lwcl_family '", type, "' is not one of gpt2, llama, qwen2, bert");
  }
  model::model_config c;
  index_t heads = 0, kv = 0, ffn = 0, layers = 0;
  if (type == "gpt2") {
    c.fam = model::family::gpt2;
    c.vocab = get<index_t>(j, "vocab_size", path);
    c.max_seq = get<index_t>(j, "n_positions", path);
    c.d_model = get<index_t>(j, "n_embd", path);
    layers = get<index_t>(j, "n_layer", path);
    heads = kv = get<index_t>(j, "n_head", path);
    ffn = get_or<index_t>(j, "n_inner", 4 * c.d_model, path);
    c.norm_eps = get_or<double>(j, "layer_norm_epsilon", 1e-5, path);
    const auto act = get_or<std::string>(j, "activation_function", std::string("gelu_new"), path);
    check(act == "gelu_new" || act == "gelu_pytorch_tanh", "checkpoint: '", path, "': activation_function '", act,
          "' is not supported (expected gelu_new, GPT-2's tanh approximation)");
    c.tie_embeddings = true;
  } else if (type == "llama" || type == "qwen2") {
    c.fam = type == "llama" ? model::family::llama : model::family::qwen2;
    c.vocab = get<index_t>(j, "vocab_size", path);
    c.max_seq = get<index_t>(j, "max_position_embeddings", path);
    c.d_model = get<index_t>(j, "hidden_size", path);
    layers = get<index_t>(j, "num_hidden_layers", path);
    heads = get<index_t>(j, "num_attention_heads", path);
    kv = get_or<index_t>(j, "num_key_value_heads", heads, path);
    ffn = get<index_t>(j, "intermediate_size", path);
    c.norm_eps = get_or<double>(j, "rms_norm_eps", 1e-6, path);
    c.rope_theta = get_or<double>(j, "rope_theta", 10000.0, path);
    c.tie_embeddings = get_or<bool>(j, "tie_word_embeddings", false, path);
    const auto act = get_or<std::string>(j, "hidden_act", std::string("silu"), path);
    check(act == "silu", "checkpoint: '", path, "': hidden_act '", act, "' is not supported (expected silu)");
    check(!j.contains("rope_scaling") || j["rope_scaling"].is_null(), "checkpoint: '", path,
          "': rope_scaling is not supported");
    check(!get_or<bool>(j, "use_sliding_window", false, path), "checkpoint: '", path, "': sliding-window attention is not supported");
  } else if (type == "bert") {
    c.fam = model::family::bert;
    c.vocab = get<index_t>(j, "vocab_size", path);
    c.max_seq = get<index_t>(j, "max_position_embeddings", path);
    c.d_model = get<index_t>(j, "hidden_size", path);
    layers = get<index_t>(j, "num_hidden_layers", path);
    heads = kv = get<index_t>(j, "num_attention_heads", path);
    ffn = get<index_t>(j, "intermediate_size", path);
    c.norm_eps = get_or<double>(j, "layer_norm_eps", 1e-12, path);
    c.tie_embeddings = false;
    // transformers' "gelu" is the exact erf GELU; its tanh and sigmoid approximations have other names.
    const auto act = get_or<std::string>(j, "hidden_act", std::string("gelu"), path);
    check(act == "gelu", "checkpoint: '", path, "': hidden_act '", act,
          "' is not supported (expected gelu, BERT's exact erf GELU)");
    const auto pos = get_or<std::string>(j, "position_embedding_type", std::string("absolute"), path);
    check(pos == "absolute", "checkpoint: '", path, "': position_embedding_type '", pos,
          "' is not supported (expected absolute, learned positions)");
    check(!get_or<bool>(j, "is_decoder", false, path), "checkpoint: '", path, "': a bert decoder (is_decoder) is not supported");
    check(get_or<index_t>(j, "type_vocab_size", index_t{2}, path) > 0, "checkpoint: '", path, "': type_vocab_size must be positive");
  } else {
    fail("checkpoint: '", path, "': model_type '", type, "' is not supported here (expected gpt2, llama, qwen2 or bert)");
  }
  check(heads > 0, "checkpoint: '", path, "': the head count must be positive, not ", heads);
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    c.head_dim = get<index_t>(j, "head_dim", path);
    check(c.head_dim > 0, "checkpoint: '", path, "': head_dim must be positive, not ", c.head_dim);
  } else {
    check(c.d_model % heads == 0, "checkpoint: '", path, "': width ", c.d_model, " is not a multiple of ", heads,
          " heads (and no head_dim is given)");
    c.head_dim = c.d_model / heads;
  }
  check(layers >= 1 && layers <= model::model_config::max_layers, "checkpoint: '", path, "': ", layers,
        " layers, expected 1 to ", model::model_config::max_layers);
  c.layers.assign(static_cast<std::size_t>(layers), model::layer_config{heads, kv, ffn});
  if (j.contains("lwcl_layers")) {
    const auto& L = j["lwcl_layers"];
    check(L.is_array() && static_cast<index_t>(L.size()) == layers, "checkpoint: '", path, "': lwcl_layers must list ",
          layers, " layers");
    for (std::size_t i = 0; i < L.size(); ++i)
      c.layers[i] = model::layer_config{get<index_t>(L[i], "n_heads", path), get<index_t>(L[i], "n_kv_heads", path),
                                        get<index_t>(L[i], "ffn", path)};
  }
  c.output_bias = get_or<bool>(j, "lwcl_output_bias", false, path);
  c.validate();
  return c;
}

// Reads <dir>/config.json of a bert checkpoint: the model_config of read_hf_config and type_vocab_size
// (2 when absent, transformers' default).
inline model::encoder_config read_hf_encoder_config(const std::string& dir) {
  model::encoder_config e;
  e.model = read_hf_config(dir);
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  check(e.model.fam == model::family::bert, "checkpoint: '", path, "' holds a ", model::family_name(e.model.fam),
        " model, expected an encoder (model_type bert)");
  e.type_vocab = hf_detail::get_or<index_t>(hf_detail::read_json(path), "type_vocab_size", index_t{2}, path);
  e.validate();
  return e;
}

// Fills net's parameters from the checkpoint folder `dir` (shapes must match net's config).
template <class Backend>
void load_hf_weights(model::transformer<Backend>& net, const std::string& dir) {
  hf_detail::load_weights(net, dir);
}

// A transformer on `be` in `type` read from the checkpoint folder `dir`: its config.json, then its weights.
template <class Backend>
std::unique_ptr<model::transformer<Backend>> load_hf(Backend& be, const std::string& dir, dtype type = dtype::f32) {
  auto net = std::make_unique<model::transformer<Backend>>(be, read_hf_config(dir), type);
  load_hf_weights(*net, dir);
  return net;
}
// The same, frozen (model::frozen): for forward passes only, no gradient buffer ever allocated.
template <class Backend>
std::unique_ptr<model::transformer<Backend>> load_hf(Backend& be, const std::string& dir, dtype type, model::frozen_t) {
  auto net = std::make_unique<model::transformer<Backend>>(be, read_hf_config(dir), type, model::frozen);
  load_hf_weights(*net, dir);
  return net;
}

// Fills an encoder from a BERT checkpoint folder (BertModel names, with or without a task model's
// "bert." prefix; the pooler and any head are not read).
template <class Backend>
void load_hf_weights(model::encoder<Backend>& net, const std::string& dir) {
  hf_detail::load_weights(net, dir);
}

// Writes net as a Hugging Face checkpoint folder: config.json (the family's fields, plus head_dim and
// lwcl_layers so that uneven pruned layers reload) and model.safetensors in the net's dtype, each
// written to a temporary name and renamed. load_hf_weights reads it back bit for bit.
// The family part of a decoder's config.json (write_folder adds lwcl's fields).
template <class Backend>
nlohmann::ordered_json hf_config_of(const model::transformer<Backend>& net) {
  const auto& cfg = net.config();
  const auto& L0 = cfg.layers.front();
  nlohmann::ordered_json j;
  if (cfg.fam == model::family::gpt2) {
    check(cfg.tie_embeddings, "save_hf: a gpt2 checkpoint always ties the LM head to wte");
    // Arrays inside a braced config are built with array(): clang 14 leaks the temporaries of a
    // nested braced list there (LeakSanitizer, preset sanitize), g++ does not.
    j = {{"architectures", nlohmann::ordered_json::array({"GPT2LMHeadModel"})}, {"model_type", "gpt2"}, {"vocab_size", cfg.vocab},
         {"n_positions", cfg.max_seq}, {"n_embd", cfg.d_model}, {"n_layer", cfg.n_layers()}, {"n_head", L0.n_heads},
         {"n_inner", L0.ffn}, {"layer_norm_epsilon", cfg.norm_eps}, {"activation_function", "gelu_new"},
         {"resid_pdrop", 0.0}, {"embd_pdrop", 0.0}, {"attn_pdrop", 0.0}};
    for (const auto& l : cfg.layers)
      check(l.n_kv_heads == l.n_heads, "save_hf: gpt2 layers need as many KV heads as query heads");
  } else if (cfg.fam == model::family::llama || cfg.fam == model::family::qwen2) {
    const bool llama = cfg.fam == model::family::llama;
    j = {{"architectures", nlohmann::ordered_json::array({llama ? "LlamaForCausalLM" : "Qwen2ForCausalLM"})}, {"model_type", llama ? "llama" : "qwen2"},
         {"vocab_size", cfg.vocab}, {"max_position_embeddings", cfg.max_seq}, {"hidden_size", cfg.d_model},
         {"num_hidden_layers", cfg.n_layers()}, {"num_attention_heads", L0.n_heads}, {"num_key_value_heads", L0.n_kv_heads},
         {"intermediate_size", L0.ffn}, {"rms_norm_eps", cfg.norm_eps}, {"rope_theta", cfg.rope_theta},
         {"tie_word_embeddings", cfg.tie_embeddings}, {"hidden_act", "silu"}};
  } else {
    fail("save_hf: family ", model::family_name(cfg.fam), " is not supported (expected gpt2, llama or qwen2)");
  }
  return j;
}

template <class Backend>
void save_hf(const model::transformer<Backend>& net, const std::string& dir, const hf_save_options& o = {}) {
  hf_detail::write_folder(net, hf_config_of(net), dir, o);
}

// The config.json (and tokenizer) save_hf writes, without model.safetensors: for a folder whose
// weights are stored another way (quant/checkpoint.hpp's packed weights). o.weights names the dtype
// the config's torch_dtype reports.
template <class Backend>
void save_hf_config(const model::transformer<Backend>& net, const std::string& dir, const hf_save_options& o = {}) {
  hf_detail::write_config(net, hf_config_of(net), dir, o.weights.value_or(net.type()), o);
}

// Writes an encoder as a BertModel checkpoint folder (no pooler: lwcl does not use it), the same way.
template <class Backend>
void save_hf(const model::encoder<Backend>& net, const std::string& dir, const hf_save_options& o = {}) {
  const auto& cfg = net.config();
  const auto& L0 = cfg.layers.front();
  for (const auto& l : cfg.layers)
    check(l.n_kv_heads == l.n_heads, "save_hf: bert layers need as many KV heads as query heads");
  nlohmann::ordered_json j = {
      {"architectures", nlohmann::ordered_json::array({"BertModel"})}, {"model_type", "bert"}, {"vocab_size", cfg.vocab},
      {"max_position_embeddings", cfg.max_seq}, {"type_vocab_size", net.type_vocab()}, {"hidden_size", cfg.d_model},
      {"num_hidden_layers", cfg.n_layers()}, {"num_attention_heads", L0.n_heads}, {"intermediate_size", L0.ffn},
      {"hidden_act", "gelu"}, {"layer_norm_eps", cfg.norm_eps}, {"position_embedding_type", "absolute"},
      {"hidden_dropout_prob", 0.0}, {"attention_probs_dropout_prob", 0.0}};
  hf_detail::write_folder(net, std::move(j), dir, o);
}

}  // namespace lwcl::checkpoint
