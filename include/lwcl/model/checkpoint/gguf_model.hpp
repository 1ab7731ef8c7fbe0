#pragma once
// lwcl decoders (gpt2, llama, qwen2) as GGUF files llama.cpp loads, and back. save_gguf writes a
// transformer with the metadata llama.cpp reads (architecture, widths, norm epsilon, RoPE, context
// length) and its byte-level BPE tokenizer; load_gguf builds the transformer of such a file (lwcl's own
// or one written elsewhere) with every weight read back (quantised ones dequantised). Field by field in
// docs/file-formats.md. Where llama.cpp's layout differs from lwcl's:
//   - llama applies RoPE to interleaved channel pairs (2i, 2i + 1), lwcl to (i, i + D/2) as Hugging
//     Face does, so each head's rows of the q and k projections are reordered (row 2i + s of a head comes
//     from row s * D/2 + i); qwen2 in llama.cpp pairs channels as lwcl does;
//   - gpt2 holds q, k and v as one fused attn_qkv tensor (rows q, then k, then v);
//   - a llama whose layers differ in head, KV-head or FFN width is written as llama.cpp's "deci"
//     architecture, which reads those widths per layer; gpt2 and qwen2 must be even.
// A shape llama.cpp cannot express is refused before anything is written, naming the layer and field.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/model/checkpoint/gguf.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/model/tokenizer/folder.hpp"
#include "lwcl/model/transformer.hpp"

