#pragma once
// Zero-shot multiple-choice evaluation of a decoder LM with lm-eval-harness's protocol: each choice is a
// log-likelihood request (context, " " + choice) scored by the summed log-probability of its
// continuation tokens; acc takes the argmax of the sums, acc_norm the argmax of the sums divided by
// each choice's length in characters; both are reported with the standard error of the mean. Items come
// in the jsonl layout lm-eval reads for such tasks (context or query, choices, gold). The choices of an
// item share their context: it runs once through a key/value cache and each choice continues from it
// (f32 and f64 models; others take one full forward per choice).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/core/error.hpp"
#include "lwcl/model/decode.hpp"
#include "lwcl/model/transformer.hpp"

namespace lwcl::eval {

struct mc_item {
  std::string context;
  std::vector<std::string> choices;
  index_t gold = 0;
};

// Items of a jsonl file: one object per line with "context" (or lm-eval's older "query"), "choices" (a
// non-empty list of strings) and "gold" (an index into choices); blank lines are skipped. `limit` > 0
// reads only the first `limit` items.
inline std::vector<mc_item> read_mc_jsonl(const std::string& path, index_t limit = 0) {
  std::ifstream in(path);
  check(in.good(), "multiple_choice: cannot open '", path, "'");
  std::vector<mc_item> items;
  std::string line;
  for (index_t no = 1; std::getline(in, line); ++no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      fail("multiple_choice: '", path, "' line ", no, " is not JSON: ", e.what());
    }
    check(j.is_object(), "multiple_choice: '", path, "' line ", no, " is not a JSON object");
    mc_item it;
    const char* ctx_key = j.contains("context") ? "context" : "query";
    check(j.contains(ctx_key) && j[ctx_key].is_string(), "multiple_choice: '", path, "' line ", no,
          " has no string 'context' (or 'query')");
    it.context = j[ctx_key].get<std::string>();
    check(j.contains("choices") && j["choices"].is_array(), "multiple_choice: '", path, "' line ", no,
          " has no 'choices' list");
    check(!j["choices"].empty(), "multiple_choice: '", path, "' line ", no, ": 'choices' is empty; expected at least one");
    for (const auto& c : j["choices"]) {
      check(c.is_string(), "multiple_choice: '", path, "' line ", no, ": every choice must be a string");
      it.choices.push_back(c.get<std::string>());
    }
    check(j.contains("gold") && j["gold"].is_number_integer(), "multiple_choice: '", path, "' line ", no,
          " has no integer 'gold'");
    it.gold = j["gold"].get<index_t>();
    check(it.gold >= 0 && it.gold < static_cast<index_t>(it.choices.size()), "multiple_choice: '", path, "' line ", no,
          ": gold ", it.gold, " is not an index into its ", it.choices.size(), " choices");
    items.push_back(std::move(it));
    if (limit > 0 && static_cast<index_t>(items.size()) == limit) break;
  }
  check(!items.empty(), "multiple_choice: '", path, "' holds no item");
  return items;
}

// A request's tokens, encoded as lm-eval's Hugging Face model does: whitespace ending the context moves
// to the front of the continuation, and the continuation's tokens are those of context + continuation
// after the first size(encode(context)) of them (so a merge across the boundary is the model's view).
struct encoded_pair {
  std::vector<std::int32_t> context, continuation;
};

