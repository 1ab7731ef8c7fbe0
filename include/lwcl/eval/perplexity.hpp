#pragma once
// Perplexity of a decoder LM over a token stream with the sliding-window protocol: each window scores
// the next `stride` targets and feeds the model up to seq_len input tokens ending just before its last
// target, so every token after the first is predicted exactly once and each scored target sees at
// least seq_len - stride + 1 tokens of context (or the whole prefix). Every result carries its
// protocol (split, seq_len, stride, tokens).

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/model/transformer.hpp"

namespace lwcl::eval {

struct perplexity_result {
  double nll_sum = 0;  // natural-log loss summed over the scored tokens
  index_t tokens = 0;  // scored tokens
  index_t seq_len = 0, stride = 0;
  std::string split;
  std::string sample;  // a held-out sample's protocol (eval/held_out.hpp); empty for a sliding window

  double mean_nll() const { return tokens ? nll_sum / static_cast<double>(tokens) : 0.0; }
  double perplexity() const { return std::exp(mean_nll()); }
  std::string protocol() const {
    if (!sample.empty()) return sample;
    char buf[160];
    std::snprintf(buf, sizeof buf, "split=%s seq_len=%lld stride=%lld tokens=%lld", split.empty() ? "-" : split.c_str(),
                  static_cast<long long>(seq_len), static_cast<long long>(stride), static_cast<long long>(tokens));
    return buf;
  }
};

template <class Backend>
perplexity_result perplexity(model::transformer<Backend>& net, const std::vector<std::int32_t>& ids, index_t seq_len,
                             index_t stride, std::string split = {}) {
  check(seq_len >= 1 && seq_len <= net.config().max_seq, "perplexity: seq_len ", seq_len, " must be in [1, ",
        net.config().max_seq, "] (the model's max_seq)");
  check(stride >= 1 && stride <= seq_len, "perplexity: stride ", stride, " must be in [1, seq_len = ", seq_len, "]");
  check(ids.size() >= 2, "perplexity: need at least 2 tokens, got ", ids.size());
  perplexity_result r;
  r.seq_len = seq_len;
  r.stride = stride;
  r.split = std::move(split);
  const auto n = static_cast<index_t>(ids.size());
  std::vector<std::int32_t> inp, tgt;
  // Each window is copied into backend memory (a plain copy on the host backend).
  auto& be = net.backend();
  buffer<Backend> dinp(be, static_cast<std::size_t>(seq_len) * sizeof(std::int32_t)), dtgt(be, dinp.bytes());
  for (index_t lo = 1; lo < n; lo += stride) {  // this window scores target positions [lo, hi)
    const index_t hi = std::min(lo + stride, n);
    const index_t start = std::max<index_t>(0, hi - 1 - seq_len);  // inputs [start, hi - 1) predict [start + 1, hi)
    const index_t len = hi - 1 - start;
    inp.assign(ids.begin() + start, ids.begin() + hi - 1);
    tgt.assign(static_cast<std::size_t>(len), -1);
    for (index_t t = 0; t < len; ++t)
      if (start + t + 1 >= lo) tgt[static_cast<std::size_t>(t)] = ids[static_cast<std::size_t>(start + t + 1)];
    const index_t count = hi - lo;
    be.from_host(dinp.data(), inp.data(), inp.size() * sizeof(std::int32_t));
    be.from_host(dtgt.data(), tgt.data(), tgt.size() * sizeof(std::int32_t));
    const double mean = net.forward(tensor(dinp.data(), dtype::i32, {1, len}), tensor(dtgt.data(), dtype::i32, {1, len}));
    check(std::isfinite(mean), "perplexity: non-finite loss in the window scoring tokens [", lo, ", ", hi, ")");
    r.nll_sum += mean * static_cast<double>(count);
    r.tokens += count;
  }
  return r;
}

}  // namespace lwcl::eval