namespace lwcl::checkpoint {

// A linear weight already coded in GGUF blocks (Q8_0 or Q4_0), rows x cols as lwcl's (out x in) matrix,
// rows one after another: quant/gguf.hpp makes them from a quantised model's packed weights.
struct gguf_blocks {
  gguf::tensor_type type = gguf::tensor_type::q8_0;
  index_t rows = 0, cols = 0;
  std::vector<unsigned char> bytes;
};

struct gguf_save_options {
  // The type of every matrix not given in `blocks`: F32, F16 or BF16. Vectors (norms, biases) are F32.
  gguf::tensor_type weights = gguf::tensor_type::f32;
  std::string name;                            // general.name (the file's stem when empty)
  std::string tokenizer_from;                  // a folder holding vocab.json + merges.txt or tokenizer.json
  std::map<std::string, gguf_blocks> blocks;   // by lwcl parameter name
  std::string quantiser;                       // recorded as lwcl.quantiser when not empty
};

namespace gguf_detail {

inline bool is_quantized(gguf::tensor_type t) { return t == gguf::tensor_type::q8_0 || t == gguf::tensor_type::q4_0; }

// The GGUF architecture lwcl writes for `cfg`, or an error naming why llama.cpp cannot hold it.
inline std::string architecture_for(const model::model_config& cfg) {
  using model::family;
  check(cfg.fam != family::bert, "save_gguf: a bert encoder has no llama.cpp architecture lwcl writes (expected gpt2, llama or qwen2)");
  check(!cfg.layers.empty(), "save_gguf: the model has no layers (llama.cpp needs block_count of at least 1)");
  const auto& L0 = cfg.layers.front();
  bool even = true;
  for (std::size_t l = 0; l < cfg.layers.size(); ++l) {
    const auto& L = cfg.layers[l];
    if (L.n_heads == L0.n_heads && L.n_kv_heads == L0.n_kv_heads && L.ffn == L0.ffn) continue;
    even = false;
    if (cfg.fam != family::llama) {
      const char* field = L.n_heads != L0.n_heads ? "head_count" : L.n_kv_heads != L0.n_kv_heads ? "head_count_kv" : "feed_forward_length";
      const index_t have = L.n_heads != L0.n_heads ? L.n_heads : L.n_kv_heads != L0.n_kv_heads ? L.n_kv_heads : L.ffn;
      const index_t first = L.n_heads != L0.n_heads ? L0.n_heads : L.n_kv_heads != L0.n_kv_heads ? L0.n_kv_heads : L0.ffn;
      fail("save_gguf: layer ", l, " has ", field, " ", have, " and layer 0 ", first, ": llama.cpp's ", model::family_name(cfg.fam),
           " reads one ", field, " for every layer (per-layer widths are written for llama only, as llama.cpp's deci)");
    }
  }
  if (cfg.fam == family::gpt2) {
    for (std::size_t l = 0; l < cfg.layers.size(); ++l) {
      const auto& L = cfg.layers[l];
      check(L.n_kv_heads == L.n_heads, "save_gguf: layer ", l, " of the gpt2 has ", L.n_kv_heads, " KV heads and ", L.n_heads,
            " heads: llama.cpp's gpt2 needs head_count_kv equal to head_count");
    }
    check(L0.n_heads * cfg.head_dim == cfg.d_model, "save_gguf: layer 0 of the gpt2 has ", L0.n_heads, " heads of width ", cfg.head_dim,
          ", ", L0.n_heads * cfg.head_dim, " channels: llama.cpp's gpt2 needs head_count x head width = embedding_length ", cfg.d_model);
    return "gpt2";
  }
  if (cfg.fam == family::qwen2) {
    check(L0.n_heads * cfg.head_dim == cfg.d_model, "save_gguf: layer 0 of the qwen2 has ", L0.n_heads, " heads of width ", cfg.head_dim,
          ", ", L0.n_heads * cfg.head_dim, " channels: llama.cpp's qwen2 needs head_count x head width = embedding_length ", cfg.d_model);
    check(!cfg.output_bias, "save_gguf: the qwen2 carries biases on its attention and MLP output projections (bias compensation), "
                            "which llama.cpp's qwen2 does not read");
    return "qwen2";
  }
  return even ? "llama" : "deci";
}

// The GGUF name of lwcl tensor `name`, and for gpt2's fused q/k/v which part (0 q, 1 k, 2 v; -1 none).
struct target {
  std::string name;
  int part = -1;
};

inline target gguf_name(const model::model_config& cfg, const std::string& name) {
  const bool gpt2 = cfg.fam == model::family::gpt2;
  if (name == "wte") return {"token_embd.weight"};
  if (name == "wpe") return {"position_embd.weight"};
  if (name == "norm_f.weight") return {"output_norm.weight"};
  if (name == "norm_f.bias") return {"output_norm.bias"};
  if (name == "lm_head.weight") return {"output.weight"};
  check(name.rfind("layers.", 0) == 0, "save_gguf: no GGUF name for lwcl tensor '", name, "'");
  const auto dot = name.find('.', 7);
  const std::string blk = "blk." + name.substr(7, dot - 7) + ".";
  std::string p = name.substr(dot + 1);
  const auto pdot = p.rfind('.');
  const std::string kind = p.substr(pdot);  // ".weight" or ".bias"
  p = p.substr(0, pdot);
  if (p == "norm1") return {blk + "attn_norm" + kind};
  if (p == "norm2") return {blk + "ffn_norm" + kind};
  if (gpt2 && (p == "attn.q" || p == "attn.k" || p == "attn.v"))
    return {blk + "attn_qkv" + kind, p == "attn.q" ? 0 : p == "attn.k" ? 1 : 2};
  static const std::map<std::string, std::string> names = {
      {"attn.q", "attn_q"},  {"attn.k", "attn_k"},    {"attn.v", "attn_v"},   {"attn.o", "attn_output"},
      {"mlp.gate", "ffn_gate"}, {"mlp.up", "ffn_up"}, {"mlp.down", "ffn_down"}, {"mlp.fc", "ffn_up"}, {"mlp.proj", "ffn_down"}};
  const auto it = names.find(p);
  check(it != names.end(), "save_gguf: no GGUF name for lwcl tensor '", name, "'");
  return {blk + it->second + kind};
}

// Whether lwcl tensor `name` is a q or k projection (weight or bias) whose rows llama.cpp's llama and
// deci want in interleaved RoPE order; *heads is then the layer's head count for it.
inline bool rope_rows(const model::model_config& cfg, const std::string& name, index_t* heads) {
  if (cfg.fam != model::family::llama || name.rfind("layers.", 0) != 0) return false;
  const auto dot = name.find('.', 7);
  const std::string p = name.substr(dot + 1);
  const auto& L = cfg.layers[static_cast<std::size_t>(std::stoll(name.substr(7, dot - 7)))];
  if (p.rfind("attn.q.", 0) == 0) *heads = L.n_heads;
  else if (p.rfind("attn.k.", 0) == 0) *heads = L.n_kv_heads;
  else return false;
  return true;
}

// The row of lwcl's (Hugging Face's) order that goes to row r in llama.cpp's interleaved order, heads of
// width D: r = h D + 2 i + s takes h D + s D/2 + i.
inline index_t interleaved_source(index_t r, index_t D) {
  const index_t h = r / D, j = r % D;
  return h * D + (j % 2) * (D / 2) + j / 2;
}

inline std::uint32_t file_type_of(gguf::tensor_type t) {
  switch (t) {
    case gguf::tensor_type::f32: return 0;
    case gguf::tensor_type::f16: return 1;
    case gguf::tensor_type::q4_0: return 2;
    case gguf::tensor_type::q8_0: return 7;
    case gguf::tensor_type::bf16: return 32;
  }
  return 0;
}

// One row of n f32 values in type t (F32, F16 or BF16).
inline void encode_row(const float* v, index_t n, gguf::tensor_type t, unsigned char* out) {
  for (index_t i = 0; i < n; ++i) {
    if (t == gguf::tensor_type::f32) {
      std::memcpy(out + 4 * i, v + i, 4);
    } else {
      const std::uint16_t b = t == gguf::tensor_type::f16 ? f16_from_float(v[i]) : bf16(v[i]).bits;
      std::memcpy(out + 2 * i, &b, 2);
    }
  }
}

// The tokenizer metadata: GPT-2's byte-level BPE as llama.cpp's "gpt2" tokenizer model. A model whose
// vocabulary is larger than the tokenizer's gets unused padding tokens for the ids past it.
inline void add_tokenizer(std::vector<std::pair<std::string, gguf::value>>& kv, const tokenizer::byte_bpe& tok, index_t vocab,
                          const std::string& from) {
  check(static_cast<index_t>(tok.vocab_size()) <= vocab, "save_gguf: the tokenizer of '", from, "' has ", tok.vocab_size(),
        " tokens, ids past the model's vocabulary of ", vocab);
  std::vector<std::string> tokens = tok.tokens();
  std::vector<std::int64_t> types(tokens.size(), 1);  // normal
  const auto eot = tok.token_id("<|endoftext|>");
  if (eot) types[static_cast<std::size_t>(*eot)] = 3;  // control: never made from text, as in lwcl's tokenizer
  for (index_t id = static_cast<index_t>(tokens.size()); id < vocab; ++id) {
    tokens.push_back("[PAD" + std::to_string(id) + "]");
    types.push_back(5);  // unused
  }
  std::vector<std::string> merges;
  merges.reserve(tok.merges().size());
  for (const auto& [a, b] : tok.merges()) merges.push_back(a + " " + b);
  kv.emplace_back("tokenizer.ggml.model", gguf::text("gpt2"));
  kv.emplace_back("tokenizer.ggml.pre", gguf::text("gpt-2"));
  kv.emplace_back("tokenizer.ggml.tokens", gguf::texts(std::move(tokens)));
  kv.emplace_back("tokenizer.ggml.token_type", gguf::integers(gguf::value_type::i32, std::move(types)));
  kv.emplace_back("tokenizer.ggml.merges", gguf::texts(std::move(merges)));
  kv.emplace_back("tokenizer.ggml.add_bos_token", gguf::boolean(false));
  kv.emplace_back("tokenizer.ggml.add_eos_token", gguf::boolean(false));
  if (eot) {
    kv.emplace_back("tokenizer.ggml.bos_token_id", gguf::integer(gguf::value_type::u32, *eot));
    kv.emplace_back("tokenizer.ggml.eos_token_id", gguf::integer(gguf::value_type::u32, *eot));
  }
}

}  // namespace gguf_detail

// Writes `net` as the GGUF file `path` (a temporary name, then renamed). Refuses, before writing, a shape
// llama.cpp cannot hold, a block whose shape differs from the parameter's, a tokenizer whose ids pass the
// model's vocabulary, and weights of a type other than F32, F16 or BF16.
template <class Backend>
void save_gguf(const model::transformer<Backend>& net, const std::string& path, const gguf_save_options& o) {
  namespace fs = std::filesystem;
  using gguf::tensor_type;
  const auto& cfg = net.config();
  const auto& layout = net.layout();
  check(o.weights == tensor_type::f32 || o.weights == tensor_type::f16 || o.weights == tensor_type::bf16, "save_gguf: weights as ",
        gguf::tensor_type_name(o.weights), " (expected F32, F16 or BF16; Q8_0 and Q4_0 come from a quantised model's codes)");
  const std::string arch = gguf_detail::architecture_for(cfg);
  check(!o.tokenizer_from.empty(), "save_gguf: no tokenizer folder given (llama.cpp needs the vocabulary in the file)");
  const auto tok = tokenizer::byte_bpe_of_folder(o.tokenizer_from);
  for (const auto& [name, b] : o.blocks) {
    check(layout.contains(name), "save_gguf: a quantised weight for '", name, "', which the model does not have");
    const auto& e = layout.find(name);
    check(e.shape.rank() == 2 && e.shape[0] == b.rows && e.shape[1] == b.cols, "save_gguf: '", name, "' is ", e.shape.str(),
          " in the model but ", b.rows, " x ", b.cols, " quantised");
    check(gguf_detail::is_quantized(b.type), "save_gguf: '", name, "' is given as ", gguf::tensor_type_name(b.type),
          " blocks (expected Q8_0 or Q4_0)");
    check(b.cols % static_cast<index_t>(gguf::q_block) == 0 &&
              b.bytes.size() == static_cast<std::size_t>(b.rows) * gguf::row_bytes(b.type, static_cast<std::uint64_t>(b.cols)),
          "save_gguf: '", name, "' holds ", b.bytes.size(), " bytes of ", gguf::tensor_type_name(b.type), " for a ", b.rows, " x ",
          b.cols, " matrix");
  }

  // The parameters as f32 on the host (bf16 and f16 widen exactly).
  const std::size_t esize = dtype_size(net.type());
  std::vector<char> raw(static_cast<std::size_t>(layout.numel()) * esize);
  net.backend().to_host(raw.data(), net.params().data, raw.size());
  std::vector<float> params(static_cast<std::size_t>(layout.numel()));
  hf_detail::convert_elements(raw.data(), net.type(), reinterpret_cast<char*>(params.data()), dtype::f32, params.size());
  for (const auto& e : layout.entries())
    for (index_t i = 0; i < e.shape.numel(); ++i)
      if (!std::isfinite(params[static_cast<std::size_t>(e.offset + i)]))
        fail("save_gguf: '", e.name, "' holds ", params[static_cast<std::size_t>(e.offset + i)], " at element ", i,
             " (a non-finite weight)");

  // Each GGUF tensor from its lwcl parts (gpt2's attn_qkv from three), rows stacked in part order.
  struct pending {
    tensor_type type;
    index_t cols = 0;
    std::vector<std::pair<int, const tensor_layout::entry*>> parts;
  };
  std::vector<std::string> order;
  std::map<std::string, pending> out;
  for (const auto& e : layout.entries()) {
    const auto t = gguf_detail::gguf_name(cfg, e.name);
    const auto b = o.blocks.find(e.name);
    const tensor_type type = b != o.blocks.end() ? b->second.type : e.shape.rank() == 1 ? tensor_type::f32 : o.weights;
    const index_t cols = e.shape.rank() == 1 ? e.shape[0] : e.shape[1];
    auto it = out.find(t.name);
    if (it == out.end()) {
      order.push_back(t.name);
      it = out.emplace(t.name, pending{type, cols, {}}).first;
    }
    check(it->second.type == type, "save_gguf: '", t.name, "' gathers parts of types ", gguf::tensor_type_name(it->second.type), " and ",
          gguf::tensor_type_name(type), " (quantise q, k and v alike)");
    check(e.shape.rank() == 1 || it->second.cols == cols, "save_gguf: '", t.name, "' gathers parts of ", it->second.cols, " and ", cols,
          " columns");
    it->second.parts.emplace_back(t.part, &e);
  }

  std::vector<gguf::tensor_out> tensors;
  for (const auto& name : order) {
    auto& p = out.at(name);
    std::sort(p.parts.begin(), p.parts.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    gguf::tensor_out t;
    t.name = name;
    t.type = p.type;
    const bool vector = p.parts.front().second->shape.rank() == 1;
    index_t rows = 0;
    for (const auto& [part, e] : p.parts) rows += vector ? e->shape[0] : e->shape[0];
    if (vector) {
      t.dims = {static_cast<std::uint64_t>(rows)};
    } else {
      t.dims = {static_cast<std::uint64_t>(p.cols), static_cast<std::uint64_t>(rows)};
    }
    const std::uint64_t rb = gguf::row_bytes(p.type, vector ? static_cast<std::uint64_t>(rows) : static_cast<std::uint64_t>(p.cols));
    t.data.resize(static_cast<std::size_t>(vector ? rb : rb * static_cast<std::uint64_t>(rows)));
    std::size_t at = 0;  // rows (vectors: elements) written so far
    for (const auto& [part, e] : p.parts) {
      index_t heads = 0;
      const bool permute = gguf_detail::rope_rows(cfg, e->name, &heads);
      const float* src = params.data() + e->offset;
      if (vector) {  // a bias or norm: F32, permuted like its projection's rows
        for (index_t i = 0; i < e->shape[0]; ++i) {
          const index_t from = permute ? gguf_detail::interleaved_source(i, cfg.head_dim) : i;
          std::memcpy(t.data.data() + 4 * (at + static_cast<std::size_t>(i)), src + from, 4);
        }
        at += static_cast<std::size_t>(e->shape[0]);
        continue;
      }
      const index_t R = e->shape[0], C = e->shape[1];
      const auto b = o.blocks.find(e->name);
      for (index_t r = 0; r < R; ++r) {
        const index_t from = permute ? gguf_detail::interleaved_source(r, cfg.head_dim) : r;
        unsigned char* dst = t.data.data() + (at + static_cast<std::size_t>(r)) * rb;
        if (b != o.blocks.end()) std::memcpy(dst, b->second.bytes.data() + static_cast<std::size_t>(from) * rb, static_cast<std::size_t>(rb));
        else gguf_detail::encode_row(src + from * C, C, p.type, dst);
      }
      at += static_cast<std::size_t>(R);
    }
    tensors.push_back(std::move(t));
  }

  // The metadata llama.cpp reads.
  using gguf::value_type;
  std::vector<std::pair<std::string, gguf::value>> kv;
  const auto u32 = [](index_t v) { return gguf::integer(value_type::u32, v); };
  tensor_type most = o.weights;
  if (!o.blocks.empty()) {
    std::map<tensor_type, std::size_t> n;
    for (const auto& [name, b] : o.blocks) ++n[b.type];
    most = std::max_element(n.begin(), n.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
  }
  kv.emplace_back("general.architecture", gguf::text(arch));
  kv.emplace_back("general.name", gguf::text(o.name.empty() ? fs::path(path).stem().string() : o.name));
  kv.emplace_back("general.file_type", u32(gguf_detail::file_type_of(most)));
  if (!o.blocks.empty()) kv.emplace_back("general.quantization_version", u32(2));
  kv.emplace_back(arch + ".vocab_size", u32(cfg.vocab));
  kv.emplace_back(arch + ".context_length", u32(cfg.max_seq));
  kv.emplace_back(arch + ".embedding_length", u32(cfg.d_model));
  kv.emplace_back(arch + ".block_count", u32(cfg.n_layers()));
  if (arch == "deci") {
    std::vector<std::int64_t> heads, kv_heads, ffn;
    for (const auto& L : cfg.layers) {
      heads.push_back(L.n_heads);
      kv_heads.push_back(L.n_kv_heads);
      ffn.push_back(L.ffn);
    }
    kv.emplace_back(arch + ".feed_forward_length", gguf::integers(value_type::i32, std::move(ffn)));
    kv.emplace_back(arch + ".attention.head_count", gguf::integers(value_type::i32, std::move(heads)));
    kv.emplace_back(arch + ".attention.head_count_kv", gguf::integers(value_type::i32, std::move(kv_heads)));
  } else {
    const auto& L0 = cfg.layers.front();
    kv.emplace_back(arch + ".feed_forward_length", u32(L0.ffn));
    kv.emplace_back(arch + ".attention.head_count", u32(L0.n_heads));
    kv.emplace_back(arch + ".attention.head_count_kv", u32(L0.n_kv_heads));
  }
  kv.emplace_back(arch + ".attention.key_length", u32(cfg.head_dim));
  kv.emplace_back(arch + ".attention.value_length", u32(cfg.head_dim));
  if (cfg.traits().rms_norm) {
    kv.emplace_back(arch + ".attention.layer_norm_rms_epsilon", gguf::real(value_type::f32, cfg.norm_eps));
  } else {
    kv.emplace_back(arch + ".attention.layer_norm_epsilon", gguf::real(value_type::f32, cfg.norm_eps));
  }
  if (cfg.traits().rope) {
    kv.emplace_back(arch + ".rope.dimension_count", u32(cfg.head_dim));
    kv.emplace_back(arch + ".rope.freq_base", gguf::real(value_type::f32, cfg.rope_theta));
  }
  if (!o.quantiser.empty()) kv.emplace_back("lwcl.quantiser", gguf::text(o.quantiser));
  gguf_detail::add_tokenizer(kv, tok, cfg.vocab, o.tokenizer_from);
  fs::create_directories(fs::absolute(path).parent_path());
  gguf::write(path, kv, tensors);
}

// What load_gguf read besides the weights: the tokenizer, and each tensor's GGUF type by lwcl name.
struct gguf_contents {
  std::string architecture;
  std::map<std::string, gguf::tensor_type> types;
  std::unique_ptr<tokenizer::byte_bpe> tokenizer;  // null when the file has no gpt2-style tokenizer,
  std::string tokenizer_note;                       // and then why
};

namespace gguf_detail {

inline model::model_config config_of(const gguf::file& f) {
  using model::family;
  const std::string arch = f.get_string("general.architecture");
  model::model_config cfg;
  if (arch == "llama" || arch == "deci") cfg.fam = family::llama;
  else if (arch == "qwen2") cfg.fam = family::qwen2;
  else if (arch == "gpt2") cfg.fam = family::gpt2;
  else fail("load_gguf: '", f.path(), "' holds architecture '", arch, "' (lwcl reads llama, deci, qwen2 and gpt2)");
  const auto positive = [&](const std::string& key) {
    const std::int64_t v = f.get_int(key);
    check(v > 0 && v <= model::model_config::max_dimension, "load_gguf: '", f.path(), "': ", key, " is ", v, " (expected 1 to ",
          model::model_config::max_dimension, ")");
    return static_cast<index_t>(v);
  };
  check(f.contains("token_embd.weight") && f.tensor("token_embd.weight").dims.size() == 2, "load_gguf: '", f.path(),
        "' has no 2-D token_embd.weight");
  cfg.vocab = static_cast<index_t>(f.tensor("token_embd.weight").dims[1]);
  cfg.d_model = positive(arch + ".embedding_length");
  cfg.max_seq = positive(arch + ".context_length");
  const index_t n_layers = positive(arch + ".block_count");
  check(n_layers <= model::model_config::max_layers, "load_gguf: '", f.path(), "': ", n_layers, " layers, at most ",
        model::model_config::max_layers);
  const auto n = static_cast<std::size_t>(n_layers);
  const auto heads = f.get_per_layer(arch + ".attention.head_count", n);
  const auto kv_heads = f.has(arch + ".attention.head_count_kv") ? f.get_per_layer(arch + ".attention.head_count_kv", n) : heads;
  const auto ffn = f.get_per_layer(arch + ".feed_forward_length", n);
  for (std::size_t l = 0; l < n; ++l) {
    check(heads[l] > 0 && kv_heads[l] > 0 && ffn[l] > 0, "load_gguf: '", f.path(), "': layer ", l, " has ", heads[l], " heads, ",
          kv_heads[l], " KV heads and FFN ", ffn[l], " (lwcl reads attention and MLP in every layer)");
    cfg.layers.push_back({static_cast<index_t>(heads[l]), static_cast<index_t>(kv_heads[l]), static_cast<index_t>(ffn[l])});
  }
  cfg.head_dim = f.has(arch + ".attention.key_length") ? positive(arch + ".attention.key_length") : cfg.d_model / std::max<index_t>(1, cfg.layers.front().n_heads);
  if (f.has(arch + ".attention.value_length"))
    check(positive(arch + ".attention.value_length") == cfg.head_dim, "load_gguf: '", f.path(), "': value_length differs from key_length");
  const bool rms = cfg.fam != family::gpt2;
  cfg.norm_eps = f.get_real(arch + (rms ? ".attention.layer_norm_rms_epsilon" : ".attention.layer_norm_epsilon"));
  if (cfg.traits().rope) {
    cfg.rope_theta = f.has(arch + ".rope.freq_base") ? f.get_real(arch + ".rope.freq_base") : 10000.0;
    if (f.has(arch + ".rope.dimension_count"))
      check(f.get_int(arch + ".rope.dimension_count") == cfg.head_dim, "load_gguf: '", f.path(), "': RoPE on ",
            f.get_int(arch + ".rope.dimension_count"), " of ", cfg.head_dim, " channels (lwcl rotates whole heads)");
  }
  cfg.tie_embeddings = !f.contains("output.weight");
  cfg.output_bias = cfg.fam == family::llama && f.contains("blk.0.attn_output.bias");
  cfg.validate();
  return cfg;
}

// The byte-level BPE a GGUF file carries (llama.cpp's gpt2 tokenizer model with GPT-2's pre-tokenizer),
// without the unused padding tokens past its vocabulary; null, with the reason in *note, when the file
// has another kind of tokenizer or none.
inline std::unique_ptr<tokenizer::byte_bpe> tokenizer_of(const gguf::file& f, index_t vocab, std::string* note) {
  if (!f.has("tokenizer.ggml.model") || f.get_string("tokenizer.ggml.model") != "gpt2") {
    *note = "no gpt2-style tokenizer (tokenizer.ggml.model " +
            (f.has("tokenizer.ggml.model") ? "'" + f.get_string("tokenizer.ggml.model") + "'" : std::string("absent")) + ")";
    return nullptr;
  }
  if (f.has("tokenizer.ggml.pre") && f.get_string("tokenizer.ggml.pre") != "gpt-2") {
    *note = "pre-tokenizer '" + f.get_string("tokenizer.ggml.pre") +
            "', whose text splitting lwcl's byte-level BPE does not do (it splits by GPT-2's pattern, 'gpt-2')";
    return nullptr;
  }
  {
    const auto& tokens = f.get("tokenizer.ggml.tokens");
    check(tokens.array && tokens.type == gguf::value_type::string, "load_gguf: '", f.path(), "': tokenizer.ggml.tokens is ",
          tokens.describe(), ", expected an array of strings");
    check(static_cast<index_t>(tokens.strings.size()) <= vocab, "load_gguf: '", f.path(), "' has ", tokens.strings.size(),
          " tokens, ids past the model's vocabulary of ", vocab);
    // Padding tokens (type unused) past the real vocabulary are left out, as lwcl's tokenizer never makes them.
    std::size_t n = tokens.strings.size();
    if (f.has("tokenizer.ggml.token_type")) {
      const auto& types = f.get("tokenizer.ggml.token_type");
      check(types.array && gguf::is_integer(types.type) && types.ints.size() == n, "load_gguf: '", f.path(),
            "': tokenizer.ggml.token_type is ", types.describe(), ", expected ", n, " integers");
      while (n > 0 && types.ints[n - 1] == 5) --n;
    }
    std::vector<std::pair<std::string, std::string>> merges;
    if (f.has("tokenizer.ggml.merges")) {
      const auto& m = f.get("tokenizer.ggml.merges");
      check(m.array && m.type == gguf::value_type::string, "load_gguf: '", f.path(), "': tokenizer.ggml.merges is ", m.describe(),
            ", expected an array of strings");
      for (const auto& s : m.strings) {
        const auto sp = s.find(' ');
        check(sp != std::string::npos && sp > 0 && sp + 1 < s.size(), "load_gguf: '", f.path(), "' has a malformed merge '", s, "'");
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      }
    }
    const std::vector<std::string> kept(tokens.strings.begin(), tokens.strings.begin() + static_cast<std::ptrdiff_t>(n));
    return std::make_unique<tokenizer::byte_bpe>(tokenizer::byte_bpe::from_lists(kept, merges, f.path()));
  }
}

}  // namespace gguf_detail

// Fills `net` (built from config_of the same file, f32) from the GGUF file; returns its tokenizer and types.
template <class Backend>
gguf_contents load_gguf_weights(model::transformer<Backend>& net, const gguf::file& f) {
  const auto& cfg = net.config();
  const auto& layout = net.layout();
  check(net.type() == dtype::f32, "load_gguf: the model holds ", dtype_name(net.type()), " weights (expected f32)");
  gguf_contents c;
  c.architecture = f.get_string("general.architecture");
  std::vector<float> params(static_cast<std::size_t>(layout.numel()), 0.0f);
  std::map<std::string, std::vector<float>> read;  // GGUF tensors read so far
  std::map<std::string, index_t> fused_at;          // gpt2: rows of attn_qkv taken so far
  std::size_t used = 0;
  std::map<std::string, int> parts_left;  // lwcl tensors still to read from each GGUF tensor (gpt2's attn_qkv: 3)
  for (const auto& e : layout.entries()) ++parts_left[gguf_detail::gguf_name(cfg, e.name).name];
  for (const auto& e : layout.entries()) {
    const auto t = gguf_detail::gguf_name(cfg, e.name);
    check(f.contains(t.name), "load_gguf: '", f.path(), "' has no tensor '", t.name, "' (lwcl's '", e.name, "')");
    const gguf::tensor_info& info = f.tensor(t.name);
    auto it = read.find(t.name);
    if (it == read.end()) {
      it = read.emplace(t.name, f.read_f32(t.name)).first;
      ++used;
    }
    const bool vector = e.shape.rank() == 1;
    const index_t R = vector ? 1 : e.shape[0], C = vector ? e.shape[0] : e.shape[1];
    // Where this part starts inside the GGUF tensor (rows for matrices, elements for vectors).
    index_t first = 0;
    if (t.part >= 0) first = std::exchange(fused_at[t.name], fused_at[t.name] + (vector ? e.shape[0] : e.shape[0]));
    if (vector) {
      check(info.dims.size() == 1 && info.dims[0] >= static_cast<std::uint64_t>(first + C), "load_gguf: '", f.path(), "': '", t.name,
            "' has shape ", info.shape(), ", too small for lwcl's '", e.name, "' of ", C);
    } else {
      check(info.dims.size() == 2 && info.dims[0] == static_cast<std::uint64_t>(C) && info.dims[1] >= static_cast<std::uint64_t>(first + R),
            "load_gguf: '", f.path(), "': '", t.name, "' has shape ", info.shape(), ", lwcl's '", e.name, "' needs ", R, " rows of ", C);
    }
    if (t.part < 0)
      check(info.dims.back() == static_cast<std::uint64_t>(vector ? C : R), "load_gguf: '", f.path(), "': '", t.name, "' has shape ",
            info.shape(), ", lwcl's '", e.name, "' is ", e.shape.str());
    index_t heads = 0;
    const bool permute = gguf_detail::rope_rows(cfg, e.name, &heads);
    float* dst = params.data() + e.offset;
    const float* src = it->second.data();
    for (index_t r = 0; r < (vector ? C : R); ++r) {
      // Row (element) r of the GGUF order holds lwcl's row interleaved_source(r).
      const index_t to = permute ? gguf_detail::interleaved_source(r, cfg.head_dim) : r;
      if (vector) dst[to] = src[first + r];
      else std::memcpy(dst + to * C, src + (first + r) * C, static_cast<std::size_t>(C) * sizeof(float));
    }
    c.types[e.name] = static_cast<gguf::tensor_type>(info.type);
    if (--parts_left[t.name] == 0) read.erase(it);  // its values are all placed: free them
  }
  for (const auto& [name, at] : fused_at) {
    const auto& info = f.tensor(name);
    check(static_cast<std::uint64_t>(at) == info.dims.back(), "load_gguf: '", f.path(), "': '", name, "' has ", info.dims.back(),
          " rows, q, k and v take ", at);
  }
  check(used == f.tensors().size(), "load_gguf: '", f.path(), "' holds ", f.tensors().size(), " tensors, the model reads ", used,
        " (tensors lwcl's ", model::family_name(cfg.fam), " does not have)");
  for (const auto& e : layout.entries())
    for (index_t i = 0; i < e.shape.numel(); ++i)
      if (!std::isfinite(params[static_cast<std::size_t>(e.offset + i)]))
        fail("load_gguf: '", f.path(), "' holds a non-finite weight in '", gguf_detail::gguf_name(cfg, e.name).name, "' (lwcl's '",
             e.name, "', element ", i, ")");
  net.backend().from_host(net.params().data, params.data(), params.size() * sizeof(float));

  c.tokenizer = gguf_detail::tokenizer_of(f, cfg.vocab, &c.tokenizer_note);
  return c;
}

// The transformer of a GGUF file, f32 (quantised weights dequantised), with what else it read.
template <class Backend>
std::pair<std::unique_ptr<model::transformer<Backend>>, gguf_contents> load_gguf(Backend& be, const std::string& path) {
  const gguf::file f(path);
  auto net = std::make_unique<model::transformer<Backend>>(be, gguf_detail::config_of(f), dtype::f32);
  auto c = load_gguf_weights(*net, f);
  return {std::move(net), std::move(c)};
}

// The same, frozen (model::frozen): for forward passes only, no gradient buffer ever allocated.
template <class Backend>
std::pair<std::unique_ptr<model::transformer<Backend>>, gguf_contents> load_gguf(Backend& be, const std::string& path,
                                                                                 model::frozen_t) {
  const gguf::file f(path);
  auto net = std::make_unique<model::transformer<Backend>>(be, gguf_detail::config_of(f), dtype::f32, model::frozen);
  auto c = load_gguf_weights(*net, f);
  return {std::move(net), std::move(c)};
}

// Whether `path` names a GGUF file (by its first four bytes), for programs that take a folder or a file.
inline bool is_gguf_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char m[4] = {};
  in.read(m, 4);
  return in.gcount() == 4 && std::memcmp(m, "GGUF", 4) == 0;
}

}  // namespace lwcl::checkpoint
