// Token shards and the batch loader (include/lwcl/data/; tested here because tests/data holds the
// fixtures): round trip at both token widths, a clear error for each malformed shard, and batches that
// are deterministic in (seed, index), in bounds, with targets shifted by one.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include "lwcl/data/loader.hpp"
#include "lwcl/data/shards.hpp"

using namespace lwcl;

namespace {
std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("lwcl_shard_" + std::to_string(::getpid()) + "_" + name)).string();
}
}  // namespace

TEST_CASE("shards round-trip tokens at 2- and 4-byte widths") {
  for (std::uint64_t vocab : {std::uint64_t{300}, std::uint64_t{70000}}) {
    CAPTURE(vocab);
    std::vector<std::int32_t> tokens;
    for (int i = 0; i < 1000; ++i) tokens.push_back(static_cast<std::int32_t>((i * 7919) % static_cast<int>(vocab)));
    const auto path = temp_path("rt.bin");
    data::write_shard(path, tokens, vocab);
    CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
    CHECK(std::filesystem::file_size(path) == 32 + tokens.size() * (vocab <= 65536 ? 2 : 4));
    const data::shard s(path);
    CHECK(s.size() == tokens.size());
    CHECK(s.vocab_size() == vocab);
    bool same = true;
    for (std::size_t i = 0; i < tokens.size(); ++i) same = same && s[i] == tokens[i];
    CHECK(same);
    std::filesystem::remove(path);
  }
  CHECK_THROWS_WITH_AS(data::write_shard(temp_path("bad.bin"), {1, 2, 300}, 300),
                       doctest::Contains("token 300 at position 2 is outside the vocabulary of 300"), lwcl::error);
  CHECK_FALSE(std::filesystem::exists(temp_path("bad.bin") + ".tmp"));  // nothing left behind
  CHECK_FALSE(std::filesystem::exists(temp_path("bad.bin")));
}

TEST_CASE("malformed shards raise lwcl::error naming the problem") {
  const auto path = temp_path("m.bin");
  data::write_shard(path, {1, 2, 3, 4}, 10);
  std::string good;
  {
    std::ifstream in(path, std::ios::binary);
    good.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto with = [&](std::string bytes, const char* message) {
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out << bytes;
    }
    CHECK_THROWS_WITH_AS(data::shard{path}, doctest::Contains(message), lwcl::error);
  };
  with(good.substr(0, 20), "is truncated");
  with("XXXXXXXX" + good.substr(8), "no LWCLTOK1 magic");
  std::string v = good;
  v[8] = 2;
  with(v, "has version 2, expected 1");
  std::string w = good;
  w[12] = 3;
  with(w, "has token width 3");
  with(good.substr(0, good.size() - 2), "declares 4 tokens of 2 bytes but holds 6 bytes");
  std::string t = good;
  t[32 + 2 * 2] = 10;  // token 2 becomes 10 with vocab 10
  with(t, "has token 10 at position 2, outside the vocabulary of 10");
  std::filesystem::remove(path);
  CHECK_THROWS_WITH_AS(data::shard{temp_path("missing.bin")}, doctest::Contains("cannot open"), lwcl::error);
}

TEST_CASE("batch_loader: deterministic in (seed, index), in bounds, targets shifted by one") {
  std::vector<std::int32_t> tokens(5000);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>(i % 1000);
  const auto path = temp_path("loader.bin");
  data::write_shard(path, tokens, 1000);
  const data::shard s(path);
  const index_t B = 4, T = 16;
  const data::batch_loader a(s, B, T, 42), b(s, B, T, 42), c(s, B, T, 43);
  std::vector<std::int32_t> x1, y1, x2, y2, x3, y3;
  a.batch(7, x1, y1);
  b.batch(7, x2, y2);
  c.batch(7, x3, y3);
  CHECK(x1 == x2);
  CHECK(y1 == y2);
  CHECK(x1 != x3);
  a.batch(8, x2, y2);
  CHECK(x1 != x2);
  // Consecutive tokens in the shard differ by one (mod 1000), so each row is a contiguous window and
  // each target the next token.
  for (index_t r = 0; r < B; ++r)
    for (index_t t = 0; t < T; ++t) {
      const auto i = static_cast<std::size_t>(r * T + t);
      CHECK(y1[i] == (x1[i] + 1) % 1000);
      if (t > 0) CHECK(x1[i] == (x1[i - 1] + 1) % 1000);
    }
  // Starts spread over the whole shard.
  std::set<std::int32_t> firsts;
  for (std::uint64_t k = 0; k < 50; ++k) {
    a.batch(k, x1, y1);
    for (index_t r = 0; r < B; ++r) firsts.insert(x1[static_cast<std::size_t>(r * T)]);
  }
  CHECK(firsts.size() > 150);
  // first_batches(n): the tokens of batches 0 .. n - 1, as batch() gives them.
  const auto first = a.first_batches(3);
  REQUIRE(first.size() == 3);
  for (std::uint64_t k = 0; k < 3; ++k) {
    a.batch(k, x1, y1);
    CHECK(first[k] == x1);
  }
  CHECK_THROWS_WITH_AS(data::batch_loader(s, 1, 5000, 1), doctest::Contains("too few for sequences of 5000 + 1"), lwcl::error);
  std::filesystem::remove(path);
}
