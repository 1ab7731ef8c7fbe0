#pragma once
// GPT-2's byte-level BPE: text is split by GPT-2's pre-tokenisation pattern (contractions, letter
// runs, digit runs, other-symbol runs, each with an optional leading space, and whitespace runs), each
// piece's bytes are mapped to printable code points, and the ranked merges are applied. Loads
// vocab.json + merges.txt or a tokenizer.json. Unicode letter, number and whitespace classes come
// from ICU, as the reference implementation's regex engine uses the Unicode tables.

#include <unicode/uchar.h>

#include <array>
#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/core/error.hpp"
#include "lwcl/model/tokenizer/utf8.hpp"

namespace lwcl::tokenizer {

namespace gpt2_pattern {

inline bool is_letter(char32_t c) { return u_isalpha(static_cast<UChar32>(c)) && (U_GET_GC_MASK(c) & U_GC_L_MASK); }
inline bool is_number(char32_t c) { return (U_GET_GC_MASK(c) & U_GC_N_MASK) != 0; }
inline bool is_space(char32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)) != 0; }

// Length (in code points) of the piece starting at i, by GPT-2's pattern, alternatives in order:
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
inline std::size_t piece_length(const std::vector<char32_t>& s, std::size_t i) {
  const std::size_t n = s.size();
  if (s[i] == U'\'') {
    for (const char32_t* suf : {U"s", U"t", U"re", U"ve", U"m", U"ll", U"d"}) {
      std::size_t k = 0;
      while (suf[k] && i + 1 + k < n && s[i + 1 + k] == suf[k]) ++k;
      if (!suf[k]) return 1 + k;
    }
  }
  const std::size_t j = s[i] == U' ' && i + 1 < n ? i + 1 : i;  // optional leading space
  auto run = [&](std::size_t from, auto pred) {
    std::size_t e = from;
    while (e < n && pred(s[e])) ++e;
    return e - from;
  };
  for (int cls = 0; cls < 3; ++cls) {
    auto pred = [cls](char32_t c) {
      return cls == 0 ? is_letter(c) : cls == 1 ? is_number(c) : !(is_space(c) || is_letter(c) || is_number(c));
    };
    if (j != i) {
      if (const std::size_t r = run(j, pred)) return 1 + r;
    }
    if (const std::size_t r = run(i, pred)) return r;
  }
  const std::size_t ws = run(i, is_space);
  if (ws > 0) {
    if (i + ws == n) return ws;  // \s+(?!\S) at the end
    if (ws > 1) return ws - 1;   // leave the last space to lead the next piece
    return 1;                    // \s+
  }
  return 1;  // unreachable for valid classes; keeps progress guaranteed
}

// The text cut into pieces by the pattern, each a view of the original bytes.
inline std::vector<std::string_view> split_pieces(std::string_view text) {
  const auto cps = utf8_decode(text);
  std::vector<std::size_t> at(cps.size() + 1, 0);  // byte offset of each code point
  for (std::size_t k = 0; k < cps.size(); ++k) {
    const char32_t c = cps[k];
    at[k + 1] = at[k] + (c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4);
  }
  std::vector<std::string_view> pieces;
  for (std::size_t i = 0; i < cps.size();) {
    const std::size_t n = piece_length(cps, i);
    pieces.push_back(text.substr(at[i], at[i + n] - at[i]));
    i += n;
  }
  return pieces;
}

// GPT-2's byte map: printable Latin-1 bytes stand for themselves, the rest move to 256 + n; each entry
// is the UTF-8 of the code point standing for that byte.
inline const std::array<std::string, 256>& byte_symbols() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t{};
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool keep = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
      utf8_append(t[static_cast<std::size_t>(b)], keep ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++));
    }
    return t;
  }();
  return table;
}

}  // namespace gpt2_pattern

