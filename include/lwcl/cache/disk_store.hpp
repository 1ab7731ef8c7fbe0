#pragma once
// disk_store: the disk tier of the feature cache, one file per key in a directory of the run
// (b<boundary>.<teacher|student>.<batch>.lwfc), written through atomic_file (a temporary renamed over the
// name), read by memory map. Every record starts with a checked 128-byte header (layout in
// docs/feature-cache.md) that carries CRC-32s of itself and of the payload: every size and offset is
// bounds-checked before a byte is read, and a record changed on the disk is an error, never trained on.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <zlib.h>

#include "lwcl/cache/concept.hpp"
#include "lwcl/core/fs.hpp"

namespace lwcl::cache {

inline constexpr char feature_record_magic[8] = {'L', 'W', 'C', 'L', 'F', 'E', 'A', '1'};
inline constexpr std::uint32_t feature_record_version = 2;
inline constexpr std::size_t feature_record_header_bytes = 128;
inline constexpr std::string_view feature_record_extension = ".lwfc";

namespace cache_detail {

// Header offsets (little-endian; docs/feature-cache.md has the table).
struct header_layout {
  static constexpr std::size_t magic = 0, format = 8, header_bytes = 12, boundary = 16, batch = 24, src = 32,
                               type = 33, enc = 34, rank = 35, reserved0 = 36, version = 40, extents = 48,
                               raw_bytes = 96, payload_bytes = 104, payload_crc = 112, reserved1 = 116,
                               header_crc = 124;
};

// CRC-32 (zlib's, the ISO-HDLC polynomial) of bytes, in pieces of at most 1 GiB (zlib's length is 32-bit).
inline std::uint32_t crc32_of(const std::byte* p, std::size_t n) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  while (n > 0) {
    const std::size_t piece = n < (std::size_t{1} << 30) ? n : (std::size_t{1} << 30);
    crc = ::crc32(crc, reinterpret_cast<const Bytef*>(p), static_cast<uInt>(piece));
    p += piece;
    n -= piece;
  }
  return static_cast<std::uint32_t>(crc);
}

template <class T>
void store_le(std::byte* base, std::size_t offset, T v) {
  std::memcpy(base + offset, &v, sizeof v);
}
template <class T>
T load_le(const std::byte* base, std::size_t offset) {
  T v;
  std::memcpy(&v, base + offset, sizeof v);
  return v;
}

inline std::array<std::byte, feature_record_header_bytes> encode_header(const feature_key& k, const record_meta& m,
                                                                       std::uint32_t payload_crc) {
  using L = header_layout;
  std::array<std::byte, feature_record_header_bytes> h{};
  std::memcpy(h.data() + L::magic, feature_record_magic, 8);
  store_le<std::uint32_t>(h.data(), L::format, feature_record_version);
  store_le<std::uint32_t>(h.data(), L::header_bytes, static_cast<std::uint32_t>(feature_record_header_bytes));
  store_le<std::int64_t>(h.data(), L::boundary, k.boundary);
  store_le<std::int64_t>(h.data(), L::batch, k.batch);
  store_le<std::uint8_t>(h.data(), L::src, static_cast<std::uint8_t>(k.src));
  store_le<std::uint8_t>(h.data(), L::type, static_cast<std::uint8_t>(m.type));
  store_le<std::uint8_t>(h.data(), L::enc, static_cast<std::uint8_t>(m.enc));
  store_le<std::uint8_t>(h.data(), L::rank, static_cast<std::uint8_t>(m.shape.rank()));
  store_le<std::uint64_t>(h.data(), L::version, m.version);
  for (int i = 0; i < m.shape.rank(); ++i)
    store_le<std::int64_t>(h.data(), L::extents + 8 * static_cast<std::size_t>(i), m.shape[i]);
  store_le<std::uint64_t>(h.data(), L::raw_bytes, m.raw_bytes());
  store_le<std::uint64_t>(h.data(), L::payload_bytes, m.stored_bytes);
  store_le<std::uint32_t>(h.data(), L::payload_crc, payload_crc);
  store_le<std::uint32_t>(h.data(), L::header_crc, crc32_of(h.data(), L::header_crc));
  return h;
}

struct record_header {
  feature_key key;
  record_meta meta;
  std::uint32_t payload_crc = 0;
};

// Validates a record header against the file's size. `h` holds at least feature_record_header_bytes
// bytes whenever file_bytes does.
inline record_header decode_header(const std::byte* h, std::uint64_t file_bytes, const std::string& path) {
  using L = header_layout;
  const auto where = [&] { return "disk_store: '" + path + "'"; };
  check(file_bytes >= feature_record_header_bytes, where(), " is truncated: ", file_bytes, " bytes, fewer than the ",
        feature_record_header_bytes, "-byte header");
  check(std::memcmp(h + L::magic, feature_record_magic, 8) == 0, where(), " is not a feature record (no LWCLFEA1 magic)");
  const auto format = load_le<std::uint32_t>(h, L::format);
  check(format == feature_record_version, where(), " has format version ", format, ", expected ", feature_record_version);
  const auto header_bytes = load_le<std::uint32_t>(h, L::header_bytes);
  check(header_bytes == feature_record_header_bytes, where(), " declares a ", header_bytes, "-byte header, expected ",
        feature_record_header_bytes);
  const auto stored_crc = load_le<std::uint32_t>(h, L::header_crc), crc = crc32_of(h, L::header_crc);
  check(stored_crc == crc, where(), " has a corrupted header: its CRC-32 is ", crc, ", the header records ", stored_crc,
        " (the file changed after it was written; delete it, or the cache directory, to recompute it)");
  bool reserved_zero = load_le<std::uint32_t>(h, L::reserved0) == 0;
  for (std::size_t i = L::reserved1; i < L::header_crc; ++i) reserved_zero = reserved_zero && h[i] == std::byte{0};
  check(reserved_zero, where(), " has non-zero reserved header bytes");

  record_header r;
  r.key.boundary = load_le<std::int64_t>(h, L::boundary);
  r.key.batch = load_le<std::int64_t>(h, L::batch);
  check(r.key.boundary >= 0 && r.key.batch >= 0, where(), " has boundary ", r.key.boundary, " and batch ", r.key.batch,
        ", expected non-negative values");
  const auto src = load_le<std::uint8_t>(h, L::src);
  check(src <= 1, where(), " has source ", int(src), ", expected 0 (teacher) or 1 (student)");
  r.key.src = static_cast<source>(src);
  const auto type = load_le<std::uint8_t>(h, L::type);
  check(is_feature_dtype(static_cast<dtype>(type)), where(), " has dtype code ", int(type), ", expected f32 (",
        int(dtype::f32), "), bf16 (", int(dtype::bf16), ") or f64 (", int(dtype::f64), ")");
  r.meta.type = static_cast<dtype>(type);
  const auto enc = load_le<std::uint8_t>(h, L::enc);
  check(enc <= static_cast<std::uint8_t>(encoding::gauss), where(), " has encoding code ", int(enc),
        ", expected 0 (raw), 1 (zstd), 2 (exponent) or 3 (gauss)");
  r.meta.enc = static_cast<encoding>(enc);
  const auto rank = load_le<std::uint8_t>(h, L::rank);
  check(rank >= 1 && rank <= shape::max_rank, where(), " has rank ", int(rank), ", expected 1 to ", shape::max_rank);
  // Bounded so that the element count times the element size cannot overflow 64 bits.
  constexpr std::uint64_t max_elements = std::uint64_t{1} << 60;
  std::uint64_t numel = 1;
  for (int i = 0; i < shape::max_rank; ++i) {
    const auto d = load_le<std::int64_t>(h, L::extents + 8 * static_cast<std::size_t>(i));
    if (i >= rank) {
      check(d == 0, where(), " has extent ", d, " past its rank ", int(rank), ", expected 0");
      continue;
    }
    check(d >= 0, where(), " has negative extent ", d, " on axis ", i);
    const auto u = static_cast<std::uint64_t>(d);
    check(u == 0 || numel <= max_elements / u, where(), " has a shape too large to address");
    numel *= u;
    r.meta.shape.push(d);
  }
  r.meta.version = load_le<std::uint64_t>(h, L::version);
  const auto raw = load_le<std::uint64_t>(h, L::raw_bytes);
  check(raw == r.meta.raw_bytes(), where(), " declares ", raw, " raw bytes, but ", dtype_name(r.meta.type),
        r.meta.shape.str(), " needs ", r.meta.raw_bytes());
  r.meta.stored_bytes = load_le<std::uint64_t>(h, L::payload_bytes);
  r.payload_crc = load_le<std::uint32_t>(h, L::payload_crc);
  check(r.meta.enc != encoding::raw || r.meta.stored_bytes == raw, where(), " is raw but declares a ",
        r.meta.stored_bytes, "-byte payload for ", raw, " raw bytes");
  const std::uint64_t held = file_bytes - feature_record_header_bytes;
  check(r.meta.stored_bytes == held, where(), " declares a ", r.meta.stored_bytes, "-byte payload but holds ", held,
        " bytes after the header");
  return r;
}

// A read-only whole-file memory map.
class mapped_file {
 public:
  mapped_file(const std::string& path, int fd, std::size_t bytes) : bytes_(bytes) {
    if (bytes_ == 0) return;
    void* p = ::mmap(nullptr, bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    check(p != MAP_FAILED, "disk_store: cannot map '", path, "': ", std::strerror(errno));
    base_ = static_cast<const std::byte*>(p);
    ::madvise(p, bytes_, MADV_SEQUENTIAL);  // a record is read once, front to back
  }
  ~mapped_file() {
    if (base_) ::munmap(const_cast<std::byte*>(base_), bytes_);
  }
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
  const std::byte* data() const { return base_; }
  std::size_t size() const { return bytes_; }

 private:
  const std::byte* base_ = nullptr;
  std::size_t bytes_ = 0;
};

// Closes a file descriptor on scope exit.
struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace cache_detail

class disk_store {
 public:
  static constexpr std::string_view name = "disk";
  static constexpr lwcl::tier memory_tier = lwcl::tier::disk;

