// The byte-level BPE trainer: its first merge is the most frequent pair (counted here independently),
// training is deterministic, the saved files load into byte_bpe, encoding compresses the training
// text and decode(encode(x)) == x, also on text the trainer never saw.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "lwcl/model/tokenizer/bpe_trainer.hpp"

using namespace lwcl;

namespace {
const std::vector<std::string> corpus = {
    "And God said, Let there be light: and there was light.",
    "And God saw the light, that it was good: and God divided the light from the darkness.",
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.",
    "However little known the feelings or views of such a man may be on his first entering a neighbourhood...",
    "Zahlen 123 456 und Umlaute: Mädchen, Straße; emoji 🙂 end.",
};
std::string read_file(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

TEST_CASE("BPE trainer merges the most frequent pair first and is deterministic") {
  const auto v = tokenizer::train_byte_bpe(corpus, 256 + 40 + 1);
  REQUIRE(v.merges.size() == 40);
  CHECK(v.tokens.size() == 297);
  CHECK(v.tokens.back() == "<|endoftext|>");
  // Count adjacent byte-symbol pairs inside the pieces, independently of the trainer's loop.
  std::map<std::pair<std::string, std::string>, long> pairs;
  const auto& sym = tokenizer::gpt2_pattern::byte_symbols();
  for (const auto& doc : corpus)
    for (auto piece : tokenizer::gpt2_pattern::split_pieces(doc))
      for (std::size_t k = 0; k + 1 < piece.size(); ++k)
        ++pairs[{sym[static_cast<unsigned char>(piece[k])], sym[static_cast<unsigned char>(piece[k + 1])]}];
  long most = 0;
  for (const auto& [p, c] : pairs) most = std::max(most, c);
  CHECK(pairs[v.merges[0]] == most);
  const auto again = tokenizer::train_byte_bpe(corpus, 256 + 40 + 1);
  CHECK(again.merges == v.merges);
  CHECK(again.tokens == v.tokens);
}

TEST_CASE("a trained vocabulary saves, loads into byte_bpe, compresses and round-trips") {
  const auto dir = (std::filesystem::temp_directory_path() / ("lwcl_bpe_" + std::to_string(::getpid()))).string();
  const auto v = tokenizer::train_byte_bpe(corpus, 400);
  tokenizer::save_bpe_vocabulary(v, dir);
  CHECK(read_file(dir + "/merges.txt").rfind("#version: 0.2\n", 0) == 0);
  const auto t = tokenizer::byte_bpe::from_files(dir + "/vocab.json", dir + "/merges.txt");
  CHECK(t.vocab_size() == v.tokens.size());
  std::size_t bytes = 0, ids = 0;
  for (const auto& doc : corpus) {
    const auto e = t.encode(doc);
    CHECK(t.decode(e) == doc);
    bytes += doc.size();
    ids += e.size();
  }
  CHECK(ids * 3 < bytes * 2);  // over 1.5 bytes per token on the training text (bytes alone: 1)
  const std::string unseen = "Quantum zebras \t juggle 42 ☃ flamingos\n";
  CHECK(t.decode(t.encode(unseen)) == unseen);
  std::filesystem::remove_all(dir);
  CHECK_THROWS_WITH_AS(tokenizer::train_byte_bpe(corpus, 100), doctest::Contains("vocab_size 100 is below"), lwcl::error);
}
