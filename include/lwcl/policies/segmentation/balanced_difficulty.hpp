#pragma once
// balanced_difficulty: K contiguous segments that spread a per-layer difficulty (e.g. each layer's
// measured initial reconstruction loss) as evenly as possible: the boundaries minimise the largest
// segment sum, so no segment is a bottleneck of the curriculum. Exact, by dynamic programming over
// cut positions (O(K L^2), trivial for any real depth).

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>
#include <vector>

#include "lwcl/policies/segmentation/concept.hpp"

namespace lwcl::policies::segmentation {

struct balanced_difficulty {
  static constexpr std::string_view name = "balanced_difficulty";

  index_t n_segments = 1;                // K
  std::vector<double> layer_difficulty = {};  // one finite value >= 0 per layer, measured before segmenting

  std::vector<segment> segments(const model::model_config& m) const {
    const index_t L = m.n_layers();
    check(L > 0, name, ": the model has no layers to segment");
    check(static_cast<index_t>(layer_difficulty.size()) == L, name, ": got ", layer_difficulty.size(),
          " layer difficulties, expected one per layer (", L, ")");
    check(n_segments >= 1 && n_segments <= L, name, ": n_segments is ", n_segments, ", expected a count in [1, ", L,
          "]");
    std::vector<double> prefix(static_cast<std::size_t>(L) + 1, 0.0);
    for (index_t l = 0; l < L; ++l) {
      const double d = layer_difficulty[static_cast<std::size_t>(l)];
      check(std::isfinite(d) && d >= 0, name, ": difficulty of layer ", l, " is ", d, ", expected a finite value >= 0");
      prefix[static_cast<std::size_t>(l) + 1] = prefix[static_cast<std::size_t>(l)] + d;
    }
    auto sum = [&](index_t a, index_t b) {
      return prefix[static_cast<std::size_t>(b)] - prefix[static_cast<std::size_t>(a)];
    };
    const auto K = static_cast<std::size_t>(n_segments), n = static_cast<std::size_t>(L);
    // best[k][i]: the smallest possible largest sum when layers [0, i) form k segments; cut[k][i]: the
    // first layer of the last of those segments. The earliest optimal cut wins, so results are stable.
    constexpr double inf = std::numeric_limits<double>::infinity();
    std::vector<std::vector<double>> best(K + 1, std::vector<double>(n + 1, inf));
    std::vector<std::vector<index_t>> cut(K + 1, std::vector<index_t>(n + 1, 0));
    best[0][0] = 0;
    for (std::size_t k = 1; k <= K; ++k)
      for (std::size_t i = k; i <= n; ++i)
        for (std::size_t j = k - 1; j < i; ++j) {
          const double cost = std::max(best[k - 1][j], sum(static_cast<index_t>(j), static_cast<index_t>(i)));
          if (cost < best[k][i]) {
            best[k][i] = cost;
            cut[k][i] = static_cast<index_t>(j);
          }
        }
    std::vector<segment> segs(K);
    index_t last = L;
    for (std::size_t k = K; k >= 1; --k) {
      const index_t first = cut[k][static_cast<std::size_t>(last)];
      segs[k - 1] = {first, last};
      last = first;
    }
    check_tiling(segs, L, name);
    return segs;
  }
};
static_assert(segmentation_policy<balanced_difficulty> && needs_layer_difficulty<balanced_difficulty>);

}  // namespace lwcl::policies::segmentation
