#pragma once
// Model configuration: the family (gpt2, bert, llama, qwen2), global widths, and per-layer head, KV-head
// and FFN widths, so that a pruned student with uneven layers is a first-class model. family_traits
// says how each family builds a block.

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"

namespace lwcl::model {

enum class family { gpt2, bert, llama, qwen2 };

inline std::string_view family_name(family f) {
  switch (f) {
    case family::gpt2: return "gpt2";
    case family::bert: return "bert";
    case family::llama: return "llama";
    case family::qwen2: return "qwen2";
  }
  return "?";
}
inline family parse_family(std::string_view s) {
  for (family f : {family::gpt2, family::bert, family::llama, family::qwen2})
    if (family_name(f) == s) return f;
  fail("model family '", s, "' is unknown (expected gpt2, bert, llama or qwen2)");
}

// How a family builds its blocks.
struct family_traits {
  bool rms_norm;       // RMSNorm (llama, qwen2) or LayerNorm with bias (gpt2, bert)
  bool post_norm;      // BERT: normalise after each residual add; others: before each sub-layer
  bool causal;         // causal self-attention (decoders)
  bool rope;           // rotary positions (llama, qwen2) instead of learned position embeddings
  bool gated_mlp;      // SwiGLU gate/up/down (llama, qwen2) or fc -> GELU -> proj
  bool gelu_erf;       // exact GELU (bert) or the tanh approximation (gpt2)
  bool qkv_bias;       // bias on the q, k, v projections
  bool out_bias;       // bias on the attention output and MLP projections
};

inline family_traits traits_of(family f) {
  switch (f) {
    case family::gpt2: return {false, false, true, false, false, false, true, true};
    case family::bert: return {false, true, false, false, false, true, true, true};
    case family::llama: return {true, false, true, true, true, false, false, false};
    case family::qwen2: return {true, false, true, true, true, false, true, false};
  }
  fail("traits_of: unknown family");
}

struct layer_config {
  index_t n_heads = 0;
  index_t n_kv_heads = 0;
  index_t ffn = 0;
};

struct model_config {
  family fam = family::gpt2;
  index_t vocab = 0;
  index_t max_seq = 0;   // learned position table length (gpt2, bert); RoPE models: longest sequence
  index_t d_model = 0;
  index_t head_dim = 0;  // per-head width; fixed across layers (pruning removes heads, not head width)
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  bool tie_embeddings = true;  // LM head shares the token embedding (gpt2); llama/qwen2 usually untied
  // A bias on the attention output and MLP output projections even where the family has none
  // (llama, qwen2): pruning with bias compensation (FLAP) folds removed channels' mean output into it.
  bool output_bias = false;
  std::vector<layer_config> layers;

  family_traits traits() const {
    auto t = traits_of(fam);
    if (output_bias) t.out_bias = true;
    return t;
  }
  index_t n_layers() const { return static_cast<index_t>(layers.size()); }

  // A homogeneous config: every layer with the same widths.
  static model_config uniform(family f, index_t vocab, index_t max_seq, index_t d_model, index_t n_layers, index_t n_heads,
                              index_t n_kv_heads, index_t ffn) {
    model_config c;
    c.fam = f;
    c.vocab = vocab;
    c.max_seq = max_seq;
    c.d_model = d_model;
    c.head_dim = n_heads > 0 ? d_model / n_heads : 0;
    c.norm_eps = traits_of(f).rms_norm ? 1e-6 : 1e-5;
    c.tie_embeddings = f == family::gpt2;
    c.layers.assign(static_cast<std::size_t>(n_layers), layer_config{n_heads, n_kv_heads, ffn});
    return c;
  }

  // Throws lwcl::error naming the first inconsistency.
  // Every size is bounded (max_dimension, max_layers, max_parameters) so that no product of them
  // overflows before the model's memory is checked against the machine's (model/weights.hpp).
  static constexpr index_t max_dimension = index_t{1} << 24;
  static constexpr index_t max_layers = index_t{1} << 16;
  static constexpr double max_parameters = 0x1p48;

  void validate() const {
    const auto in_range = [](const char* what, index_t v) {
      check(v > 0 && v <= max_dimension, "model_config: ", what, " must be in [1, ", max_dimension, "], got ", v);
    };
    in_range("vocab", vocab);
    in_range("d_model", d_model);
    in_range("head_dim", head_dim);
    in_range("max_seq", max_seq);
    check(n_layers() <= max_layers, "model_config: ", n_layers(), " layers, at most ", max_layers);
    check(std::isfinite(norm_eps) && norm_eps > 0 && norm_eps < 1, "model_config: norm_eps must be in (0, 1), got ",
          norm_eps);
    check(!traits().rope || (std::isfinite(rope_theta) && rope_theta > 0),
          "model_config: rope_theta must be positive and finite, got ", rope_theta);
    check(!traits().rope || head_dim % 2 == 0, "model_config: RoPE needs an even head_dim, got ", head_dim);
    // Embeddings and position table, then per layer the attention and MLP weights (an upper bound).
    double params = static_cast<double>(vocab) * d_model * 2 + static_cast<double>(max_seq) * d_model;
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const auto& L = layers[l];
      check(L.n_heads > 0 && L.n_heads <= max_dimension, "model_config: layer ", l, " has ", L.n_heads,
            " heads, expected 1 to ", max_dimension);
      check(L.n_kv_heads > 0 && L.n_heads % L.n_kv_heads == 0, "model_config: layer ", l, " has ", L.n_kv_heads,
            " KV heads, which does not divide its ", L.n_heads, " query heads");
      check(L.ffn > 0 && L.ffn <= max_dimension, "model_config: layer ", l, " has FFN width ", L.ffn,
            ", expected 1 to ", max_dimension);
      params += 2.0 * (static_cast<double>(L.n_heads) + L.n_kv_heads) * head_dim * d_model + 3.0 * L.ffn * d_model +
                4.0 * d_model + 2.0 * L.ffn;
    }
    check(params <= max_parameters, "model_config: about ", params, " parameters, more than lwcl's limit of ",
          max_parameters);
  }
};

// The parameter-name prefix of block `layer` in checkpoints and layouts ("layers.3.").
inline std::string layer_prefix(index_t layer) { return "layers." + std::to_string(layer) + "."; }

}  // namespace lwcl::model
