#pragma once
// A fixed held-out sample that covers every document of a split, and the perplexity over it. A split's
// token stream joins its documents with an end-of-text id; the sample takes windows of window + 1
// tokens (window predictions each) from every document: `total` windows in all, shared among the
// documents in proportion to their lengths (largest remainders, at least one each), evenly spaced from
// each document's start to its end, none crossing a document boundary. A document shorter than
// window + 1 tokens gives one window of its whole length. No randomness: the same split, window and
// total always give the same sample, whatever the model.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/data/shards.hpp"
#include "lwcl/eval/perplexity.hpp"
#include "lwcl/model/tokenizer/byte_bpe.hpp"
#include "lwcl/model/transformer.hpp"

namespace lwcl::eval {

// [begin, end) token positions of one document in a split's stream, separators left out.
struct document_span {
  std::size_t begin = 0, end = 0;
  std::size_t size() const { return end - begin; }
};

// The documents of `ids`, split at every `end_of_text`; empty documents (two separators in a row, or
// one at either end) are dropped.
inline std::vector<document_span> split_documents(const std::vector<std::int32_t>& ids, std::int32_t end_of_text) {
  std::vector<document_span> docs;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= ids.size(); ++i) {
    if (i < ids.size() && ids[i] != end_of_text) continue;
    if (i > start) docs.push_back({start, i});
    start = i + 1;
  }
  return docs;
}

// The id of <|endoftext|>, which joins a split's documents, in the byte-level BPE vocabulary of
// `tokenizer_dir` (vocab.json and merges.txt, as experiments/prepare_data writes them).
inline std::int32_t end_of_text_id(const std::string& tokenizer_dir) {
  const auto bpe = tokenizer::byte_bpe::from_files(tokenizer_dir + "/vocab.json", tokenizer_dir + "/merges.txt");
  const auto id = bpe.token_id("<|endoftext|>");
  check(id.has_value(), "held-out sample: the vocabulary in '", tokenizer_dir, "' has no <|endoftext|> token, which joins "
        "the documents of a split");
  return *id;
}

struct held_out_sample {
  std::string split;
  index_t window = 0;                               // predictions per full window
  std::vector<document_span> documents;             // the split's documents
  std::vector<std::vector<std::int32_t>> windows;   // each window's tokens (window + 1, or a short document)
  std::vector<std::size_t> document_of;             // the document each window comes from

  index_t predicted_tokens() const {
    index_t n = 0;
    for (const auto& w : windows) n += static_cast<index_t>(w.size()) - 1;
    return n;
  }
  std::string protocol() const {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "split=%s sample=%zu windows of %lld over all %zu documents (by length, at least 1 each, evenly "
                  "spaced) tokens=%lld",
                  split.c_str(), windows.size(), static_cast<long long>(window), documents.size(),
                  static_cast<long long>(predicted_tokens()));
    return buf;
  }
};

// The sample of `total` windows over every document of `ids` (see the header comment).
inline held_out_sample make_held_out_sample(const std::vector<std::int32_t>& ids, std::int32_t end_of_text, index_t window,
                                            std::size_t total, std::string split) {
  check(window >= 1, "held-out sample: window ", window, ", expected at least 1 token");
  held_out_sample s;
  s.split = std::move(split);
  s.window = window;
  for (const auto& d : split_documents(ids, end_of_text))
    if (d.size() >= 2) s.documents.push_back(d);  // one token predicts nothing
  check(!s.documents.empty(), "held-out sample: the ", s.split, " split has no document of 2 tokens or more");
  check(total >= s.documents.size(), "held-out sample: ", total, " windows cannot cover the ", s.split, " split's ",
        s.documents.size(), " documents; ask for at least one window per document");
  // Largest remainders: floor of each document's share of the windows left after one each, then the
  // rest to the largest fractional parts (ties to the earlier document).
  const std::size_t D = s.documents.size();
  double length = 0;
  for (const auto& d : s.documents) length += static_cast<double>(d.size());
  std::vector<std::size_t> count(D, 1);
  std::vector<double> frac(D);
  std::size_t given = D;
  const double spare = static_cast<double>(total - D);
  for (std::size_t k = 0; k < D; ++k) {
    const double share = spare * static_cast<double>(s.documents[k].size()) / length;
    count[k] += static_cast<std::size_t>(std::floor(share));
    given += static_cast<std::size_t>(std::floor(share));
    frac[k] = share - std::floor(share);
  }
  std::vector<std::size_t> order(D);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return frac[a] > frac[b]; });
  for (std::size_t i = 0; given < total; ++i, ++given) ++count[order[i % D]];
  const auto span = static_cast<std::size_t>(window) + 1;
  for (std::size_t k = 0; k < D; ++k) {
    const auto& d = s.documents[k];
    if (d.size() <= span) {  // a short document: once, whole
      s.windows.emplace_back(ids.begin() + static_cast<std::ptrdiff_t>(d.begin), ids.begin() + static_cast<std::ptrdiff_t>(d.end));
      s.document_of.push_back(k);
      continue;
    }
    const std::size_t last_start = d.size() - span;
    const std::size_t n = std::min(count[k], last_start + 1);  // no window twice
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t at = d.begin + (n == 1 ? 0 : j * last_start / (n - 1));
      s.windows.emplace_back(ids.begin() + static_cast<std::ptrdiff_t>(at), ids.begin() + static_cast<std::ptrdiff_t>(at + span));
      s.document_of.push_back(k);
    }
  }
  return s;
}

