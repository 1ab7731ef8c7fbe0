#pragma once
// GeLaCo's genome (evolutionary layer collapse, arXiv 2507.10059; the encoding of its public
// reimplementation) for a teacher of L layers: L triples (b, e, a) of real genes in [0, 1], then one merge
// weight alpha per teacher layer, 4L genes in all. Triple i proposes collapsing teacher layers
// floor(b L) .. floor(e L) (ends swapped when e < b) into the first of them when its flag is set (a >= 0.5).
// Proposals apply in genome order; one that spans a single layer, or touches a layer an earlier effective
// proposal already collapsed, is a no-op. The effective proposals sorted by their first layer are the
// genome's canonical form: genomes with the same form and the same alphas on the merged layers make the
// same student, and the fitness cache keys on key().

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"

namespace lwcl::gelaco {

// Teacher layers [first, last] (last > first) become one student layer.
struct collapse_span {
  index_t first = 0, last = 0;
  bool operator==(const collapse_span&) const = default;
};

struct decoded_genome {
  index_t teacher_layers = 0;
  std::vector<collapse_span> spans;  // canonical: the effective proposals, by first layer
  std::vector<double> alpha;         // per teacher layer: its weight in the merge into its span's first layer
  // Student layer i stands for teacher layers [boundaries[i], boundaries[i + 1]) (model/layer_map.hpp).
  std::vector<index_t> boundaries;

  index_t student_layers() const { return static_cast<index_t>(boundaries.size()) - 1; }
  index_t removed_layers() const { return teacher_layers - student_layers(); }
  // The canonical form as text: "1-3:0.5,0.25;6-7:1" (spans and the alphas of their merged layers, 6
  // significant digits), "-" when nothing is collapsed.
  std::string key() const {
    std::string k;
    char buf[32];
    for (const auto& s : spans) {
      if (!k.empty()) k += ';';
      k += std::to_string(s.first) + "-" + std::to_string(s.last) + ":";
      for (index_t l = s.first + 1; l <= s.last; ++l) {
        std::snprintf(buf, sizeof buf, "%s%.6g", l == s.first + 1 ? "" : ",", alpha[static_cast<std::size_t>(l)]);
        k += buf;
      }
    }
    return k.empty() ? "-" : k;
  }
};

inline index_t gene_count(index_t teacher_layers) { return 4 * teacher_layers; }

// The layer a gene in [0, 1] names: floor(g L), with g = 1 naming the last layer.
inline index_t gene_layer(double g, index_t teacher_layers) {
  const auto l = static_cast<index_t>(std::floor(g * static_cast<double>(teacher_layers)));
  return std::clamp<index_t>(l, 0, teacher_layers - 1);
}

// The student that collapses `spans` (disjoint, each of two layers or more, in any order) with merge
// weights `alpha` (one per teacher layer, in [0, 1]), as decode() would give it.
inline decoded_genome from_spans(std::vector<collapse_span> spans, std::vector<double> alpha, index_t teacher_layers) {
  check(static_cast<index_t>(alpha.size()) == teacher_layers, "gelaco: ", alpha.size(), " merge weights for ",
        teacher_layers, " layers");
  for (std::size_t i = 0; i < alpha.size(); ++i)
    check(std::isfinite(alpha[i]) && alpha[i] >= 0 && alpha[i] <= 1, "gelaco: the merge weight of layer ", i, " is ",
          alpha[i], ", expected a value in [0, 1]");
  std::sort(spans.begin(), spans.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  for (std::size_t i = 0; i < spans.size(); ++i) {
    check(0 <= spans[i].first && spans[i].first < spans[i].last && spans[i].last < teacher_layers, "gelaco: span [",
          spans[i].first, ", ", spans[i].last, "] is not two or more of the teacher's ", teacher_layers, " layers");
    if (i > 0)  // (check's message arguments are evaluated whatever the condition)
      check(spans[i].first > spans[i - 1].last, "gelaco: spans [", spans[i - 1].first, ", ", spans[i - 1].last, "] and [",
            spans[i].first, ", ", spans[i].last, "] overlap");
  }
  decoded_genome d;
  d.teacher_layers = teacher_layers;
  d.spans = std::move(spans);
  d.alpha = std::move(alpha);
  std::size_t next = 0;
  for (index_t l = 0; l < teacher_layers;) {
    d.boundaries.push_back(l);
    if (next < d.spans.size() && d.spans[next].first == l) {
      l = d.spans[next].last + 1;
      ++next;
    } else {
      ++l;
    }
  }
  d.boundaries.push_back(teacher_layers);
  return d;
}

inline decoded_genome decode(std::span<const double> genes, index_t teacher_layers) {
  check(teacher_layers >= 1, "gelaco: a teacher of ", teacher_layers, " layers");
  check(static_cast<index_t>(genes.size()) == gene_count(teacher_layers), "gelaco: a genome of ", genes.size(),
        " genes for a teacher of ", teacher_layers, " layers, expected ", gene_count(teacher_layers),
        " (L triples (b, e, a), then L merge weights)");
  for (std::size_t i = 0; i < genes.size(); ++i)
    check(std::isfinite(genes[i]) && genes[i] >= 0 && genes[i] <= 1, "gelaco: gene ", i, " is ", genes[i],
          ", expected a value in [0, 1]");
  const auto L = static_cast<std::size_t>(teacher_layers);
  decoded_genome d;
  d.teacher_layers = teacher_layers;
  d.alpha.assign(genes.begin() + static_cast<std::ptrdiff_t>(3 * L), genes.end());
  std::vector<char> taken(L, 0);
  for (std::size_t i = 0; i < L; ++i) {
    if (genes[3 * i + 2] < 0.5) continue;
    index_t b = gene_layer(genes[3 * i], teacher_layers), e = gene_layer(genes[3 * i + 1], teacher_layers);
    if (e < b) std::swap(b, e);
    if (e == b) continue;
    bool overlaps = false;
    for (index_t l = b; l <= e; ++l) overlaps = overlaps || taken[static_cast<std::size_t>(l)];
    if (overlaps) continue;
    for (index_t l = b; l <= e; ++l) taken[static_cast<std::size_t>(l)] = 1;
    d.spans.push_back({b, e});
  }
  std::sort(d.spans.begin(), d.spans.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  return from_spans(std::move(d.spans), std::move(d.alpha), teacher_layers);
}

// Genes that decode() turns back into `d` (its spans and merge weights): triple i proposes span i with
// its ends at the middle of their layers' gene intervals and its flag set; the other triples are unset.
// For starting a search from a known student (a baseline's layer map).
inline std::vector<double> genes_of(const decoded_genome& d) {
  const auto L = static_cast<std::size_t>(d.teacher_layers);
  check(L >= 1 && d.alpha.size() == L && d.spans.size() <= L, "gelaco: genes_of: a genome of ", d.spans.size(),
        " spans and ", d.alpha.size(), " merge weights for ", L, " layers");
  std::vector<double> g(4 * L, 0.0);
  const auto mid = [&](index_t layer) { return (static_cast<double>(layer) + 0.5) / static_cast<double>(L); };
  for (std::size_t i = 0; i < d.spans.size(); ++i) {
    g[3 * i] = mid(d.spans[i].first);
    g[3 * i + 1] = mid(d.spans[i].last);
    g[3 * i + 2] = 1.0;
  }
  std::copy(d.alpha.begin(), d.alpha.end(), g.begin() + static_cast<std::ptrdiff_t>(3 * L));
  return g;
}

}  // namespace lwcl::gelaco
