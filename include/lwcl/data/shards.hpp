#pragma once
// Token shards: a tokenised corpus split as one flat token stream in a binary file, read by memory map.
// Layout (little-endian): magic "LWCLTOK1" | u32 version (1) | u32 width (2 or 4 bytes per token) |
// u64 vocab size | u64 token count | tokens. Written through a temporary file and a rename; reading
// checks the header, the size and that every token is below the vocabulary size.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/core/fs.hpp"

namespace lwcl::data {

inline constexpr char shard_magic[8] = {'L', 'W', 'C', 'L', 'T', 'O', 'K', '1'};
inline constexpr std::size_t shard_header_bytes = 32;

inline void write_shard(const std::string& path, const std::vector<std::int32_t>& tokens, std::uint64_t vocab_size) {
  check(vocab_size > 0, "write_shard: vocab size must be positive");
  const std::uint32_t width = vocab_size <= 65536 ? 2 : 4;
  // Every token is checked before anything is written, so bad input leaves no file behind.
  for (std::size_t i = 0; i < tokens.size(); ++i)
    check(tokens[i] >= 0 && static_cast<std::uint64_t>(tokens[i]) < vocab_size, "write_shard: token ", tokens[i],
          " at position ", i, " is outside the vocabulary of ", vocab_size);
  {
    atomic_file file(path);
    std::ostream& out = file.stream();
    const std::uint32_t version = 1;
    const std::uint64_t count = tokens.size();
    out.write(shard_magic, 8);
    out.write(reinterpret_cast<const char*>(&version), 4);
    out.write(reinterpret_cast<const char*>(&width), 4);
    out.write(reinterpret_cast<const char*>(&vocab_size), 8);
    out.write(reinterpret_cast<const char*>(&count), 8);
    for (const std::int32_t token : tokens) {
      if (width == 2) {
        const auto t = static_cast<std::uint16_t>(token);
        out.write(reinterpret_cast<const char*>(&t), 2);
      } else {
        const auto t = static_cast<std::uint32_t>(token);
        out.write(reinterpret_cast<const char*>(&t), 4);
      }
    }
    file.commit();
  }
}

// A read-only, memory-mapped shard.
class shard {
 public:
  explicit shard(const std::string& path) : path_(path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    check(fd >= 0, "shard: cannot open '", path, "': ", std::strerror(errno));
    struct stat st {};
    const bool ok = ::fstat(fd, &st) == 0;
    size_ = ok ? static_cast<std::size_t>(st.st_size) : 0;
    if (ok && size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      base_ = p == MAP_FAILED ? nullptr : static_cast<const unsigned char*>(p);
    }
    ::close(fd);
    check(ok, "shard: cannot stat '", path, "'");
    try {
      validate();
    } catch (...) {
      if (base_) ::munmap(const_cast<unsigned char*>(base_), size_);
      throw;
    }
  }
  ~shard() {
    if (base_) ::munmap(const_cast<unsigned char*>(base_), size_);
  }
  shard(const shard&) = delete;
  shard& operator=(const shard&) = delete;

  std::uint64_t size() const { return count_; }
  std::uint64_t vocab_size() const { return vocab_; }
  const std::string& path() const { return path_; }
  std::int32_t operator[](std::uint64_t i) const {
    const unsigned char* p = base_ + shard_header_bytes + i * width_;
    if (width_ == 2) {
      std::uint16_t t;
      std::memcpy(&t, p, 2);
      return t;
    }
    std::uint32_t t;
    std::memcpy(&t, p, 4);
    return static_cast<std::int32_t>(t);
  }

 private:
  void validate() {
    check(size_ >= shard_header_bytes && base_ != nullptr, "shard: '", path_, "' is truncated: ", size_,
          " bytes, fewer than the ", shard_header_bytes, "-byte header");
    check(std::memcmp(base_, shard_magic, 8) == 0, "shard: '", path_, "' is not a token shard (no LWCLTOK1 magic)");
    std::uint32_t version;
    std::memcpy(&version, base_ + 8, 4);
    check(version == 1, "shard: '", path_, "' has version ", version, ", expected 1");
    std::memcpy(&width_, base_ + 12, 4);
    check(width_ == 2 || width_ == 4, "shard: '", path_, "' has token width ", width_, ", expected 2 or 4");
    std::memcpy(&vocab_, base_ + 16, 8);
    std::memcpy(&count_, base_ + 24, 8);
    check(count_ <= (size_ - shard_header_bytes) / width_ && shard_header_bytes + count_ * width_ == size_, "shard: '", path_,
          "' declares ", count_, " tokens of ", width_, " bytes but holds ", size_ - shard_header_bytes, " bytes of tokens");
    for (std::uint64_t i = 0; i < count_; ++i) {
      const auto t = static_cast<std::uint64_t>(static_cast<std::uint32_t>((*this)[i]));
      check(t < vocab_, "shard: '", path_, "' has token ", t, " at position ", i, ", outside the vocabulary of ", vocab_);
    }
  }

  std::string path_;
  const unsigned char* base_ = nullptr;
  std::size_t size_ = 0;
  std::uint32_t width_ = 0;
  std::uint64_t vocab_ = 0, count_ = 0;
};

// The first `max_tokens` tokens of the shard at `path` (all of them when it holds fewer).
inline std::vector<std::int32_t> read_tokens(const std::string& path, std::uint64_t max_tokens) {
  const shard s(path);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(std::min(s.size(), max_tokens)));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = s[i];
  return ids;
}

}  // namespace lwcl::data
