#pragma once
// uniform<N>: segments of N consecutive layers from the front; when N does not divide the layer count
// the last segment is shorter. uniform<1> is plain layer-wise training, the default segmentation.
// sized: the same with the segment size a runtime number (a sweep over sizes compiles one pipeline).

#include <string_view>
#include <vector>

#include "lwcl/policies/segmentation/concept.hpp"
#include "lwcl/policies/name.hpp"

namespace lwcl::policies::segmentation {

namespace detail {
struct uniform_head {
  static constexpr std::string_view name = "uniform";
};
}  // namespace detail

template <int N>
struct uniform {
  static_assert(N >= 1, "segmentation::uniform<N>: N is the number of layers per segment, at least 1");
  static constexpr std::string_view name =
      policies::detail::template_name<detail::uniform_head, policies::detail::decimal_name<N>>::value;

  std::vector<segment> segments(const model::model_config& m) const {
    auto segs = uniform_segments(m.n_layers(), N, name);
    check_tiling(segs, m.n_layers(), name);
    return segs;
  }
};
static_assert(segmentation_policy<uniform<1>>);
static_assert(uniform<12>::name == "uniform<12>");

struct sized {
  static constexpr std::string_view name = "sized";

  index_t layers = 1;  // per segment

  std::vector<segment> segments(const model::model_config& m) const {
    auto segs = uniform_segments(m.n_layers(), layers, name);
    check_tiling(segs, m.n_layers(), name);
    return segs;
  }
};
static_assert(segmentation_policy<sized>);

}  // namespace lwcl::policies::segmentation
