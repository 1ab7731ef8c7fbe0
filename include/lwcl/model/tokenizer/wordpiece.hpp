#pragma once
// BERT's WordPiece tokenizer from vocab.txt, with BERT's text normalisation: drop NUL, U+FFFD and
// control characters, turn whitespace into spaces, put spaces around CJK ideographs, strip accents
// (NFD, then drop nonspacing marks), lower-case (full per-character mapping); split on whitespace and
// around punctuation; then greedy longest-match-first word pieces with the "##" continuation prefix.
// Unicode properties and normalisation come from ICU.

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/model/tokenizer/utf8.hpp"

namespace lwcl::tokenizer {

struct wordpiece_options {
  bool lowercase = true;
  bool strip_accents = true;
  std::string unk = "[UNK]";
  std::size_t max_chars_per_word = 100;  // longer words become the unknown token
};

class wordpiece {
 public:
  explicit wordpiece(const std::string& vocab_txt, wordpiece_options opt = wordpiece_options()) : opt_(std::move(opt)) {
    std::ifstream in(vocab_txt);
    check(in.good(), "wordpiece: cannot open '", vocab_txt, "'");
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!vocab_.count(line)) vocab_.emplace(line, static_cast<std::int32_t>(tokens_.size()));
      tokens_.push_back(line);
    }
    check(!tokens_.empty(), "wordpiece: '", vocab_txt, "' is empty");
    auto unk = vocab_.find(opt_.unk);
    check(unk != vocab_.end(), "wordpiece: '", vocab_txt, "' has no unknown token '", opt_.unk, "'");
    unk_id_ = unk->second;
  }

  std::size_t vocab_size() const { return tokens_.size(); }
  const std::string& token(std::int32_t id) const {
    check(id >= 0 && static_cast<std::size_t>(id) < tokens_.size(), "wordpiece: id ", id, " is outside the vocabulary of ",
          tokens_.size());
    return tokens_[static_cast<std::size_t>(id)];
  }

  // Ids of the text's word pieces (no [CLS]/[SEP]).
  std::vector<std::int32_t> encode(std::string_view text) const {
    std::vector<std::int32_t> ids;
    for (const auto& word : split(normalize(utf8_decode(text)))) add_word(word, ids);
    return ids;
  }

 private:
  static bool is_cjk(char32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
  }
  static bool is_whitespace(char32_t c) { return c == U'\t' || c == U'\n' || c == U'\r' || u_isUWhiteSpace(static_cast<UChar32>(c)); }
  static bool is_control(char32_t c) {
    if (c == U'\t' || c == U'\n' || c == U'\r') return false;
    return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_C_MASK) != 0;
  }
  static bool is_punctuation(char32_t c) {
    if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return true;
    return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_P_MASK) != 0;
  }

  static std::u16string to_utf16(const std::vector<char32_t>& s) {
    std::u16string out;
    for (char32_t c : s) {
      if (c < 0x10000) {
        out += static_cast<char16_t>(c);
      } else {
        out += static_cast<char16_t>(0xD800 + ((c - 0x10000) >> 10));
        out += static_cast<char16_t>(0xDC00 + ((c - 0x10000) & 0x3FF));
      }
    }
    return out;
  }
  static std::vector<char32_t> from_utf16(const std::u16string& s) {
    std::vector<char32_t> out;
    for (std::size_t i = 0; i < s.size(); ++i) {
      char32_t c = s[i];
      if (c >= 0xD800 && c <= 0xDBFF && i + 1 < s.size()) c = 0x10000 + ((c - 0xD800) << 10) + (s[++i] - 0xDC00);
      out.push_back(c);
    }
    return out;
  }
  std::vector<char32_t> normalize(const std::vector<char32_t>& in) const {
    std::vector<char32_t> s;
    for (char32_t c : in) {
      if (c == 0 || c == 0xFFFD || is_control(c)) continue;
      if (is_whitespace(c)) {
        s.push_back(U' ');
      } else if (is_cjk(c)) {
        s.insert(s.end(), {U' ', c, U' '});
      } else {
        s.push_back(c);
      }
    }
    if (opt_.strip_accents) {
      UErrorCode err = U_ZERO_ERROR;
      const UNormalizer2* nfd = unorm2_getNFDInstance(&err);
      check(U_SUCCESS(err), "wordpiece: ICU NFD is unavailable: ", u_errorName(err));
      const std::u16string u = to_utf16(s);
      std::u16string out(u.size() * 4 + 8, u'\0');
      const int32_t n = unorm2_normalize(nfd, reinterpret_cast<const UChar*>(u.data()), static_cast<int32_t>(u.size()),
                                         reinterpret_cast<UChar*>(out.data()), static_cast<int32_t>(out.size()), &err);
      check(U_SUCCESS(err), "wordpiece: ICU NFD failed: ", u_errorName(err));
      out.resize(static_cast<std::size_t>(n));
      std::vector<char32_t> kept;
      for (char32_t c : from_utf16(out))
        if (u_charType(static_cast<UChar32>(c)) != U_NON_SPACING_MARK) kept.push_back(c);
      s.swap(kept);
    }
    if (opt_.lowercase) {
      std::vector<char32_t> lower;
      for (char32_t c : s) {
        // Full lower-case mapping of each character on its own (no context), as BERT's normaliser does.
        const std::u16string one = to_utf16({c});
        std::u16string out(8, u'\0');
        UErrorCode err = U_ZERO_ERROR;
        const int32_t n = u_strToLower(reinterpret_cast<UChar*>(out.data()), 8, reinterpret_cast<const UChar*>(one.data()),
                                       static_cast<int32_t>(one.size()), "", &err);
        check(U_SUCCESS(err), "wordpiece: ICU lower-casing failed: ", u_errorName(err));
        out.resize(static_cast<std::size_t>(n));
        for (char32_t l : from_utf16(out)) lower.push_back(l);
      }
      s.swap(lower);
    }
    return s;
  }

  // Words: split on whitespace, each punctuation character a word of its own.
  static std::vector<std::vector<char32_t>> split(const std::vector<char32_t>& s) {
    std::vector<std::vector<char32_t>> words;
    std::vector<char32_t> cur;
    auto flush = [&] {
      if (!cur.empty()) words.push_back(cur);
      cur.clear();
    };
    for (char32_t c : s) {
      if (is_whitespace(c)) {
        flush();
      } else if (is_punctuation(c)) {
        flush();
        words.push_back({c});
      } else {
        cur.push_back(c);
      }
    }
    flush();
    return words;
  }

  void add_word(const std::vector<char32_t>& word, std::vector<std::int32_t>& ids) const {
    if (word.size() > opt_.max_chars_per_word) {
      ids.push_back(unk_id_);
      return;
    }
    std::vector<std::int32_t> pieces;
    std::size_t start = 0;
    while (start < word.size()) {
      std::size_t end = word.size();
      std::int32_t found = -1;
      while (end > start) {
        std::string sub = start > 0 ? "##" : "";
        for (std::size_t k = start; k < end; ++k) utf8_append(sub, word[k]);
        auto it = vocab_.find(sub);
        if (it != vocab_.end()) {
          found = it->second;
          break;
        }
        --end;
      }
      if (found < 0) {
        ids.push_back(unk_id_);
        return;
      }
      pieces.push_back(found);
      start = end;
    }
    ids.insert(ids.end(), pieces.begin(), pieces.end());
  }

  wordpiece_options opt_;
  std::unordered_map<std::string, std::int32_t> vocab_;
  std::vector<std::string> tokens_;
  std::int32_t unk_id_ = 0;
};

}  // namespace lwcl::tokenizer