// Where the whitespace ending `s` (UTF-8) begins, by Python's str.isspace, which lm-eval's
// context.rstrip() uses: ASCII space, \t \n \v \f \r, the separators U+001C..U+001F, U+0085, U+00A0,
// U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F and U+3000.
inline std::size_t trailing_whitespace_start(const std::string& s) {
  std::size_t end = s.size();
  const auto at = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  for (;;) {
    if (end >= 1 && (at(end - 1) == ' ' || (at(end - 1) >= 0x09 && at(end - 1) <= 0x0d) ||
                     (at(end - 1) >= 0x1c && at(end - 1) <= 0x1f))) {
      end -= 1;
    } else if (end >= 2 && at(end - 2) == 0xc2 && (at(end - 1) == 0x85 || at(end - 1) == 0xa0)) {
      end -= 2;
    } else if (end >= 3) {
      const unsigned a = at(end - 3), b = at(end - 2), c = at(end - 1);
      const bool space = (a == 0xe1 && b == 0x9a && c == 0x80) ||                         // U+1680
                         (a == 0xe2 && b == 0x80 && ((c >= 0x80 && c <= 0x8a) || c == 0xa8 || c == 0xa9 ||
                                                      c == 0xaf)) ||                      // U+2000..200A, 2028, 2029, 202F
                         (a == 0xe2 && b == 0x81 && c == 0x9f) ||                         // U+205F
                         (a == 0xe3 && b == 0x80 && c == 0x80);                           // U+3000
      if (!space) break;
      end -= 3;
    } else {
      break;
    }
  }
  return end;
}

template <class Tokenizer>
encoded_pair encode_pair(const Tokenizer& tok, std::string context, std::string continuation) {
  const std::size_t end = trailing_whitespace_start(context);
  continuation = context.substr(end) + continuation;
  context.resize(end);
  encoded_pair p;
  p.context = tok.encode(context);
  const auto whole = tok.encode(context + continuation);
  check(whole.size() >= p.context.size(), "multiple_choice: the context encodes to more tokens than context + choice");
  p.continuation.assign(whole.begin() + static_cast<std::ptrdiff_t>(p.context.size()), whole.end());
  return p;
}

// A request the model can score: a context, a continuation of at least one token and at most `window`.
inline void check_request(const encoded_pair& p, index_t window) {
  const auto n_cont = static_cast<index_t>(p.continuation.size());
  check(!p.context.empty(), "multiple_choice: an empty context (give the item some text before its choices)");
  check(n_cont > 0, "multiple_choice: a choice that encodes to no token");
  check(n_cont <= window, "multiple_choice: a continuation of ", n_cont, " tokens, longer than the model's window of ",
        window, " positions");
}

// The summed natural-log probability of p.continuation given p.context, the input cut from the left to
// the model's last max_seq + 1 tokens.
template <class Backend>
double continuation_loglikelihood(model::transformer<Backend>& net, const encoded_pair& p) {
  const auto window = net.config().max_seq;
  const auto n_cont = static_cast<index_t>(p.continuation.size());
  check_request(p, window);
  std::vector<std::int32_t> all(p.context);
  all.insert(all.end(), p.continuation.begin(), p.continuation.end());
  const auto total = static_cast<index_t>(all.size());
  const index_t first = std::max<index_t>(0, total - 1 - window);  // inputs [first, total - 1)
  const index_t len = total - 1 - first;
  std::vector<std::int32_t> inp(all.begin() + first, all.end() - 1), tgt(static_cast<std::size_t>(len), -1);
  for (index_t t = len - n_cont; t < len; ++t) tgt[static_cast<std::size_t>(t)] = all[static_cast<std::size_t>(first + t + 1)];
  auto& be = net.backend();
  buffer<Backend> dinp(be, static_cast<std::size_t>(len) * sizeof(std::int32_t)), dtgt(be, dinp.bytes());
  be.from_host(dinp.data(), inp.data(), inp.size() * sizeof(std::int32_t));
  be.from_host(dtgt.data(), tgt.data(), tgt.size() * sizeof(std::int32_t));
  const double mean = net.forward(tensor(dinp.data(), dtype::i32, {1, len}), tensor(dtgt.data(), dtype::i32, {1, len}));
  check(std::isfinite(mean), "multiple_choice: non-finite loss for a continuation of ", n_cont, " tokens");
  return -mean * static_cast<double>(n_cont);
}

