#pragma once
// A curriculum phase: one pass over a segmentation in which every segment is trained once, in an order
// the curriculum picks, on inputs that follow the curriculum's schedule. A curriculum policy turns the
// segmentation's stages into a list of phases; the trainer runs them in turn.

#include <cstddef>
#include <string_view>
#include <vector>

#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/policies/segmentation/segment.hpp"

namespace lwcl::policies {

struct curriculum_phase {
  std::size_t index = 0;          // position in the curriculum's list; the curriculum dispatches on it
  std::vector<segment> segments;  // this phase's segmentation
  // Whether some step of the phase reads student input features. When false every segment trains on
  // teacher features alone, so the segments are independent: any order, or in parallel.
  bool student_inputs = false;
  // Whether the visiting order needs each segment's measured difficulty (its initial local loss).
  bool needs_difficulty = false;
  std::string_view order;   // the order policy's name, for reports
  std::string_view inputs;  // the input schedule's name, for reports
};

// Throws lwcl::error naming `who` unless `order` visits every index of [0, n) exactly once.
inline void check_permutation(const std::vector<index_t>& order, index_t n, std::string_view who) {
  check(static_cast<index_t>(order.size()) == n, who, ": visiting order has ", order.size(),
        " entries, expected one per segment (", n, ")");
  std::vector<bool> seen(static_cast<std::size_t>(n), false);
  for (index_t k : order) {
    check(k >= 0 && k < n, who, ": visiting order names segment ", k, ", outside [0, ", n, ")");
    check(!seen[static_cast<std::size_t>(k)], who, ": visiting order names segment ", k, " twice");
    seen[static_cast<std::size_t>(k)] = true;
  }
}

}  // namespace lwcl::policies
