#pragma once
// The byte-level BPE tokenizer a checkpoint folder carries: vocab.json + merges.txt (as lwcl's
// prepare_data writes them and GPT-2 ships them) or a Hugging Face tokenizer.json.

#include <filesystem>
#include <string>

#include "lwcl/core/error.hpp"
#include "lwcl/model/tokenizer/byte_bpe.hpp"

namespace lwcl::tokenizer {

inline byte_bpe byte_bpe_of_folder(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  if (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt"))
    return byte_bpe::from_files((dir / "vocab.json").string(), (dir / "merges.txt").string());
  if (fs::exists(dir / "tokenizer.json")) return byte_bpe::from_tokenizer_json((dir / "tokenizer.json").string());
  fail("tokenizer: '", dir.string(), "' has no tokenizer (expected vocab.json + merges.txt, or tokenizer.json)");
}

}  // namespace lwcl::tokenizer
