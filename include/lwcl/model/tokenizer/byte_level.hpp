#pragma once
// The byte-level tokenizer: each byte of the UTF-8 text is one token (ids 0-255), optionally followed
// by special tokens from 256 on. Lossless for any input, the vocabulary of the smallest teachers.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lwcl/core/error.hpp"

namespace lwcl::tokenizer {

class byte_level {
 public:
  explicit byte_level(std::vector<std::string> specials = {"<|endoftext|>"}) : specials_(std::move(specials)) {}

  std::size_t vocab_size() const { return 256 + specials_.size(); }
  std::int32_t special_id(const std::string& name) const {
    for (std::size_t i = 0; i < specials_.size(); ++i)
      if (specials_[i] == name) return static_cast<std::int32_t>(256 + i);
    fail("byte_level: no special token '", name, "'");
  }

  std::vector<std::int32_t> encode(std::string_view text) const {
    std::vector<std::int32_t> ids(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }
  // Special tokens decode to their names.
  std::string decode(const std::vector<std::int32_t>& ids) const {
    std::string out;
    for (std::int32_t id : ids) {
      check(id >= 0 && static_cast<std::size_t>(id) < vocab_size(), "byte_level::decode: id ", id,
            " is outside the vocabulary of ", vocab_size());
      if (id < 256)
        out += static_cast<char>(id);
      else
        out += specials_[static_cast<std::size_t>(id - 256)];
    }
    return out;
  }

 private:
  std::vector<std::string> specials_;
};

}  // namespace lwcl::tokenizer
