#pragma once
// UTF-8 decoding and encoding for the tokenizers. Invalid input is an lwcl::error naming the byte
// offset, never undefined behaviour.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lwcl/core/error.hpp"

namespace lwcl::tokenizer {

inline std::vector<char32_t> utf8_decode(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    int len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xe ? 3 : (b >> 3) == 0x1e ? 4 : 0;
    check(len > 0 && i + static_cast<std::size_t>(len) <= s.size(), "utf8_decode: invalid UTF-8 at byte ", i);
    char32_t cp = len == 1 ? b : len == 2 ? (b & 0x1fu) : len == 3 ? (b & 0x0fu) : (b & 0x07u);
    for (int k = 1; k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
      check((c >> 6) == 0x2, "utf8_decode: invalid UTF-8 continuation byte at ", i + static_cast<std::size_t>(k));
      cp = (cp << 6) | (c & 0x3fu);
    }
    out.push_back(cp);
    i += static_cast<std::size_t>(len);
  }
  return out;
}

inline void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

}  // namespace lwcl::tokenizer