  // Opens (creating it if needed) a cache directory and indexes the records already there, each header
  // checked. Temporary files a killed writer left behind are deleted: a directory belongs to one store.
  explicit disk_store(std::filesystem::path dir) : dir_(std::move(dir)) {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    check(!ec, "disk_store: cannot create the cache directory '", dir_.string(), "': ", ec.message());
    std::map<feature_key, entry> index;
    cache_detail::usage_counter usage;
    std::uint64_t file_bytes = 0;
    std::filesystem::directory_iterator listing(dir_, ec);
    check(!ec, "disk_store: cannot list the cache directory '", dir_.string(), "': ", ec.message());
    for (const auto& de : listing) {
      if (!de.is_regular_file(ec)) continue;
      const std::string file = de.path().filename().string();
      if (file.find(std::string(feature_record_extension) + ".tmp") != std::string::npos) {
        std::filesystem::remove(de.path(), ec);
        ++removed_temporaries_;
        continue;
      }
      if (de.path().extension() != feature_record_extension) continue;
      const auto [h, bytes] = read_header(de.path().string());
      check(path_of(h.key).filename() == de.path().filename(), "disk_store: '", de.path().string(),
            "' holds the record of ", h.key.str(), ", not the one its name says");
      index.emplace(h.key, entry{h.meta, bytes});
      usage.add(h.meta);
      file_bytes += bytes;
    }
    index_ = std::move(index);
    usage_ = usage;
    file_bytes_ = file_bytes;
    memory().on_alloc(memory_tier, file_bytes_, purpose::cache);
  }
  // The files stay (a later run reopens them); the tracker stops counting them.
  ~disk_store() { memory().on_free(memory_tier, file_bytes_, purpose::cache); }
  disk_store(const disk_store&) = delete;
  disk_store& operator=(const disk_store&) = delete;

