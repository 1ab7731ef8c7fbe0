// GPT-2 byte-level BPE: ids equal Hugging Face tokenizers' on varied text (Unicode letters of several
// scripts, whitespace runs, tabs and newlines, digits, emoji, contractions), loaded both from
// vocab.json + merges.txt and from tokenizer.json; decode(encode(x)) == x; bad input is an error.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "lwcl/model/tokenizer/byte_bpe.hpp"
#include "lwcl/model/tokenizer/byte_level.hpp"
#include "support/fixture.hpp"

using namespace lwcl;

TEST_CASE("byte-level BPE matches Hugging Face tokenizers and round-trips") {
  const auto dir = test::data_path("tokenizer/bpe/");
  const auto from_files = tokenizer::byte_bpe::from_files(dir + "vocab.json", dir + "merges.txt");
  const auto from_json = tokenizer::byte_bpe::from_tokenizer_json(dir + "tokenizer.json");
  CHECK(from_files.vocab_size() == from_json.vocab_size());
  test::fixture fx("tokenizer/bpe_cases.lwfx");
  const auto count = fx.ints("count")[0];
  for (std::int64_t i = 0; i < count; ++i) {
    const auto bytes = fx.ints("text." + std::to_string(i));
    const std::string text(bytes.begin(), bytes.end());
    const auto want64 = fx.ints("ids." + std::to_string(i));
    const std::vector<std::int32_t> want(want64.begin(), want64.end());
    CAPTURE(text);
    CHECK(from_files.encode(text) == want);
    CHECK(from_json.encode(text) == want);
    CHECK(from_files.decode(from_files.encode(text)) == text);
  }
}

TEST_CASE("byte-level BPE rejects invalid UTF-8, unknown ids and malformed files") {
  const auto dir = test::data_path("tokenizer/bpe/");
  const auto t = tokenizer::byte_bpe::from_files(dir + "vocab.json", dir + "merges.txt");
  CHECK_THROWS_WITH_AS(t.encode(std::string("ab\xff" "cd")), doctest::Contains("invalid UTF-8 at byte 2"), lwcl::error);
  CHECK_THROWS_WITH_AS(t.decode({1, 100000}), doctest::Contains("id 100000 is outside the vocabulary"), lwcl::error);
  CHECK_THROWS_WITH_AS(tokenizer::byte_bpe::from_files(dir + "merges.txt", dir + "merges.txt"),
                       doctest::Contains("is malformed JSON"), lwcl::error);
  CHECK_THROWS_WITH_AS(tokenizer::byte_bpe::from_tokenizer_json(dir + "vocab.json"),
                       doctest::Contains("does not hold a BPE model"), lwcl::error);
}


TEST_CASE("byte-level tokenizer: one id per byte, lossless on any bytes") {
  const tokenizer::byte_level t;
  CHECK(t.vocab_size() == 257);
  CHECK(t.encode("A\xc3\xa9") == std::vector<std::int32_t>{65, 0xc3, 0xa9});
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  CHECK(t.decode(t.encode(all)) == all);  // every byte value, invalid UTF-8 included
  CHECK(t.decode({72, 105, t.special_id("<|endoftext|>")}) == "Hi<|endoftext|>");
  CHECK_THROWS_WITH_AS(t.decode({257}), doctest::Contains("id 257 is outside the vocabulary of 257"), lwcl::error);
  CHECK_THROWS_WITH_AS(t.special_id("<pad>"), doctest::Contains("no special token '<pad>'"), lwcl::error);
}
