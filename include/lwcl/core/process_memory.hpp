#pragma once
// The process's resident memory as Linux counts it: the peak resident set (VmHWM in /proc/self/status)
// and a way to restart that peak (writing 5 to /proc/self/clear_refs), so that one part of a program,
// one method of a comparison, can be measured on its own. What the program holds throughout (its code,
// data, earlier methods' results) is part of every figure. Where /proc cannot be read or written the
// figures are 0 and the reset says it failed: callers report "not measured", never a guess. The resident
// set now can be split into anonymous, file-backed and shared pages. Also the machine's physical memory,
// which a model must fit (model/weights.hpp).

#include <cstddef>
#include <fstream>
#include <string>
#include <string_view>

#include <unistd.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace lwcl {

namespace process_memory_detail {
// Whether `line` of /proc/self/status is "<field>: <n> kB"; if so, n in bytes into `out`.
inline bool field_bytes(const std::string& line, std::string_view field, std::size_t& out) {
  if (line.size() <= field.size() || line.compare(0, field.size(), field) != 0 || line[field.size()] != ':') return false;
  std::size_t kib = 0;
  for (char c : line)
    if (c >= '0' && c <= '9') kib = kib * 10 + static_cast<std::size_t>(c - '0');
  out = kib * 1024;
  return true;
}

// A "<field>: <n> kB" line of /proc/self/status, in bytes; 0 when it cannot be read.
inline std::size_t status_bytes(std::string_view field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  std::size_t bytes = 0;
  while (std::getline(f, line))
    if (field_bytes(line, field, bytes)) return bytes;
  return 0;
}
}  // namespace process_memory_detail

// The peak resident set size of this process in bytes since it started or since the last successful
// reset_peak_resident(); 0 when it cannot be read.
inline std::size_t peak_resident_bytes() { return process_memory_detail::status_bytes("VmHWM"); }

// The resident set size of this process now in bytes (VmRSS); 0 when it cannot be read.
inline std::size_t process_resident_bytes() { return process_memory_detail::status_bytes("VmRSS"); }

// The resident set now and what it is made of, as Linux counts it (VmRSS = RssAnon + RssFile +
// RssShmem), in bytes from one read of /proc/self/status; zeros where it cannot be read. The allocator's
// pages (freed or not) are anon; the pages of mapped files (weights, token shards) are file.
struct resident_split {
  std::size_t total = 0, anon = 0, file = 0, shmem = 0;
};
inline resident_split process_resident_split() {
  using process_memory_detail::field_bytes;
  resident_split r;
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    field_bytes(line, "VmRSS", r.total) || field_bytes(line, "RssAnon", r.anon) || field_bytes(line, "RssFile", r.file) ||
        field_bytes(line, "RssShmem", r.shmem);
  return r;
}

// Restarts the peak at what is resident now, after handing the allocator's free memory back to the
// system (glibc's malloc_trim), so that memory an earlier part of the program freed does not count as
// resident. Returns whether the kernel accepted the reset.
inline bool reset_peak_resident() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
  std::ofstream f("/proc/self/clear_refs");
  if (!f) return false;
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

// The block size from which glibc's malloc maps each block on its own (and unmaps it when freed).
constexpr std::size_t pinned_mmap_threshold = std::size_t(1) << 20;

// Pins glibc malloc's mmap threshold at `bytes`. By default glibc raises the threshold each time a mapped
// block is freed, up to 32 MiB, so that later blocks of up to that size come from the heap, whose freed
// pages can stay resident: one method's freed buffers then sit in the next method's resident peak. With
// the threshold pinned (which turns the raising off) every block of `bytes` or more is its own mapping,
// returned to the system when freed. Returns `bytes` when the allocator took it, 0 where it did not
// (another C library, or a sanitizer's allocator that ignores mallopt's setting).
inline std::size_t pin_mmap_threshold(std::size_t bytes = pinned_mmap_threshold) {
#ifdef __GLIBC__
  return mallopt(M_MMAP_THRESHOLD, static_cast<int>(bytes)) == 1 ? bytes : 0;
#else
  (void)bytes;
  return 0;
#endif
}

// The machine's physical memory in bytes (sysconf); 0 where it cannot be told.
inline double physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

}  // namespace lwcl
