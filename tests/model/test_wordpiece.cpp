// BERT WordPiece: ids equal Hugging Face tokenizers' (lower-casing, accent stripping, CJK and
// punctuation splitting, control characters dropped) on varied text; bad input is an error.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "lwcl/model/tokenizer/wordpiece.hpp"
#include "support/fixture.hpp"

using namespace lwcl;

TEST_CASE("WordPiece matches Hugging Face's BERT tokenizer") {
  const tokenizer::wordpiece t(test::data_path("tokenizer/wordpiece/vocab.txt"));
  test::fixture fx("tokenizer/wordpiece_cases.lwfx");
  const auto count = fx.ints("count")[0];
  REQUIRE(count > 10);
  for (std::int64_t i = 0; i < count; ++i) {
    const auto bytes = fx.ints("text." + std::to_string(i));
    const std::string text(bytes.begin(), bytes.end());
    const auto want64 = fx.ints("ids." + std::to_string(i));
    const std::vector<std::int32_t> want(want64.begin(), want64.end());
    CAPTURE(text);
    CHECK(t.encode(text) == want);
  }
}

TEST_CASE("WordPiece rejects a vocabulary without its unknown token and ids out of range") {
  const auto path = test::data_path("tokenizer/bpe/merges.txt");  // a text file without [UNK]
  CHECK_THROWS_WITH_AS(tokenizer::wordpiece{path}, doctest::Contains("has no unknown token '[UNK]'"), lwcl::error);
  const tokenizer::wordpiece t(test::data_path("tokenizer/wordpiece/vocab.txt"));
  CHECK_THROWS_WITH_AS(t.token(-1), doctest::Contains("id -1 is outside the vocabulary"), lwcl::error);
  CHECK_THROWS_WITH_AS(t.encode(std::string("a\xc3")), doctest::Contains("invalid UTF-8"), lwcl::error);
}
