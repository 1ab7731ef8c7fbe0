#pragma once
// A segment: a contiguous run of student layers [first, last) trained as one local task. Every
// segmentation policy returns segments that tile [0, L) exactly, in order; check_tiling enforces it
// so that no layer is trained twice or forgotten.

#include <string_view>
#include <vector>

#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"

namespace lwcl::policies {

struct segment {
  index_t first = 0;
  index_t last = 0;  // one past the segment's last layer

  index_t size() const { return last - first; }
  friend bool operator==(const segment&, const segment&) = default;
};

// One segmentation per stage of a curriculum whose segments grow (a single stage otherwise).
using segment_stages = std::vector<std::vector<segment>>;

// Throws lwcl::error naming `who` unless `segs` is non-empty and its segments are non-empty, in order,
// and cover [0, n_layers) without gap or overlap.
inline void check_tiling(const std::vector<segment>& segs, index_t n_layers, std::string_view who) {
  check(n_layers > 0, who, ": the model has no layers to segment");
  check(!segs.empty(), who, ": returned no segments, expected segments covering layers [0, ", n_layers, ")");
  index_t next = 0;
  for (std::size_t k = 0; k < segs.size(); ++k) {
    const segment& s = segs[k];
    check(s.first == next, who, ": segment ", k, " is [", s.first, ", ", s.last, "), expected it to start at layer ",
          next, " so that segments tile [0, ", n_layers, ") in order");
    check(s.last > s.first, who, ": segment ", k, " is [", s.first, ", ", s.last, "), expected at least one layer");
    next = s.last;
  }
  check(next == n_layers, who, ": segments end at layer ", next, ", expected them to cover all ", n_layers, " layers");
}

// Segments of `size` layers from the front, the last one shorter when size does not divide n_layers.
inline std::vector<segment> uniform_segments(index_t n_layers, index_t size, std::string_view who) {
  check(n_layers > 0, who, ": the model has no layers to segment");
  check(size >= 1, who, ": segment size is ", size, ", expected at least 1 layer");
  std::vector<segment> out;
  for (index_t a = 0; a < n_layers; a += size) out.push_back({a, a + size < n_layers ? a + size : n_layers});
  return out;
}

}  // namespace lwcl::policies
