#pragma once
// Learns a GPT-2-style byte-level BPE vocabulary from documents, for the language-model teachers lwcl
// trains itself: text is cut by GPT-2's pattern, every piece starts as its byte symbols, and the most
// frequent adjacent pair (ties: the smallest pair in byte order) is merged until the vocabulary has
// the requested size or no pair occurs twice. Writes vocab.json and merges.txt that byte_bpe loads.

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/core/error.hpp"
#include "lwcl/core/fs.hpp"
#include "lwcl/core/progress.hpp"
#include "lwcl/model/tokenizer/byte_bpe.hpp"

namespace lwcl::tokenizer {

struct bpe_vocabulary {
  std::vector<std::string> tokens;                          // id -> token (byte symbols, merges, specials)
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order
};

inline bpe_vocabulary train_byte_bpe(const std::vector<std::string>& documents, std::size_t vocab_size,
                                     const std::vector<std::string>& specials = {"<|endoftext|>"}, bool show_progress = false) {
  check(vocab_size >= 256 + specials.size(), "train_byte_bpe: vocab_size ", vocab_size, " is below the 256 byte symbols plus ",
        specials.size(), " special tokens");
  const auto& bytes = gpt2_pattern::byte_symbols();
  std::map<std::string, long> piece_count;
  for (const auto& doc : documents)
    for (auto piece : gpt2_pattern::split_pieces(doc)) ++piece_count[std::string(piece)];
  struct word {
    std::vector<std::string> sym;
    long count;
  };
  std::vector<word> words;
  words.reserve(piece_count.size());
  for (const auto& [piece, count] : piece_count) {
    word w{{}, count};
    for (char c : piece) w.sym.push_back(bytes[static_cast<unsigned char>(c)]);
    words.push_back(std::move(w));
  }
  bpe_vocabulary v;
  for (const auto& b : bytes) v.tokens.push_back(b);
  const std::size_t target_merges = vocab_size - 256 - specials.size();
  progress bar("bpe merges", static_cast<long>(target_merges), 5.0);
  while (v.merges.size() < target_merges) {
    std::map<std::pair<std::string, std::string>, long> pairs;
    for (const auto& w : words)
      for (std::size_t k = 0; k + 1 < w.sym.size(); ++k) pairs[{w.sym[k], w.sym[k + 1]}] += w.count;
    const std::pair<std::string, std::string>* best = nullptr;
    long best_count = 1;  // a pair must occur at least twice
    for (const auto& [p, c] : pairs)
      if (c > best_count) {
        best_count = c;
        best = &p;
      }
    if (!best) break;
    const auto [a, b] = *best;
    for (auto& w : words) {
      std::vector<std::string> next;
      next.reserve(w.sym.size());
      for (std::size_t k = 0; k < w.sym.size();) {
        if (k + 1 < w.sym.size() && w.sym[k] == a && w.sym[k + 1] == b) {
          next.push_back(a + b);
          k += 2;
        } else {
          next.push_back(w.sym[k++]);
        }
      }
      w.sym.swap(next);
    }
    v.merges.emplace_back(a, b);
    v.tokens.push_back(a + b);
    if (show_progress) bar.update(static_cast<long>(v.merges.size()));
  }
  for (const auto& s : specials) v.tokens.push_back(s);
  return v;
}

// Writes vocab.json and merges.txt into dir (each through a temporary file and a rename).
inline void save_bpe_vocabulary(const bpe_vocabulary& v, const std::string& dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < v.tokens.size(); ++i) vocab[v.tokens[i]] = i;
  const auto vpath = (fs::path(dir) / "vocab.json").string(), mpath = (fs::path(dir) / "merges.txt").string();
  write_text_atomic(vpath, vocab.dump() + "\n");
  write_stream_atomic(mpath, [&](std::ostream& f) {
    f << "#version: 0.2\n";
    for (const auto& [a, b] : v.merges) f << a << ' ' << b << '\n';
  });
}

}  // namespace lwcl::tokenizer
