#pragma once
// Random pruning criterion: the baseline every other criterion must beat. Scores are uniform in [0, 1),
// drawn from Philox with the policy's seed, so a seed always gives the same scores (and plan):
//   score = (bits(2i) >> 5) * 2^-27 + (bits(2i + 1) >> 6) * 2^-53   (53 random bits)
// where bits(k) is draw k of philox_stream{seed, 4 l + kind}, kind 0 heads, 1 KV groups, 2 FFN
// channels, 3 the layer (i = 0), and i is the group's index within its layer.

#include <cstdint>
#include <string_view>

#include "lwcl/core/rng.hpp"
#include "lwcl/policies/pruning/concept.hpp"

namespace lwcl::policies::pruning {

struct random {
  static constexpr std::string_view name = "random";
  static constexpr bool needs_statistics = false;
  static constexpr bool needs_gradients = false;

  std::uint64_t seed = 0;

  // Element i of a stream as a double in [0, 1): two 32-bit draws give 53 bits, so ties between
  // thousands of FFN channels are practically impossible.
  static double uniform(const philox_stream& s, std::uint64_t i) {
    const auto hi = static_cast<std::uint64_t>(s.bits(2 * i) >> 5), lo = static_cast<std::uint64_t>(s.bits(2 * i + 1) >> 6);
    return static_cast<double>((hi << 26) | lo) * 0x1p-53;
  }

  prune::group_scores score(const prune::scoring_input& in) const {
    prune::group_scores out = prune::sized_scores(in.config, name);
    for (std::size_t l = 0; l < out.layers.size(); ++l) {
      auto& s = out.layers[l];
      auto fill = [&](std::vector<double>& v, std::uint64_t kind) {
        const philox_stream stream{seed, 4 * static_cast<std::uint64_t>(l) + kind};
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = uniform(stream, i);
      };
      fill(s.heads, 0);
      fill(s.kv_groups, 1);
      fill(s.ffn, 2);
      s.layer = uniform(philox_stream{seed, 4 * static_cast<std::uint64_t>(l) + 3}, 0);
    }
    return out;
  }
};
static_assert(pruning_criterion<random>);

}  // namespace lwcl::policies::pruning
