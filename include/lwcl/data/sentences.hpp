#pragma once
// Sentences from plain text, and a fixed held-out pool of them drawn over every document of a split:
// what encoder students are judged on (sentence embeddings against the teacher's). A sentence ends at
// '.', '!' or '?' (with any closing quotes or brackets after it) followed by white space, or at a blank
// line; line breaks inside a paragraph are spaces. No randomness: the same documents and size give the
// same pool.

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lwcl/core/error.hpp"

namespace lwcl::data {

// The sentences of `text`, white space collapsed to single spaces, in order.
inline std::vector<std::string> split_sentences(std::string_view text) {
  std::vector<std::string> out;
  std::string cur;
  auto flush = [&] {
    while (!cur.empty() && cur.back() == ' ') cur.pop_back();
    if (!cur.empty()) out.push_back(std::move(cur));
    cur.clear();
  };
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (space(c)) {
      // A blank line (two line breaks with only spaces between) ends a paragraph, and so a sentence.
      if (c == '\n') {
        std::size_t j = i + 1;
        while (j < text.size() && (text[j] == ' ' || text[j] == '\t' || text[j] == '\r')) ++j;
        if (j < text.size() && text[j] == '\n') {
          flush();
          i = j;
          continue;
        }
      }
      if (!cur.empty() && cur.back() != ' ') cur += ' ';
      continue;
    }
    cur += c;
    if (c == '.' || c == '!' || c == '?') {
      std::size_t j = i + 1;
      while (j < text.size() && (text[j] == '"' || text[j] == '\'' || text[j] == ')' || text[j] == ']')) cur += text[j++];
      if (j >= text.size() || space(text[j])) flush();
      i = j - 1;
    }
  }
  flush();
  return out;
}

// Words of a sentence (runs of non-spaces).
inline std::size_t word_count(std::string_view s) {
  std::size_t n = 0;
  bool in = false;
  for (const char c : s) {
    const bool w = c != ' ';
    n += w && !in;
    in = w;
  }
  return n;
}

struct sentence_pool {
  std::vector<std::string> sentences;
  std::vector<std::size_t> document;  // the document each sentence came from
  std::size_t documents = 0, candidates = 0;
  std::string split;
  std::size_t min_words = 0, max_words = 0;

  std::string protocol() const {
    return "split=" + split + " pool=" + std::to_string(sentences.size()) + " sentences of " + std::to_string(min_words) +
           "-" + std::to_string(max_words) + " words over all " + std::to_string(documents) +
           " documents (by sentence count, at least 1 each, evenly spaced) of " + std::to_string(candidates);
  }
};

// `n` sentences of min_words to max_words words from `docs` (the texts of one split), shared among the
// documents in proportion to their sentences that qualify (largest remainders, at least one each) and
// taken evenly spaced within each document, its first and last included.
inline sentence_pool held_out_sentences(const std::vector<std::string>& docs, std::size_t n, std::string split,
                                        std::size_t min_words = 6, std::size_t max_words = 60) {
  check(!docs.empty(), "held_out_sentences: the ", split, " split has no documents");
  check(min_words >= 1 && max_words >= min_words, "held_out_sentences: words ", min_words, "-", max_words,
        ", expected 1 <= min <= max");
  std::vector<std::vector<std::string>> per;
  std::size_t total = 0;
  for (const auto& d : docs) {
    std::vector<std::string> keep;
    for (auto& s : split_sentences(d)) {
      const auto w = word_count(s);
      if (w >= min_words && w <= max_words) keep.push_back(std::move(s));
    }
    total += keep.size();
    per.push_back(std::move(keep));
  }
  for (std::size_t k = 0; k < per.size(); ++k)
    check(!per[k].empty(), "held_out_sentences: document ", k, " of the ", split, " split has no sentence of ", min_words,
          "-", max_words, " words");
  check(n >= per.size() && n <= total, "held_out_sentences: a pool of ", n, " sentences from ", per.size(),
        " documents holding ", total, " candidates; expected between ", per.size(), " and ", total);
  // Proportional shares of n (largest remainders), at least one each: a document that the floor left
  // at zero takes one back from the largest share.
  std::vector<std::size_t> take(per.size());
  std::vector<std::pair<double, std::size_t>> rem;
  std::size_t given = 0;
  for (std::size_t k = 0; k < per.size(); ++k) {
    const double share = static_cast<double>(n) * static_cast<double>(per[k].size()) / static_cast<double>(total);
    take[k] = std::max<std::size_t>(1, std::min(static_cast<std::size_t>(share), per[k].size()));
    given += take[k];
    rem.emplace_back(share - static_cast<double>(take[k]), k);
  }
  std::stable_sort(rem.begin(), rem.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (std::size_t r = 0; given < n; r = (r + 1) % rem.size()) {
    const std::size_t k = rem[r].second;
    if (take[k] < per[k].size()) {
      ++take[k];
      ++given;
    }
  }
  while (given > n) {
    const auto k = static_cast<std::size_t>(std::max_element(take.begin(), take.end()) - take.begin());
    --take[k];
    --given;
  }
  sentence_pool pool;
  pool.documents = per.size();
  pool.candidates = total;
  pool.split = std::move(split);
  pool.min_words = min_words;
  pool.max_words = max_words;
  for (std::size_t k = 0; k < per.size(); ++k) {
    const std::size_t m = per[k].size(), t = take[k];
    for (std::size_t i = 0; i < t; ++i) {
      const std::size_t at = t == 1 ? m / 2 : i * (m - 1) / (t - 1);
      pool.sentences.push_back(per[k][at]);
      pool.document.push_back(k);
    }
  }
  return pool;
}

}  // namespace lwcl::data