class byte_bpe {
 public:
  // From vocab.json (token -> id) and merges.txt ("a b" per line, best first; a "#version" line is skipped).
  static byte_bpe from_files(const std::string& vocab_json, const std::string& merges_txt) {
    byte_bpe t;
    t.set_vocab(read_json(vocab_json), vocab_json);
    std::ifstream in(merges_txt);
    check(in.good(), "byte_bpe: cannot open '", merges_txt, "'");
    std::string line;
    std::size_t rank = 0, line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
      const auto sp = line.find(' ');
      check(sp != std::string::npos && sp > 0 && sp + 1 < line.size(), "byte_bpe: '", merges_txt, "' line ", line_no,
            " is not a merge 'a b'");
      t.add_merge(line.substr(0, sp), line.substr(sp + 1), rank++);
    }
    return t;
  }

  // From a Hugging Face tokenizer.json whose model is BPE (byte level).
  static byte_bpe from_tokenizer_json(const std::string& path) {
    const auto j = read_json(path);
    check(j.is_object() && j.contains("model") && j["model"].is_object() && j["model"].contains("type") &&
              j["model"]["type"] == "BPE",
          "byte_bpe: '", path, "' does not hold a BPE model");
    const auto& model = j["model"];
    check(model.contains("vocab"), "byte_bpe: '", path, "' has no vocab in its model");
    check(model.contains("merges") && model["merges"].is_array(), "byte_bpe: '", path, "' has no list of merges");
    byte_bpe t;
    t.set_vocab(model["vocab"], path);
    std::size_t rank = 0;
    for (const auto& m : model["merges"]) {
      if (m.is_string()) {
        const auto s = m.get<std::string>();
        const auto sp = s.find(' ');
        check(sp != std::string::npos, "byte_bpe: '", path, "' has a malformed merge '", s, "'");
        t.add_merge(s.substr(0, sp), s.substr(sp + 1), rank++);
      } else {
        check(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), "byte_bpe: '", path,
              "' has a malformed merge");
        t.add_merge(m[0].get<std::string>(), m[1].get<std::string>(), rank++);
      }
    }
    return t;
  }

  // From the tokens in id order and the merges best first (a GGUF file's tokenizer).
  static byte_bpe from_lists(const std::vector<std::string>& tokens, const std::vector<std::pair<std::string, std::string>>& merges,
                             const std::string& where) {
    byte_bpe t;
    nlohmann::json v = nlohmann::json::object();
    for (std::size_t id = 0; id < tokens.size(); ++id) {
      if (v.contains(tokens[id]))
        fail("byte_bpe: token '", tokens[id], "' in '", where, "' has ids ", v[tokens[id]].get<std::int64_t>(), " and ", id,
             " (expected one id a token)");
      v[tokens[id]] = id;
    }
    t.set_vocab(v, where);
    std::size_t rank = 0;
    for (const auto& [a, b] : merges) t.add_merge(a, b, rank++);
    return t;
  }

  std::size_t vocab_size() const { return id_to_token_.size(); }
  // Every token in id order (ids run from 0 without gaps), and the merges best first.
  const std::vector<std::string>& tokens() const { return id_to_token_; }
  const std::vector<std::pair<std::string, std::string>>& merges() const { return merges_; }
  // The id of a whole token as the vocabulary spells it (a special such as <|endoftext|>), if present.
  std::optional<std::int32_t> token_id(const std::string& token) const {
    const auto it = token_to_id_.find(token);
    if (it == token_to_id_.end()) return std::nullopt;
    return it->second;
  }

  std::vector<std::int32_t> encode(std::string_view text) const {
    std::vector<std::int32_t> ids;
    for (std::string_view piece : gpt2_pattern::split_pieces(text)) encode_piece(piece, ids);
    return ids;
  }

  std::string decode(const std::vector<std::int32_t>& ids) const {
    std::string out;
    for (std::int32_t id : ids) {
      check(id >= 0 && static_cast<std::size_t>(id) < id_to_token_.size(), "byte_bpe::decode: id ", id,
            " is outside the vocabulary of ", id_to_token_.size());
      for (char32_t cp : utf8_decode(id_to_token_[static_cast<std::size_t>(id)])) {
        auto it = unicode_to_byte_.find(cp);
        check(it != unicode_to_byte_.end(), "byte_bpe::decode: token ", id, " holds a character outside the byte map");
        out += static_cast<char>(it->second);
      }
    }
    return out;
  }

 private:
  byte_bpe() {
    const auto& table = gpt2_pattern::byte_symbols();
    for (int b = 0; b < 256; ++b) unicode_to_byte_[utf8_decode(table[static_cast<std::size_t>(b)]).at(0)] = static_cast<unsigned char>(b);
  }

  static nlohmann::json read_json(const std::string& path) {
    std::ifstream in(path);
    check(in.good(), "byte_bpe: cannot open '", path, "'");
    try {
      return nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      fail("byte_bpe: '", path, "' is malformed JSON: ", e.what());
    }
  }

  void set_vocab(const nlohmann::json& v, const std::string& path) {
    check(v.is_object(), "byte_bpe: the vocabulary in '", path, "' is not an object");
    for (auto it = v.begin(); it != v.end(); ++it) {
      check(it.value().is_number_integer(), "byte_bpe: token '", it.key(), "' in '", path, "' has no integer id");
      const auto id = it.value().get<std::int64_t>();
      check(id >= 0 && id < std::numeric_limits<std::int32_t>::max(), "byte_bpe: token '", it.key(), "' in '", path,
            "' has id ", id);
      check(!it.key().empty(), "byte_bpe: '", path, "' has an empty token (id ", id, ")");
      // The ids are bounded by the tokens before any table is sized by them.
      check(static_cast<std::size_t>(id) < v.size(), "byte_bpe: token '", it.key(), "' in '", path, "' has id ", id,
            ", past the vocabulary of ", v.size(), " tokens (expected one token for each id from 0 to ", v.size() - 1, ")");
      token_to_id_[it.key()] = static_cast<std::int32_t>(id);
      if (static_cast<std::size_t>(id) >= id_to_token_.size()) id_to_token_.resize(static_cast<std::size_t>(id) + 1);
      auto& slot = id_to_token_[static_cast<std::size_t>(id)];
      check(slot.empty(), "byte_bpe: tokens '", slot, "' and '", it.key(), "' in '", path, "' share id ", id,
            " (expected one token for each id)");
      slot = it.key();
    }
    // n distinct tokens with distinct ids below n: every id from 0 to n - 1 has its token, no gap.
  }
  void add_merge(const std::string& a, const std::string& b, std::size_t rank) {
    merge_rank_.emplace(a + '\x01' + b, rank);
    merges_.emplace_back(a, b);
  }

  void encode_piece(std::string_view bytes, std::vector<std::int32_t>& ids) const {
    std::vector<std::string> sym;
    sym.reserve(bytes.size());
    for (char c : bytes) sym.push_back(gpt2_pattern::byte_symbols()[static_cast<unsigned char>(c)]);
    while (sym.size() > 1) {
      std::size_t best = std::numeric_limits<std::size_t>::max(), where = 0;
      for (std::size_t k = 0; k + 1 < sym.size(); ++k) {
        auto it = merge_rank_.find(sym[k] + '\x01' + sym[k + 1]);
        if (it != merge_rank_.end() && it->second < best) {
          best = it->second;
          where = k;
        }
      }
      if (best == std::numeric_limits<std::size_t>::max()) break;
      // Merge every occurrence of the best pair, left to right.
      const std::string a = sym[where], b = sym[where + 1];
      std::vector<std::string> next;
      next.reserve(sym.size());
      for (std::size_t k = 0; k < sym.size();) {
        if (k + 1 < sym.size() && sym[k] == a && sym[k + 1] == b) {
          next.push_back(a + b);
          k += 2;
        } else {
          next.push_back(sym[k++]);
        }
      }
      sym.swap(next);
    }
    for (const auto& s : sym) {
      auto it = token_to_id_.find(s);
      check(it != token_to_id_.end(), "byte_bpe::encode: piece '", s, "' is not in the vocabulary");
      ids.push_back(it->second);
    }
  }

  std::map<char32_t, unsigned char> unicode_to_byte_;
  std::unordered_map<std::string, std::int32_t> token_to_id_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<std::string, std::size_t> merge_rank_;
  std::vector<std::pair<std::string, std::string>> merges_;
};

}  // namespace lwcl::tokenizer
