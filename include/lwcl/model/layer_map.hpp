#pragma once
// The layer map between a compressed student and its teacher, as boundaries: student layer i replaces
// teacher layers [b[i], b[i + 1]). b[0] = 0, since both read the same embeddings, and b[L] is the
// teacher's layer count, since both feed the same final norm and head. Width pruning keeps {0, 1, ..., L};
// a student with layers removed or merged maps each of its layers to a run of teacher layers.

#include <string_view>
#include <vector>

#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"

namespace lwcl::model {

// {0, 1, ..., L}.
inline std::vector<index_t> identity_boundaries(index_t layers) {
  std::vector<index_t> b(static_cast<std::size_t>(layers) + 1);
  for (index_t i = 0; i <= layers; ++i) b[static_cast<std::size_t>(i)] = i;
  return b;
}

// The map of a student made of the teacher layers `kept` (ascending): each kept layer replaces itself
// and the removed layers after it, the first also those before it. So a segment learns to absorb the
// layers removed inside it.
inline std::vector<index_t> boundaries_of_kept_layers(const std::vector<index_t>& kept, index_t teacher_layers) {
  check(!kept.empty(), "boundaries_of_kept_layers: no kept layers");
  std::vector<index_t> b{0};
  for (std::size_t i = 1; i < kept.size(); ++i) {
    check(kept[i] > kept[i - 1], "boundaries_of_kept_layers: kept layers must rise strictly, ", kept[i - 1], " then ", kept[i]);
    b.push_back(kept[i]);
  }
  check(kept.back() < teacher_layers, "boundaries_of_kept_layers: kept layer ", kept.back(), " of a teacher of ",
        teacher_layers, " layers");
  b.push_back(teacher_layers);
  return b;
}

// Throws lwcl::error naming `who` unless `b` is a boundary map for a student of student_layers layers
// and (when teacher_layers >= 0) a teacher of teacher_layers layers.
inline void check_boundary_map(const std::vector<index_t>& b, index_t student_layers, index_t teacher_layers,
                               std::string_view who) {
  check(static_cast<index_t>(b.size()) == student_layers + 1, who, ": the layer map has ", b.size(),
        " boundaries for a student of ", student_layers, " layers, expected ", student_layers + 1,
        " (student layer i replaces teacher layers [b[i], b[i+1]))");
  check(b.front() == 0, who, ": the layer map starts at teacher boundary ", b.front(),
        ", expected 0 (student and teacher read the same embeddings)");
  for (std::size_t i = 1; i < b.size(); ++i)
    check(b[i] > b[i - 1], who, ": the layer map must rise strictly, boundary ", i - 1, " is ", b[i - 1], " and boundary ",
          i, " is ", b[i]);
  if (teacher_layers >= 0)
    check(b.back() == teacher_layers, who, ": the layer map ends at teacher boundary ", b.back(), ", expected ",
          teacher_layers, ", the teacher's layer count (student and teacher feed the same final norm and head)");
}

}  // namespace lwcl::model
