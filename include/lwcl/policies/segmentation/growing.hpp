#pragma once
// growing: a schedule of segmentations whose segments grow from stage to stage, first_size layers,
// then first_size * factor, ... (uniform segments, the last of a stage possibly shorter), ending with
// one stage where a single segment spans the whole model. 1, 2, 4, ... layers on 6 layers: segment
// sizes 1, 2, 4, 6. segments() is the first (finest) stage.

#include <string_view>
#include <vector>

#include "lwcl/policies/segmentation/concept.hpp"

namespace lwcl::policies::segmentation {

struct growing {
  static constexpr std::string_view name = "growing";

  index_t first_size = 1;  // layers per segment in the first stage
  index_t factor = 2;      // growth of the segment size from one stage to the next

  segment_stages stages(const model::model_config& m) const {
    const index_t L = m.n_layers();
    check(L > 0, name, ": the model has no layers to segment");
    check(first_size >= 1, name, ": first_size is ", first_size, ", expected at least 1 layer");
    check(factor >= 2, name, ": factor is ", factor, ", expected at least 2 so that segments grow");
    segment_stages out;
    for (index_t size = first_size < L ? first_size : L;; size = size > L / factor ? L : size * factor) {
      out.push_back(uniform_segments(L, size, name));
      check_tiling(out.back(), L, name);
      if (size == L) break;
    }
    return out;
  }
  std::vector<segment> segments(const model::model_config& m) const { return stages(m).front(); }
};
static_assert(segmentation_policy<growing>);

}  // namespace lwcl::policies::segmentation