// Scores the choices of one item at a time through a key/value cache: the shared context runs once,
// then each continuation is fed after it (the cache truncated back to the context in between). A choice
// whose context + continuation exceeds the model's window is scored alone on its last max_seq + 1
// tokens, as continuation_loglikelihood does. Equal to continuation_loglikelihood up to rounding
// (tests/eval/test_multiple_choice.cpp).
template <class Backend>
class choice_scorer {
 public:
  explicit choice_scorer(const model::transformer<Backend>& net)
      : net_(net), window_(net.config().max_seq), V_(net.config().vocab), dec_(net, window_) {
    check(net.type() == dtype::f32 || net.type() == dtype::f64, "choice_scorer: the model is ", dtype_name(net.type()),
          "; cached scoring runs f32 or f64 models");
  }

  // The summed natural-log probability of each pair's continuation given its context.
  std::vector<double> score(const std::vector<encoded_pair>& pairs) {
    bool shared = true;
    for (const auto& p : pairs) {
      check_request(p, window_);
      shared = shared && p.context == pairs.front().context &&
               p.context.size() + p.continuation.size() - 1 <= static_cast<std::size_t>(window_);
    }
    std::vector<double> out;
    out.reserve(pairs.size());
    if (shared && !pairs.empty()) {
      const auto& ctx = pairs.front().context;
      const auto n_ctx = static_cast<index_t>(ctx.size());
      dec_.reset();
      fetch(dec_.step(ctx, 1), 1);
      const std::vector<float> after_context(rows_.begin(), rows_.begin() + V_);
      for (const auto& p : pairs) {
        const auto& c = p.continuation;
        double ll = log_prob(after_context.data(), c[0]);
        if (c.size() > 1) {
          dec_.truncate(n_ctx);
          const auto n = static_cast<index_t>(c.size()) - 1;
          fetch(dec_.step(std::vector<std::int32_t>(c.begin(), c.end() - 1)), n);
          for (index_t j = 0; j < n; ++j) ll += log_prob(row(j), c[static_cast<std::size_t>(j + 1)]);
        }
        out.push_back(ll);
      }
      return out;
    }
    for (const auto& p : pairs) {  // each choice alone, its input cut to the window from the left
      std::vector<std::int32_t> all(p.context);
      all.insert(all.end(), p.continuation.begin(), p.continuation.end());
      const auto total = static_cast<index_t>(all.size()), n_cont = static_cast<index_t>(p.continuation.size());
      const index_t first = std::max<index_t>(0, total - 1 - window_);
      dec_.reset();
      fetch(dec_.step(std::vector<std::int32_t>(all.begin() + first, all.end() - 1), n_cont), n_cont);
      double ll = 0;
      for (index_t j = 0; j < n_cont; ++j) ll += log_prob(row(j), p.continuation[static_cast<std::size_t>(j)]);
      out.push_back(ll);
    }
    return out;
  }

 private:
  const float* row(index_t r) const { return rows_.data() + static_cast<std::size_t>(r * V_); }

  // The first `n` rows of a step's logits, as f32 on the host.
  void fetch(const tensor& logits, index_t n) { model::logits_to_host(net_.backend(), logits, 0, n, rows_); }

  // log softmax(logits)[target], in double.
  double log_prob(const float* logits, std::int32_t target) const {
    check(target >= 0 && target < V_, "multiple_choice: token ", target, " is outside the vocabulary of ", V_);
    double m = logits[0];
    for (index_t i = 1; i < V_; ++i) m = std::max(m, static_cast<double>(logits[i]));
    check(std::isfinite(m), "multiple_choice: non-finite logits from the model");
    double z = 0;
    for (index_t i = 0; i < V_; ++i) z += std::exp(static_cast<double>(logits[i]) - m);
    const double lp = static_cast<double>(logits[target]) - m - std::log(z);
    check(std::isfinite(lp), "multiple_choice: a non-finite log-probability for token ", target);
    return lp;
  }

  const model::transformer<Backend>& net_;
  index_t window_, V_;
  model::kv_decoder<Backend> dec_;
  std::vector<float> rows_;
};

