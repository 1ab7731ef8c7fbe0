// The process's resident set as /proc/self/status counts it: the split adds up to the total, and pages
// the test touches show in the anonymous part.
#include <doctest/doctest.h>

#include <cstddef>
#include <vector>

#include "lwcl/core/process_memory.hpp"

using namespace lwcl;

TEST_CASE("process_resident_split: anonymous, file and shared pages add up to VmRSS; touched pages are anonymous") {
  const auto before = process_resident_split();
  if (before.total == 0) {
    MESSAGE("/proc/self/status is not readable here: nothing to check");
    return;
  }
  // VmRSS is the sum of the three, each read in the same pass over the file.
  CHECK(before.anon + before.file + before.shmem == before.total);
  CHECK(before.anon > 0);
  // 64 MiB written page by page: resident, and anonymous.
  constexpr std::size_t bytes = std::size_t(64) << 20;
  std::vector<unsigned char> block(bytes);
  for (std::size_t i = 0; i < bytes; i += 4096) block[i] = static_cast<unsigned char>(i >> 12);
  const auto after = process_resident_split();
  CHECK(after.anon + after.file + after.shmem == after.total);
  CHECK(after.anon >= before.anon + bytes / 2);
  CHECK(after.total >= before.total + bytes / 2);
  CHECK(process_resident_bytes() >= after.total / 2);
  CHECK(block[4096] == 1);
}
