#pragma once
// doubling: granularity growth on any segmentation. Stage 0 is the segmentation's first stage; each
// next stage merges neighbouring segments pairwise (0+1, 2+3, ...; an odd last segment stays alone)
// until one segment spans the model. From uniform<1> on 8 layers: sizes 1, 2, 4, 8. final_kd adds an
// end-to-end logit distillation stage after the last one.

#include <string_view>
#include <utility>
#include <vector>

#include "lwcl/policies/curriculum/concept.hpp"

namespace lwcl::policies::curriculum {

struct doubling {
  static constexpr std::string_view name = "doubling";

  bool final_kd = false;

  segment_stages stages(const segment_stages& from_segmentation) const {
    check(!from_segmentation.empty() && !from_segmentation.front().empty(), name,
          ": the segmentation gave no segments");
    segment_stages out{from_segmentation.front()};
    while (out.back().size() > 1) {
      const std::vector<segment>& prev = out.back();
      std::vector<segment> next;
      for (std::size_t k = 0; k < prev.size(); k += 2)
        next.push_back({prev[k].first, k + 1 < prev.size() ? prev[k + 1].last : prev[k].last});
      out.push_back(std::move(next));
    }
    return out;
  }
};
static_assert(growth_policy<doubling>);

}  // namespace lwcl::policies::curriculum
