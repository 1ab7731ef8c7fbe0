#pragma once
// The recovery tests' common ground: a GQA llama teacher whose non-norm weights are scaled up (so that
// pruning hurts measurably), the plan that keeps every other FFN channel and one of two KV groups, and
// a token shard of a noisy affine Markov chain over the vocabulary.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/rng.hpp"
#include "lwcl/data/shards.hpp"
#include "lwcl/prune/surgery.hpp"

namespace lwcl::test {

// A llama of `layers` layers (vocab 48, width 32, 4 heads over 2 KV groups, FFN 48), initialised from
// seed 5 with every weight outside the norms multiplied by 8.
inline model::model_config pruned_fixture_config(index_t layers) {
  return model::model_config::uniform(model::family::llama, 48, 16, 32, layers, 4, 2, 48);
}

inline void init_scaled_teacher(model::transformer<backend::cpu>& teacher) {
  teacher.init(5);
  auto p = prune::detail::host_params(teacher);
  for (const auto& e : teacher.layout().entries())
    if (e.name.find("norm") == std::string::npos)
      for (index_t i = 0; i < e.shape.numel(); ++i) p[static_cast<std::size_t>(e.offset + i)] *= 8;
  prune::detail::set_host_params(teacher, p);
}

// Every other FFN channel and the second KV group (query heads 2 and 3) of every layer.
inline prune::prune_plan half_plan(const model::model_config& cfg) {
  auto plan = prune::keep_all(cfg);
  for (auto& l : plan.layers) {
    l.ffn.clear();
    for (index_t j = 0; j < 48; j += 2) l.ffn.push_back(j);
    l.kv_heads = {1};
    l.heads = {2, 3};
  }
  return plan;
}

// 6000 tokens: t' = (5 t + 1 + u) mod 48, u uniform in 0..3.
inline void write_markov_shard(const std::filesystem::path& path) {
  std::vector<std::int32_t> ids(6000);
  philox_stream s{9, 1};
  std::int32_t t = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = t = static_cast<std::int32_t>((t * 5 + 1 + s.bits(i) % 4) % 48);
  data::write_shard(path.string(), ids, 48);
}

}  // namespace lwcl::test
