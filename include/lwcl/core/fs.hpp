#pragma once
// Whole-file reads, and the one way the project writes a file: atomic_file. Its bytes go to a temporary
// beside the target (<path>.tmp); commit() flushes them to the disk (fsync), renames the temporary over
// the target and syncs the directory, so that a run killed at any moment, or a machine that loses power,
// leaves either the old file or the whole new one. A write that fails (a full disk, a file-size limit)
// throws an lwcl::error naming the file and the reason, removes the temporary and leaves the old file as
// it was; so does an atomic_file destroyed without commit().

#include <fcntl.h>
#include <sys/file.h>
#include <sys/types.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>
#include <streambuf>
#include <string>
#include <string_view>
#include <utility>

#include "lwcl/core/error.hpp"

namespace lwcl {

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "cannot read '", path.string(), "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// What a written file survives once commit() returns.
enum class durability {
  synced,   // a killed process and a lost machine: the file and its directory are fsynced
  process,  // a killed process only (the rename alone): for data a checksum guards and a run can remake
};

struct write_options {
  durability sync = durability::synced;
  // The temporary is <path>.tmp.<pid>.<n>, not <path>.tmp: for writers that may race on one target (the
  // disk cache's threads), each then cleaning up its own directory's leftovers.
  bool unique_temporary = false;
};

namespace fs_detail {

inline std::string reason(int err) {
  if (err == ENOSPC) return "no space left on the device";
  if (err == EFBIG) return "the file-size limit was reached";
  if (err == EDQUOT) return "the disk quota is exhausted";
  return std::strerror(err);
}

inline std::atomic<std::uint64_t>& temporary_counter() {
  static std::atomic<std::uint64_t> n{0};
  return n;
}

// Fault injection for tests/fault/kill_anywhere.sh: with LWCL_KILL_IN_WRITE=N in the environment, the
// process kills itself (SIGKILL) in its N-th atomic_file commit, once the temporary is written and
// before the rename: a kill in the middle of a checkpoint write, at a chosen write. Unset: one getenv.
inline void kill_point() {
  static const long at = [] {
    const char* v = std::getenv("LWCL_KILL_IN_WRITE");
    return v ? std::strtol(v, nullptr, 10) : 0L;
  }();
  if (at <= 0) return;
  static std::atomic<long> n{0};
  if (++n == at) std::raise(SIGKILL);
}

// fsync of a directory, so that a rename into it is on the disk. Filesystems that cannot sync a
// directory (EINVAL) are left as they are.
inline int sync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  int err = 0;
  if (::fsync(fd) != 0 && errno != EINVAL) err = errno;
  ::close(fd);
  return err;
}

}  // namespace fs_detail

// Writes one file atomically: write through stream() or write(), then commit().
//   atomic_file f(dir / "optimizer.bin");
//   adam.save(f.stream());
//   f.commit();
class atomic_file : private std::streambuf {
 public:
  explicit atomic_file(std::filesystem::path target, write_options o = {})
      : target_(std::move(target)), opt_(o), out_(this) {
    std::string tmp = target_.string();
    tmp.append(".tmp");
    if (opt_.unique_temporary) {
      tmp.push_back('.');
      tmp.append(std::to_string(::getpid()));
      tmp.push_back('.');
      tmp.append(std::to_string(fs_detail::temporary_counter()++));
    }
    tmp_ = std::move(tmp);
    const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (opt_.unique_temporary ? O_EXCL : O_TRUNC);
    fd_ = ::open(tmp_.c_str(), flags, 0644);
    const int err = errno;
    check(fd_ >= 0, "cannot write '", target_.string(), "': creating '", tmp_.string(), "' failed: ",
          fs_detail::reason(err));
    setp(buf_.data(), buf_.data() + buf_.size());
  }
  atomic_file(const atomic_file&) = delete;
  atomic_file& operator=(const atomic_file&) = delete;
  ~atomic_file() { abandon(); }

  std::ostream& stream() { return out_; }
  void write(const void* data, std::size_t n) {
    out_.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  }
  const std::filesystem::path& target() const { return target_; }
  const std::filesystem::path& temporary() const { return tmp_; }