  const std::filesystem::path& directory() const { return dir_; }
  std::filesystem::path path_of(const feature_key& k) const {
    return dir_ / lwcl::detail::concat("b", k.boundary, ".", source_name(k.src), ".", k.batch, feature_record_extension);
  }
  // Leftover temporary files deleted when the directory was opened.
  std::size_t removed_temporaries() const { return removed_temporaries_; }

  void put(const feature_key& k, const record_meta& m, std::span<const std::byte> payload) {
    cache_detail::check_record(name, k, m, payload.size());
    const std::filesystem::path path = path_of(k);
    // Each writer its own temporary (threads may put one key at once); the rename alone, no fsync: a
    // record torn by a lost machine fails its CRC, and features can always be recomputed.
    const auto prefixed = [](const error& e) { return error(lwcl::detail::concat("disk_store: ", e.what())); };
    std::optional<atomic_file> f;
    try {
      f.emplace(path, write_options{.sync = durability::process, .unique_temporary = true});
      const auto header = cache_detail::encode_header(k, m, cache_detail::crc32_of(payload.data(), payload.size()));
      f->write(header.data(), header.size());
      f->write(payload.data(), payload.size());
      f->stream().flush();  // the bytes to the file now, outside the lock
    } catch (const error& e) {
      throw prefixed(e);
    }
    const std::uint64_t bytes = feature_record_header_bytes + payload.size();
    // The rename and the index together under the lock: a reader opens the old file or the new one.
    std::unique_lock lock(mu_);
    try {
      f->commit();
    } catch (const error& e) {
      throw prefixed(e);
    }
    auto [it, inserted] = index_.try_emplace(k, entry{m, bytes});
    if (!inserted) {
      forget(it->second);
      it->second = entry{m, bytes};
    }
    usage_.add(m);
    file_bytes_ += bytes;
    memory().on_alloc(memory_tier, bytes, purpose::cache);
  }

  std::optional<record_meta> meta(const feature_key& k) const {
    std::shared_lock lock(mu_);
    const auto it = index_.find(k);
    if (it == index_.end()) return std::nullopt;
    return it->second.meta;
  }

