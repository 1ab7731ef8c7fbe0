#pragma once
// How close an encoder student's sentence embeddings are to its teacher's over a pool of held-out
// sentences: the cosine between the two embeddings of each sentence (mean and smallest), and top-k
// neighbour agreement, the share of each sentence's k nearest neighbours in the pool (by cosine,
// itself left out) under the teacher that are also among its k nearest under the student, averaged
// over the pool. Embeddings need not be normalised.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <numeric>
#include <string>
#include <vector>

#include "lwcl/core/error.hpp"

namespace lwcl::eval {

struct embedding_agreement {
  double mean_cosine = 0, min_cosine = 0;
  double topk_agreement = 0;  // in [0, 1]
  std::size_t k = 0, sentences = 0;
};

namespace agreement_detail {

inline std::vector<std::vector<double>> unit_rows(const std::vector<std::vector<double>>& e, const char* who) {
  std::vector<std::vector<double>> out = e;
  for (std::size_t i = 0; i < out.size(); ++i) {
    double n = 0;
    for (const double x : out[i]) n += x * x;
    check(n > 0 && std::isfinite(n), "embedding_agreement: the ", who, "'s embedding of sentence ", i, " has norm ",
          std::sqrt(n));
    const double inv = 1 / std::sqrt(n);
    for (double& x : out[i]) x *= inv;
  }
  return out;
}

// The k nearest rows of `u` to row i by dot product (u's rows unit), i itself left out; ties by index.
inline std::vector<std::size_t> nearest(const std::vector<std::vector<double>>& u, std::size_t i, std::size_t k) {
  std::vector<std::pair<double, std::size_t>> sims;
  sims.reserve(u.size() - 1);
  for (std::size_t j = 0; j < u.size(); ++j) {
    if (j == i) continue;
    sims.emplace_back(std::inner_product(u[i].begin(), u[i].end(), u[j].begin(), 0.0), j);
  }
  std::partial_sort(sims.begin(), sims.begin() + static_cast<std::ptrdiff_t>(k), sims.end(),
                    [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  std::vector<std::size_t> out;
  for (std::size_t r = 0; r < k; ++r) out.push_back(sims[r].second);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace agreement_detail

inline embedding_agreement compare_embeddings(const std::vector<std::vector<double>>& teacher,
                                              const std::vector<std::vector<double>>& student, std::size_t k = 10) {
  check(teacher.size() == student.size(), "embedding_agreement: ", teacher.size(), " teacher embeddings and ",
        student.size(), " student ones, expected one each per sentence");
  check(k >= 1 && teacher.size() > k, "embedding_agreement: top-", k, " neighbours need more than ", k,
        " sentences, got ", teacher.size());
  for (std::size_t i = 0; i < teacher.size(); ++i)
    check(teacher[i].size() == student[i].size() && !teacher[i].empty(), "embedding_agreement: sentence ", i,
          " has a teacher embedding of ", teacher[i].size(), " values and a student one of ", student[i].size());
  const auto t = agreement_detail::unit_rows(teacher, "teacher");
  const auto s = agreement_detail::unit_rows(student, "student");
  embedding_agreement r;
  r.k = k;
  r.sentences = t.size();
  r.min_cosine = 2;
  double shared = 0;
  for (std::size_t i = 0; i < t.size(); ++i) {
    const double c = std::inner_product(t[i].begin(), t[i].end(), s[i].begin(), 0.0);
    r.mean_cosine += c;
    r.min_cosine = std::min(r.min_cosine, c);
    const auto a = agreement_detail::nearest(t, i, k), b = agreement_detail::nearest(s, i, k);
    std::vector<std::size_t> both;
    std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
    shared += static_cast<double>(both.size());
  }
  r.mean_cosine /= static_cast<double>(t.size());
  r.topk_agreement = shared / static_cast<double>(k * t.size());
  return r;
}

}  // namespace lwcl::eval