// A string's length in characters (UTF-8 code points), as Python's len() counts a choice.
inline index_t utf8_length(const std::string& s) {
  index_t n = 0;
  for (const unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

struct mc_item_score {
  std::vector<double> loglikelihoods;
  index_t pick = 0, pick_norm = 0;
};

struct mc_result {
  std::string task;
  index_t n = 0;
  double acc = 0, acc_stderr = 0, acc_norm = 0, acc_norm_stderr = 0;
  std::vector<mc_item_score> items;

  std::string protocol() const {
    return "task=" + task + " n=" + std::to_string(n) +
           " zero-shot, lm-eval multiple_choice (target delimiter ' ', summed log-likelihood, acc_norm by characters)";
  }
};

// The mean of 0/1 outcomes and its standard error (sample standard deviation / sqrt(n); NaN for n < 2).
inline std::pair<double, double> mean_and_stderr(const std::vector<double>& xs) {
  const double n = static_cast<double>(xs.size());
  double mean = 0;
  for (double x : xs) mean += x;
  mean /= n;
  if (xs.size() < 2) return {mean, std::nan("")};
  double var = 0;
  for (double x : xs) var += (x - mean) * (x - mean);
  return {mean, std::sqrt(var / (n - 1) / n)};
}

// acc and acc_norm from every item's choice log-likelihoods (the first maximum wins a tie).
inline mc_result score_choices(const std::vector<mc_item>& items, const std::vector<std::vector<double>>& lls,
                               std::string task) {
  check(items.size() == lls.size() && !items.empty(), "multiple_choice: ", lls.size(), " scored items for ", items.size(),
        " items");
  mc_result r;
  r.task = std::move(task);
  r.n = static_cast<index_t>(items.size());
  std::vector<double> acc, acc_norm;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const auto& it = items[i];
    check(lls[i].size() == it.choices.size(), "multiple_choice: item ", i, " has ", it.choices.size(), " choices and ",
          lls[i].size(), " scores");
    mc_item_score s;
    s.loglikelihoods = lls[i];
    for (std::size_t c = 1; c < it.choices.size(); ++c) {
      if (lls[i][c] > lls[i][static_cast<std::size_t>(s.pick)]) s.pick = static_cast<index_t>(c);
      const auto norm = [&](std::size_t k) {
        return lls[i][k] / static_cast<double>(std::max<index_t>(1, utf8_length(it.choices[k])));
      };
      if (norm(c) > norm(static_cast<std::size_t>(s.pick_norm))) s.pick_norm = static_cast<index_t>(c);
    }
    acc.push_back(s.pick == it.gold ? 1.0 : 0.0);
    acc_norm.push_back(s.pick_norm == it.gold ? 1.0 : 0.0);
    r.items.push_back(std::move(s));
  }
  std::tie(r.acc, r.acc_stderr) = mean_and_stderr(acc);
  std::tie(r.acc_norm, r.acc_norm_stderr) = mean_and_stderr(acc_norm);
  return r;
}

// Scores every item: its context once through the key/value cache, then each choice after it (f32 and
// f64 models); other dtypes take one full forward per choice.
template <class Backend, class Tokenizer>
mc_result multiple_choice(model::transformer<Backend>& net, const Tokenizer& tok, const std::vector<mc_item>& items,
                          std::string task) {
  std::vector<std::vector<double>> lls;
  lls.reserve(items.size());
  std::optional<choice_scorer<Backend>> cached;
  if (net.type() == dtype::f32 || net.type() == dtype::f64) cached.emplace(net);
  for (const auto& it : items) {
    std::vector<encoded_pair> pairs;
    for (const auto& c : it.choices) pairs.push_back(encode_pair(tok, it.context, " " + c));
    if (cached) {
      lls.push_back(cached->score(pairs));
    } else {
      auto& row = lls.emplace_back();
      for (const auto& p : pairs) row.push_back(continuation_loglikelihood(net, p));
    }
  }
  return score_choices(items, lls, std::move(task));
}

}  // namespace lwcl::eval
