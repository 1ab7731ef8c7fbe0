// The process's resident set as /proc/self/status counts it: the split adds up to the total, and pages
// the test touches show in the anonymous part; with glibc's mmap threshold pinned a freed block leaves it.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
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

namespace {
void* volatile escaped = nullptr;  // the blocks escape, so that no compiler drops their malloc and free

// A block of `bytes` taken, written page by page and freed.
void touch_and_free(std::size_t bytes) {
  escaped = std::malloc(bytes);
  REQUIRE(escaped != nullptr);
  std::memset(escaped, 1, bytes);
  std::free(escaped);
  escaped = nullptr;
}
}  // namespace

TEST_CASE("pin_mmap_threshold: after a large block is freed, a smaller one freed leaves the resident set too") {
  const std::size_t pinned = pin_mmap_threshold();
  if (pinned == 0) {
    MESSAGE("this allocator ignores mallopt (not glibc's, or a sanitizer's): nothing to check");
    return;
  }
  CHECK(pinned == pinned_mmap_threshold);
  const auto before = process_resident_split();
  if (before.total == 0) {
    MESSAGE("/proc/self/status is not readable here: nothing to check");
    return;
  }
  // glibc's default would raise its threshold to 24 MiB when the first block is freed and serve the 16 MiB
  // one from the heap, whose top it trims only past twice that: 16 MiB would stay resident. Pinned, each
  // block is its own mapping and is unmapped when freed.
  constexpr std::size_t mib = std::size_t(1) << 20;
  touch_and_free(24 * mib);
  touch_and_free(16 * mib);
  const auto after = process_resident_split();
  CHECK(after.anon < before.anon + 4 * mib);
  CHECK(pin_mmap_threshold(4 * mib) == 4 * mib);
  CHECK(pin_mmap_threshold() == pinned_mmap_threshold);
}
