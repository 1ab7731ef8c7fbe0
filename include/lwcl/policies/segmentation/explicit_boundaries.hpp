#pragma once
// explicit_boundaries: segments cut where the user says. `boundaries` lists the first layer of every
// segment after the first, strictly increasing inside (0, L): {2, 5} on 8 layers gives [0, 2), [2, 5),
// [5, 8); an empty list gives one segment over the whole model.

#include <string_view>
#include <vector>

#include "lwcl/policies/segmentation/concept.hpp"

namespace lwcl::policies::segmentation {

struct explicit_boundaries {
  static constexpr std::string_view name = "explicit_boundaries";

  std::vector<index_t> boundaries;

  std::vector<segment> segments(const model::model_config& m) const {
    const index_t L = m.n_layers();
    check(L > 0, name, ": the model has no layers to segment");
    std::vector<segment> segs;
    index_t first = 0;
    for (std::size_t k = 0; k < boundaries.size(); ++k) {
      const index_t b = boundaries[k];
      check(b > first && b < L, name, ": boundary ", k, " is layer ", b, ", expected a layer in (", first, ", ", L,
            ") (boundaries are strictly increasing first layers of segments 1, 2, ..., without 0 and ", L, ")");
      segs.push_back({first, b});
      first = b;
    }
    segs.push_back({first, L});
    check_tiling(segs, L, name);
    return segs;
  }
};
static_assert(segmentation_policy<explicit_boundaries>);

}  // namespace lwcl::policies::segmentation