  // Maps the record's file and checks its header against the file and the key.
  std::optional<record_view> find(const feature_key& k) const {
    const std::string path = path_of(k).string();
    std::shared_ptr<const cache_detail::mapped_file> map;
    {
      // Opened under the lock, so a concurrent put's rename or an erase cannot slip in between.
      std::shared_lock lock(mu_);
      if (!index_.contains(k)) return std::nullopt;
      cache_detail::fd_guard f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
      check(f.fd >= 0, "disk_store: cannot open '", path, "': ", std::strerror(errno));
      struct stat st {};
      check(::fstat(f.fd, &st) == 0, "disk_store: cannot stat '", path, "': ", std::strerror(errno));
      const auto size = static_cast<std::uint64_t>(st.st_size);
      check(size >= feature_record_header_bytes, "disk_store: '", path, "' is truncated: ", size,
            " bytes, fewer than the ", feature_record_header_bytes, "-byte header");
      map = std::make_shared<const cache_detail::mapped_file>(path, f.fd, static_cast<std::size_t>(size));
    }
    const cache_detail::record_header h = cache_detail::decode_header(map->data(), map->size(), path);
    check(h.key == k, "disk_store: '", path, "' holds the record of ", h.key.str(), ", expected ", k.str());
    const std::span<const std::byte> payload(map->data() + feature_record_header_bytes, h.meta.stored_bytes);
    const std::uint32_t crc = cache_detail::crc32_of(payload.data(), payload.size());
    check(crc == h.payload_crc, "disk_store: '", path, "' has a corrupted payload: its CRC-32 is ", crc,
          ", the header records ", h.payload_crc, " (the file changed after it was written; delete it, or the "
          "cache directory, to recompute it)");
    return record_view{h.meta, payload, map};
  }

  record_meta read(const feature_key& k, std::span<std::byte> out) const {
    const std::optional<record_view> v = find(k);
    if (!v) cache_detail::fail_missing(name, k);
    return cache_detail::copy_raw(name, k, *v, out);
  }

  bool erase(const feature_key& k) {
    std::unique_lock lock(mu_);
    const auto it = index_.find(k);
    if (it == index_.end()) return false;
    remove_file(k);
    forget(it->second);
    index_.erase(it);
    return true;
  }

  std::size_t invalidate(index_t boundary, source src) {
    std::unique_lock lock(mu_);
    std::size_t n = 0;
    for (auto it = index_.begin(); it != index_.end();) {
      if (it->first.boundary == boundary && it->first.src == src) {
        remove_file(it->first);
        forget(it->second);
        it = index_.erase(it);
        ++n;
      } else {
        ++it;
      }
    }
    return n;
  }

  std::vector<feature_key> keys() const {
    std::shared_lock lock(mu_);
    std::vector<feature_key> out;
    out.reserve(index_.size());
    for (const auto& [k, e] : index_) out.push_back(k);
    return out;
  }

  store_usage usage() const {
    std::shared_lock lock(mu_);
    return usage_.snapshot(name, memory_tier);
  }

 private:
  struct entry {
    record_meta meta;
    std::uint64_t file_bytes = 0;
  };

  static std::pair<cache_detail::record_header, std::uint64_t> read_header(const std::string& path) {
    cache_detail::fd_guard f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    check(f.fd >= 0, "disk_store: cannot open '", path, "': ", std::strerror(errno));
    struct stat st {};
    check(::fstat(f.fd, &st) == 0, "disk_store: cannot stat '", path, "': ", std::strerror(errno));
    const auto size = static_cast<std::uint64_t>(st.st_size);
    std::array<std::byte, feature_record_header_bytes> h{};
    if (size >= h.size()) {
      std::size_t got = 0;
      while (got < h.size()) {
        const ::ssize_t r = ::pread(f.fd, h.data() + got, h.size() - got, static_cast<off_t>(got));
        if (r < 0 && errno == EINTR) continue;
        check(r > 0, "disk_store: reading the header of '", path, "' failed: ", r < 0 ? std::strerror(errno) : "end of file");
        got += static_cast<std::size_t>(r);
      }
    }
    return {cache_detail::decode_header(h.data(), size, path), size};
  }

  // Callers hold the exclusive lock.
  void remove_file(const feature_key& k) {
    const std::string path = path_of(k).string();
    check(::unlink(path.c_str()) == 0 || errno == ENOENT, "disk_store: cannot delete '", path, "': ", std::strerror(errno));
  }
  void forget(const entry& e) {
    usage_.remove(e.meta);
    file_bytes_ -= e.file_bytes;
    memory().on_free(memory_tier, e.file_bytes, purpose::cache);
  }

  std::filesystem::path dir_;
  mutable std::shared_mutex mu_;
  std::map<feature_key, entry> index_;
  cache_detail::usage_counter usage_;
  std::uint64_t file_bytes_ = 0;
  std::size_t removed_temporaries_ = 0;
};
static_assert(feature_store<disk_store>);

}  // namespace lwcl::cache
