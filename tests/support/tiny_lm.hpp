#pragma once
// A tiny decoder and a learnable batch rule shared by the tests that train whole models on two
// backends or in two precisions (tests/cuda/test_cuda_model.cu, test_cuda_bf16.cu,
// tests/model/test_mixed_precision.cpp), so that their trajectories are comparable.

#include <cstdint>
#include <vector>

#include "lwcl/model/config.hpp"

namespace lwcl::test::tiny_lm {

inline constexpr index_t vocab = 96, B = 4, T = 24;

// 2 layers of width 64, 4 heads (GQA with 2 KV heads for llama and qwen2), FFN 160, max_seq 32.
inline model::model_config config(model::family fam) {
  const index_t kv = fam == model::family::gpt2 ? 4 : 2;
  return model::model_config::uniform(fam, vocab, 32, 64, 2, 4, kv, 160);
}

// Batch k of next-token pairs from a fixed rule the model can learn: (B, T) ids and targets.
inline void make_batch(int k, std::vector<std::int32_t>& ids, std::vector<std::int32_t>& targets) {
  ids.resize(static_cast<std::size_t>(B * T));
  targets.resize(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<std::int32_t>((i * 7 + 3 * static_cast<std::size_t>(k) + 1) % vocab);
    targets[i] = static_cast<std::int32_t>((static_cast<std::size_t>(ids[i]) * 5 + 2) % vocab);
  }
}

}  // namespace lwcl::test::tiny_lm