// The sample of a split of a prepared data folder (experiments/prepare_data writes it): the documents of
// `<data_dir>/<split>.bin`, joined by the end of text of `<data_dir>/tokenizer`, in `tokens / window`
// windows (at least 1, and at least one per document). A caller sampling several splits may read the end
// of text once (end_of_text_id) and pass it.
inline held_out_sample held_out_split(const std::string& data_dir, const std::string& split, index_t window,
                                      index_t tokens, std::int32_t end_of_text) {
  check(window >= 1 && tokens >= 0, "held-out sample of '", split, "': window ", window, " and tokens ", tokens,
        ", expected a window of at least 1 token");
  const auto ids = data::read_tokens(data_dir + "/" + split + ".bin", std::numeric_limits<std::uint64_t>::max());
  return make_held_out_sample(ids, end_of_text, window, static_cast<std::size_t>(std::max<index_t>(1, tokens / window)),
                              split);
}
inline held_out_sample held_out_split(const std::string& data_dir, const std::string& split, index_t window,
                                      index_t tokens) {
  return held_out_split(data_dir, split, window, tokens, end_of_text_id(data_dir + "/tokenizer"));
}

// n batches of B full windows' first T tokens, the windows taken evenly over the sample (so over its
// documents): inputs for the cumulative error curve. T must not exceed the sample's window.
inline std::vector<std::vector<std::int32_t>> sample_batches(const held_out_sample& s, index_t B, index_t T, index_t n) {
  check(B > 0 && T > 0 && n >= 0 && T <= s.window, "sample_batches: B ", B, ", T ", T, ", n ", n,
        " (T at most the sample's window ", s.window, ")");
  std::vector<std::size_t> full;
  for (std::size_t k = 0; k < s.windows.size(); ++k)
    if (s.windows[k].size() >= static_cast<std::size_t>(T)) full.push_back(k);
  const auto want = static_cast<std::size_t>(B * n);
  check(full.size() >= want, "sample_batches: the ", s.split, " sample has ", full.size(), " windows of ", T,
        " tokens, fewer than ", n, " batches of ", B);
  std::vector<std::vector<std::int32_t>> out(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < want; ++i) {
    const auto& w = s.windows[full[i * full.size() / want]];
    out[i / static_cast<std::size_t>(B)].insert(out[i / static_cast<std::size_t>(B)].end(), w.begin(), w.begin() + T);
  }
  return out;
}

// Perplexity over the sample: each window predicts its tokens 1 .. n - 1 from the window's own earlier
// tokens (no context from outside it); every prediction weighs the same.
template <class Backend>
perplexity_result perplexity(model::transformer<Backend>& net, const held_out_sample& s) {
  check(s.window >= 1 && s.window <= net.config().max_seq, "perplexity: the sample's window ", s.window,
        " must be in [1, ", net.config().max_seq, "] (the model's max_seq)");
  perplexity_result r;
  r.seq_len = r.stride = s.window;
  r.split = s.split;
  r.sample = s.protocol();
  auto& be = net.backend();
  buffer<Backend> dinp(be, static_cast<std::size_t>(s.window) * sizeof(std::int32_t)), dtgt(be, dinp.bytes());
  for (std::size_t k = 0; k < s.windows.size(); ++k) {
    const auto& w = s.windows[k];
    const auto len = static_cast<index_t>(w.size()) - 1;
    be.from_host(dinp.data(), w.data(), static_cast<std::size_t>(len) * sizeof(std::int32_t));
    be.from_host(dtgt.data(), w.data() + 1, static_cast<std::size_t>(len) * sizeof(std::int32_t));
    const double mean = net.forward(tensor(dinp.data(), dtype::i32, {1, len}), tensor(dtgt.data(), dtype::i32, {1, len}));
    check(std::isfinite(mean), "perplexity: non-finite loss on window ", k, " of the ", s.split, " sample (document ",
          s.document_of[k], ")");
    r.nll_sum += mean * static_cast<double>(len);
    r.tokens += len;
  }
  return r;
}

}  // namespace lwcl::eval