  // Makes the written bytes the target's contents; throws, and keeps the old file, when any write failed.
  void commit() {
    check(fd_ >= 0, "atomic_file: '", target_.string(), "' was already committed or abandoned");
    if (!drain() || out_.bad()) fail_with(err_ ? err_ : EIO, "writing");
    if (opt_.sync == durability::synced && ::fsync(fd_) != 0) fail_with(errno, "flushing");
    const int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) fail_with(errno, "closing");
    fs_detail::kill_point();
    if (::rename(tmp_.c_str(), target_.c_str()) != 0) fail_with(errno, "renaming");
    done_ = true;
    if (opt_.sync == durability::synced)
      if (const int err = fs_detail::sync_directory(target_.parent_path()); err != 0)
        fail("'", target_.string(), "' was written, but syncing its directory failed: ", fs_detail::reason(err),
             " (a lost machine could lose the rename)");
  }
  // Throws the write's own error (the file, the reason) when a write into this file has failed: for a
  // writer whose own check of the stream fired first.
  void fail_if_write_failed() {
    if (err_ != 0) fail_with(err_, "writing");
  }

 private:
  // The buffer's bytes to the file; false (and err_ set) on a failed write.
  bool drain() {
    const char* p = pbase();
    const std::size_t n = static_cast<std::size_t>(pptr() - pbase());
    setp(buf_.data(), buf_.data() + buf_.size());
    return put(p, n);
  }
  bool put(const char* p, std::size_t n) {
    if (err_ != 0) return false;
    while (n > 0) {
      const ::ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        err_ = w < 0 ? errno : EIO;
        return false;
      }
      p += w;
      n -= static_cast<std::size_t>(w);
      written_ += static_cast<std::uint64_t>(w);
    }
    return true;
  }
  int_type overflow(int_type c) override {
    if (fd_ < 0 || !drain()) return traits_type::eof();
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    *pptr() = traits_type::to_char_type(c);
    pbump(1);
    return c;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    if (fd_ < 0 || n <= 0) return 0;
    const auto room = epptr() - pptr();
    if (n <= room) {
      std::memcpy(pptr(), s, static_cast<std::size_t>(n));
      pbump(static_cast<int>(n));
      return n;
    }
    if (!drain() || !put(s, static_cast<std::size_t>(n))) return 0;
    return n;
  }
  int sync() override { return fd_ >= 0 && drain() ? 0 : -1; }

  [[noreturn]] void fail_with(int err, const char* what) {
    const std::uint64_t written = written_;
    abandon();
    fail("cannot write '", target_.string(), "': ", what, " '", tmp_.string(), "' failed after ", written,
         " bytes: ", fs_detail::reason(err), " (the temporary was removed; '", target_.filename().string(),
         "' is as it was)");
  }
  void abandon() noexcept {
    if (fd_ >= 0) ::close(std::exchange(fd_, -1));
    if (!done_) ::unlink(tmp_.c_str());
    done_ = true;
  }

  std::filesystem::path target_, tmp_;
  write_options opt_;
  std::ostream out_;
  int fd_ = -1;
  int err_ = 0;
  bool done_ = false;  // renamed over the target, or removed
  std::uint64_t written_ = 0;
  std::array<char, 1 << 16> buf_{};
};

// A whole file from `bytes`, atomically.
inline void write_file_atomic(const std::filesystem::path& path, std::string_view bytes, write_options o = {}) {
  atomic_file f(path, o);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

inline void write_text_atomic(const std::filesystem::path& path, std::string_view text) {
  write_file_atomic(path, text);
}

// A whole file from what `fill` writes into a std::ostream, atomically.
template <class Fill>
void write_stream_atomic(const std::filesystem::path& path, Fill&& fill, write_options o = {}) {
  atomic_file f(path, o);
  try {
    fill(f.stream());
  } catch (const error&) {
    f.fail_if_write_failed();  // a failed write was the cause: name the file and the reason
    throw;
  }
  f.commit();
}

// An exclusive advisory lock (flock) on a file, created when missing: held from construction to
// destruction, and released by the kernel if the process dies. For a read-decide-write that processes
// started together must do once (gemm::choice's cache). Where the file cannot be opened (an unwritable
// folder) it holds nothing, and the caller goes on unlocked.
class file_lock {
 public:
  explicit file_lock(const std::filesystem::path& path) noexcept
      : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ < 0) return;
    int r;
    do r = ::flock(fd_, LOCK_EX);
    while (r != 0 && errno == EINTR);
    if (r != 0) ::close(std::exchange(fd_, -1));
  }
  ~file_lock() {
    if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the lock
  }
  file_lock(const file_lock&) = delete;
  file_lock& operator=(const file_lock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace lwcl
