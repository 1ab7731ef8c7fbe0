// Fuzz target: a token shard (magic, version, width, counts, tokens) opened, every token read, and
// the same file read whole by read_tokens.
#include <cstddef>
#include <cstdint>

#include "fuzz_support.hpp"
#include "lwcl/data/shards.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = lwcl::fuzz::write_file("tokens.bin", data, size);
  lwcl::fuzz::refused([&] {
    const lwcl::data::shard s(path);
    std::int64_t sum = 0;
    for (std::uint64_t i = 0; i < s.size(); ++i) sum += s[i];
    (void)sum;
  });
  lwcl::fuzz::refused([&] { (void)lwcl::data::read_tokens(path, 1 << 20); });
  return 0;
}
