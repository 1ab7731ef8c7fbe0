#pragma once
// GGUF files, llama.cpp's model format (version 3; version 2 is read too): reading by memory map with every
// count, length, extent and offset checked against the file before it is used, and writing (to a temporary
// name, then renamed). The layout, all little-endian:
//   "GGUF", u32 version, u64 tensor count, u64 metadata count;
//   each metadata pair: the key (u64 length, then its bytes), u32 value type, the value (a string is a u64
//   length and its bytes; an array is u32 element type, u64 count, then the elements);
//   each tensor's description: its name, u32 dimension count (1 to 4), u64 extents with the innermost (a
//   row's length) first, u32 ggml type, u64 offset from the start of the data area;
//   zero padding to the alignment (general.alignment, 32 when absent), then the data area, every tensor at
//   an offset that is a multiple of the alignment.
// The tensor types lwcl reads and writes are F32, F16, BF16, Q8_0 and Q4_0 (docs/file-formats.md); a file
// holding another type is read, and that tensor's data refused when asked for.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/core/fs.hpp"
#include "lwcl/tensor/dtype.hpp"

namespace lwcl::checkpoint::gguf {

inline constexpr std::uint32_t magic = 0x46554747u;  // "GGUF" read as a little-endian u32
inline constexpr std::uint32_t version = 3;
inline constexpr std::uint32_t default_alignment = 32;
inline constexpr int max_dims = 4;

// The metadata value types (gguf_type).
enum class value_type : std::uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7, string = 8, array = 9, u64 = 10, i64 = 11, f64 = 12
};

inline std::string_view value_type_name(value_type t) {
  switch (t) {
    case value_type::u8: return "u8";
    case value_type::i8: return "i8";
    case value_type::u16: return "u16";
    case value_type::i16: return "i16";
    case value_type::u32: return "u32";
    case value_type::i32: return "i32";
    case value_type::f32: return "f32";
    case value_type::boolean: return "bool";
    case value_type::string: return "string";
    case value_type::array: return "array";
    case value_type::u64: return "u64";
    case value_type::i64: return "i64";
    case value_type::f64: return "f64";
  }
  return "?";
}

// Bytes of one scalar of type t (0 for string and array, whose size is in the file).
inline std::size_t value_size(value_type t) {
  switch (t) {
    case value_type::u8: case value_type::i8: case value_type::boolean: return 1;
    case value_type::u16: case value_type::i16: return 2;
    case value_type::u32: case value_type::i32: case value_type::f32: return 4;
    case value_type::u64: case value_type::i64: case value_type::f64: return 8;
    default: return 0;
  }
}
inline bool is_integer(value_type t) { return value_size(t) > 0 && t != value_type::f32 && t != value_type::f64; }
inline bool is_real(value_type t) { return t == value_type::f32 || t == value_type::f64; }

// One metadata value: a scalar (one element) or an array of one element type. Integers and booleans are
// held as i64 (a u64 past 2^63 keeps its bits), reals as double (an f32 exactly), strings as bytes.
struct value {
  value_type type = value_type::u32;  // the scalar's type, or the array's element type
  bool array = false;
  std::vector<std::int64_t> ints;
  std::vector<double> reals;
  std::vector<std::string> strings;

  std::size_t size() const { return type == value_type::string ? strings.size() : is_real(type) ? reals.size() : ints.size(); }
  std::string describe() const {
    return array ? "array of " + std::to_string(size()) + " " + std::string(value_type_name(type)) : std::string(value_type_name(type));
  }
};

inline value integer(value_type t, std::int64_t v) { return value{t, false, {v}, {}, {}}; }
inline value integers(value_type t, std::vector<std::int64_t> v) { return value{t, true, std::move(v), {}, {}}; }
inline value real(value_type t, double v) { return value{t, false, {}, {v}, {}}; }
inline value text(std::string s) { return value{value_type::string, false, {}, {}, {std::move(s)}}; }
inline value texts(std::vector<std::string> s) { return value{value_type::string, true, {}, {}, std::move(s)}; }
inline value boolean(bool b) { return integer(value_type::boolean, b ? 1 : 0); }

// The ggml tensor types lwcl knows. Q8_0: blocks of 32 values, an f16 scale d then 32 int8 q, value d * q.
// Q4_0: blocks of 32, an f16 scale d then 16 bytes whose byte j holds value j in its low nibble and value
// j + 16 in its high one, value d * (nibble - 8).
enum class tensor_type : std::uint32_t { f32 = 0, f16 = 1, q4_0 = 2, q8_0 = 8, bf16 = 30 };

inline bool known_type(std::uint32_t t) { return t == 0 || t == 1 || t == 2 || t == 8 || t == 30; }
inline std::string_view tensor_type_name(tensor_type t) {
  switch (t) {
    case tensor_type::f32: return "F32";
    case tensor_type::f16: return "F16";
    case tensor_type::q4_0: return "Q4_0";
    case tensor_type::q8_0: return "Q8_0";
    case tensor_type::bf16: return "BF16";
  }
  return "?";
}
// Values a block holds, and its bytes.
inline std::uint64_t block_values(tensor_type t) { return t == tensor_type::q4_0 || t == tensor_type::q8_0 ? 32 : 1; }
inline std::uint64_t block_bytes(tensor_type t) {
  switch (t) {
    case tensor_type::f32: return 4;
    case tensor_type::f16: case tensor_type::bf16: return 2;
    case tensor_type::q4_0: return 18;
    case tensor_type::q8_0: return 34;
  }
  return 0;
}
inline constexpr std::uint64_t q_block = 32;

// Bytes of a row of n values of type t (n a multiple of the block; the caller checks).
inline std::uint64_t row_bytes(tensor_type t, std::uint64_t n) { return n / block_values(t) * block_bytes(t); }

// The f32 values of `n` elements of type t at p (n a multiple of the block size for Q8_0 and Q4_0).
inline void dequantize_row(tensor_type t, const unsigned char* p, float* out, std::uint64_t n) {
  switch (t) {
    case tensor_type::f32: std::memcpy(out, p, n * 4); return;
    case tensor_type::f16:
      for (std::uint64_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = f16_to_float(h);
      }
      return;
    case tensor_type::bf16:
      for (std::uint64_t i = 0; i < n; ++i) {
        std::uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        out[i] = bf16::from_bits(b).to_float();
      }
      return;
    case tensor_type::q8_0:
      for (std::uint64_t b = 0; b < n / q_block; ++b, p += 34) {
        std::uint16_t h;
        std::memcpy(&h, p, 2);
        const float d = f16_to_float(h);
        for (std::uint64_t j = 0; j < q_block; ++j) out[b * q_block + j] = d * static_cast<float>(static_cast<std::int8_t>(p[2 + j]));
      }
      return;
    case tensor_type::q4_0:
      for (std::uint64_t b = 0; b < n / q_block; ++b, p += 18) {
        std::uint16_t h;
        std::memcpy(&h, p, 2);
        const float d = f16_to_float(h);
        for (std::uint64_t j = 0; j < 16; ++j) {
          out[b * q_block + j] = d * static_cast<float>((p[2 + j] & 15) - 8);
          out[b * q_block + j + 16] = d * static_cast<float>((p[2 + j] >> 4) - 8);
        }
      }
      return;
  }
  fail("gguf: cannot convert tensor type ", static_cast<std::uint32_t>(t));
}

struct tensor_info {
  std::string name;
  std::vector<std::uint64_t> dims;  // innermost first: dims[0] is a row's length
  std::uint32_t type = 0;           // ggml type id (known_type says whether lwcl reads it)
  std::uint64_t offset = 0;         // from the start of the data area
  std::uint64_t bytes = 0;          // 0 for a type lwcl does not know

  std::uint64_t rows() const {
    std::uint64_t r = 1;
    for (std::size_t i = 1; i < dims.size(); ++i) r *= dims[i];
    return r;
  }
  std::uint64_t numel() const { return rows() * dims.front(); }
  std::string shape() const {
    std::string s = "[";
    for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + "]";
  }
};

namespace detail {

// Reads little-endian fields from a byte range, every read checked against what is left.
class cursor {
 public:
  cursor(const unsigned char* p, std::size_t size, const std::string& path) : p_(p), size_(size), path_(path) {}
  std::size_t at() const { return at_; }
  std::size_t left() const { return size_ - at_; }
  void need(std::uint64_t n, std::string_view what) const {
    check(n <= left(), "gguf: '", path_, "' is truncated or corrupt: ", what, " needs ", n, " bytes at offset ", at_, ", ",
          left(), " are left");
  }
  template <class T>
  T get(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  std::string string(std::string_view what) {
    const auto n = get<std::uint64_t>(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(p_ + at_), static_cast<std::size_t>(n));
    at_ += static_cast<std::size_t>(n);
    return s;
  }

 private:
  const unsigned char* p_;
  std::size_t size_, at_ = 0;
  const std::string& path_;
};

inline std::int64_t read_integer(cursor& c, value_type t, std::string_view what) {
  switch (t) {
    case value_type::u8: return c.get<std::uint8_t>(what);
    case value_type::i8: return c.get<std::int8_t>(what);
    case value_type::u16: return c.get<std::uint16_t>(what);
    case value_type::i16: return c.get<std::int16_t>(what);
    case value_type::u32: return c.get<std::uint32_t>(what);
    case value_type::i32: return c.get<std::int32_t>(what);
    case value_type::u64: return static_cast<std::int64_t>(c.get<std::uint64_t>(what));
    case value_type::i64: return c.get<std::int64_t>(what);
    case value_type::boolean: return c.get<std::uint8_t>(what);
    default: fail("gguf: read_integer: not an integer type");
  }
}

inline void write_integer(std::string& out, value_type t, std::int64_t v) {
  const std::size_t n = value_size(t);
  for (std::size_t i = 0; i < n; ++i) out.push_back(static_cast<char>(static_cast<std::uint64_t>(v) >> (8 * i)));
}

template <class T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
inline void put_string(std::string& out, const std::string& s) {
  put<std::uint64_t>(out, s.size());
  out += s;
}

}  // namespace detail

// A read-only, memory-mapped GGUF file. Construction validates the header, the metadata and every
// tensor's description against the file; afterwards every access is in bounds.
class file {
 public:
  explicit file(const std::string& path) : path_(path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    check(fd >= 0, "gguf: cannot open '", path, "': ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      fail("gguf: cannot stat '", path, "'");
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      ::close(fd);
      check(p != MAP_FAILED, "gguf: cannot map '", path, "'");
      base_ = static_cast<const unsigned char*>(p);
    } else {
      ::close(fd);
    }
    try {
      parse();
    } catch (...) {
      unmap();
      throw;
    }
  }
  ~file() { unmap(); }
  file(const file&) = delete;
  file& operator=(const file&) = delete;

  const std::string& path() const { return path_; }
  std::uint32_t file_version() const { return version_; }
  std::uint32_t alignment() const { return alignment_; }
  std::size_t bytes() const { return size_; }
  const std::vector<std::pair<std::string, value>>& metadata() const { return metadata_; }
  const std::vector<tensor_info>& tensors() const { return tensors_; }

  bool has(const std::string& key) const { return keys_.count(key) != 0; }
  const value& get(const std::string& key) const {
    const auto it = keys_.find(key);
    check(it != keys_.end(), "gguf: '", path_, "' has no metadata key '", key, "'");
    return metadata_[it->second].second;
  }
  // A scalar integer (any integer type), a scalar real (f32 or f64) or a string, the error naming the key.
  std::int64_t get_int(const std::string& key) const {
    const value& v = get(key);
    check(!v.array && is_integer(v.type), "gguf: '", path_, "': metadata '", key, "' is ", v.describe(), ", expected an integer");
    return v.ints.front();
  }
  double get_real(const std::string& key) const {
    const value& v = get(key);
    check(!v.array && is_real(v.type), "gguf: '", path_, "': metadata '", key, "' is ", v.describe(), ", expected f32 or f64");
    return v.reals.front();
  }
  const std::string& get_string(const std::string& key) const {
    const value& v = get(key);
    check(!v.array && v.type == value_type::string, "gguf: '", path_, "': metadata '", key, "' is ", v.describe(),
          ", expected a string");
    return v.strings.front();
  }
  // An integer for each of n layers: one scalar for all, or an array of n (as llama.cpp reads per-layer widths).
  std::vector<std::int64_t> get_per_layer(const std::string& key, std::size_t n) const {
    const value& v = get(key);
    check(is_integer(v.type), "gguf: '", path_, "': metadata '", key, "' is ", v.describe(), ", expected integers");
    if (!v.array) return std::vector<std::int64_t>(n, v.ints.front());
    check(v.ints.size() == n, "gguf: '", path_, "': metadata '", key, "' holds ", v.ints.size(), " values for ", n, " layers");
    return v.ints;
  }

  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const tensor_info& tensor(const std::string& name) const {
    const auto it = index_.find(name);
    check(it != index_.end(), "gguf: '", path_, "' has no tensor '", name, "'");
    return tensors_[it->second];
  }
  // The tensor's bytes inside the mapping (zero copy; checked to lie inside the data area).
  const unsigned char* data(const tensor_info& t) const { return base_ + data_start_ + t.offset; }
  const unsigned char* data(const std::string& name) const { return data(tensor(name)); }

  // The tensor as f32 values (F32, F16, BF16 exact; Q8_0 and Q4_0 dequantised), row by row.
  std::vector<float> read_f32(const std::string& name) const {
    const tensor_info& t = tensor(name);
    check(known_type(t.type), "gguf: '", path_, "': tensor '", name, "' has ggml type ", t.type,
          ", which lwcl does not read (expected F32, F16, BF16, Q8_0 or Q4_0)");
    const auto type = static_cast<tensor_type>(t.type);
    std::vector<float> out(static_cast<std::size_t>(t.numel()));
    const std::uint64_t rb = row_bytes(type, t.dims.front());
    for (std::uint64_t r = 0; r < t.rows(); ++r) dequantize_row(type, data(t) + r * rb, out.data() + r * t.dims.front(), t.dims.front());
    return out;
  }

 private:
  void unmap() {
    if (base_) ::munmap(const_cast<unsigned char*>(base_), size_);
    base_ = nullptr;
  }

  value read_value(detail::cursor& c, value_type t, const std::string& key, bool in_array) {
    value v;
    v.type = t;
    const std::string what = "the value of '" + key + "'";
    if (t == value_type::array) {
      check(!in_array, "gguf: '", path_, "': metadata '", key, "' is an array of arrays, which lwcl does not read");
      const auto elem = c.get<std::uint32_t>(what);
      check(elem <= 12, "gguf: '", path_, "': metadata '", key, "' is an array of unknown type ", elem, " (expected 0 to 12)");
      const auto et = static_cast<value_type>(elem);
      check(et != value_type::array, "gguf: '", path_, "': metadata '", key, "' is an array of arrays, which lwcl does not read");
      const auto n = c.get<std::uint64_t>(what);
      // Each element takes at least its scalar size (a string its 8-byte length): bound the count by the file.
      const std::uint64_t least = et == value_type::string ? 8 : value_size(et);
      check(n <= c.left() / least, "gguf: '", path_, "' is truncated or corrupt: metadata '", key, "' claims ", n, " ",
            value_type_name(et), " elements, more than the ", c.left(), " bytes left can hold");
      v.type = et;
      v.array = true;
      for (std::uint64_t i = 0; i < n; ++i) {
        value e = read_value(c, et, key, true);
        if (et == value_type::string) v.strings.push_back(std::move(e.strings.front()));
        else if (is_real(et)) v.reals.push_back(e.reals.front());
        else v.ints.push_back(e.ints.front());
      }
      return v;
    }
    if (t == value_type::string) v.strings.push_back(c.string(what));
    else if (t == value_type::f32) v.reals.push_back(c.get<float>(what));
    else if (t == value_type::f64) v.reals.push_back(c.get<double>(what));
    else if (t == value_type::boolean) {
      const auto b = c.get<std::uint8_t>(what);
      check(b <= 1, "gguf: '", path_, "': metadata '", key, "' is a bool of byte value ", int(b), " (expected 0 or 1)");
      v.ints.push_back(b);
    } else v.ints.push_back(detail::read_integer(c, t, what));
    return v;
  }

  void parse() {
    detail::cursor c(base_, size_, path_);
    check(size_ >= 24, "gguf: '", path_, "' is truncated: ", size_, " bytes, fewer than the 24-byte header");
    const auto m = c.get<std::uint32_t>("the magic");
    check(m == magic, "gguf: '", path_, "' is not a GGUF file (it does not start with 'GGUF')");
    version_ = c.get<std::uint32_t>("the version");
    check(version_ != 0x03000000u && version_ != 0x02000000u, "gguf: '", path_,
          "' is a big-endian GGUF file, which lwcl does not read (expected little-endian)");
    check(version_ == 2 || version_ == 3, "gguf: '", path_, "' has GGUF version ", version_, " (lwcl reads versions 2 and 3)");
    const auto n_tensors = c.get<std::uint64_t>("the tensor count");
    const auto n_kv = c.get<std::uint64_t>("the metadata count");
    // A metadata pair takes at least 13 bytes (an empty key, its type, a one-byte value) and a tensor's
    // description at least 32 (an empty name, one extent, type, offset): bound both counts by the file.
    check(n_kv <= c.left() / 13, "gguf: '", path_, "' is truncated or corrupt: it claims ", n_kv, " metadata pairs in ", c.left(),
          " bytes");
    for (std::uint64_t i = 0; i < n_kv; ++i) {
      std::string key = c.string("metadata key " + std::to_string(i));
      check(!key.empty(), "gguf: '", path_, "': metadata key ", i, " is empty");
      check(!keys_.count(key), "gguf: '", path_, "' has metadata key '", key, "' twice");
      const auto t = c.get<std::uint32_t>("the type of '" + key + "'");
      check(t <= 12, "gguf: '", path_, "': metadata '", key, "' has unknown value type ", t, " (expected 0 to 12)");
      value v = read_value(c, static_cast<value_type>(t), key, false);
      keys_[key] = metadata_.size();
      metadata_.emplace_back(std::move(key), std::move(v));
    }
    if (has("general.alignment")) {
      const value& a = get("general.alignment");
      check(!a.array && a.type == value_type::u32, "gguf: '", path_, "': general.alignment is ", a.describe(), ", expected u32");
      const auto al = static_cast<std::uint64_t>(a.ints.front());
      check(al > 0 && (al & (al - 1)) == 0, "gguf: '", path_, "': general.alignment ", al, " is not a power of two");
      alignment_ = static_cast<std::uint32_t>(al);
    }
    check(n_tensors <= c.left() / 32, "gguf: '", path_, "' is truncated or corrupt: it claims ", n_tensors, " tensors in ",
          c.left(), " bytes");
    for (std::uint64_t i = 0; i < n_tensors; ++i) {
      tensor_info t;
      t.name = c.string("tensor name " + std::to_string(i));
      const std::string what = "tensor '" + t.name + "'";
      check(!t.name.empty(), "gguf: '", path_, "': tensor ", i, " has an empty name");
      check(!index_.count(t.name), "gguf: '", path_, "' has tensor '", t.name, "' twice");
      const auto nd = c.get<std::uint32_t>(what);
      check(nd >= 1 && nd <= static_cast<std::uint32_t>(max_dims), "gguf: '", path_, "': ", what, " has ", nd,
            " dimensions (expected 1 to ", max_dims, ")");
      std::uint64_t numel = 1;
      for (std::uint32_t d = 0; d < nd; ++d) {
        const auto e = c.get<std::uint64_t>(what);
        check(e >= 1 && e <= size_, "gguf: '", path_, "': ", what, " has extent ", e, " (expected 1 to the file's size)");
        check(numel <= size_ / e, "gguf: '", path_, "': ", what, " claims more elements than the file can hold");
        numel *= e;
        t.dims.push_back(e);
      }
      t.type = c.get<std::uint32_t>(what);
      t.offset = c.get<std::uint64_t>(what);
      if (known_type(t.type)) {
        const auto tt = static_cast<tensor_type>(t.type);
        check(t.dims.front() % block_values(tt) == 0, "gguf: '", path_, "': ", what, " is ", tensor_type_name(tt), " with rows of ",
              t.dims.front(), " values, not a multiple of its ", block_values(tt), "-value blocks");
        t.bytes = row_bytes(tt, t.dims.front()) * t.rows();
      }
      index_[t.name] = tensors_.size();
      tensors_.push_back(std::move(t));
    }
    data_start_ = (c.at() + alignment_ - 1) / alignment_ * alignment_;
    check(data_start_ <= size_, "gguf: '", path_, "' is truncated: the data area would start at ", data_start_, " of ", size_,
          " bytes");
    const std::uint64_t data_size = size_ - data_start_;
    std::vector<const tensor_info*> order;
    for (const auto& t : tensors_) {
      check(t.offset % alignment_ == 0, "gguf: '", path_, "': tensor '", t.name, "' starts at offset ", t.offset,
            ", not a multiple of the alignment ", alignment_);
      check(t.offset <= data_size && t.bytes <= data_size - t.offset, "gguf: '", path_, "': tensor '", t.name, "' spans [",
            t.offset, ", ", t.offset + t.bytes, ") of a ", data_size, "-byte data area");
      order.push_back(&t);
    }
    std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
    for (std::size_t i = 1; i < order.size(); ++i)
      check(order[i - 1]->offset + order[i - 1]->bytes <= order[i]->offset, "gguf: '", path_, "': tensors '", order[i - 1]->name,
            "' and '", order[i]->name, "' overlap");
  }

  std::string path_;
  const unsigned char* base_ = nullptr;
  std::size_t size_ = 0, data_start_ = 0;
  std::uint32_t version_ = 0, alignment_ = default_alignment;
  std::vector<std::pair<std::string, value>> metadata_;
  std::map<std::string, std::size_t> keys_;
  std::vector<tensor_info> tensors_;
  std::map<std::string, std::size_t> index_;
};

// One tensor to write: `data` holds its bytes in `type`, rows of dims[0] values one after another.
struct tensor_out {
  std::string name;
  tensor_type type = tensor_type::f32;
  std::vector<std::uint64_t> dims;  // innermost first
  std::vector<unsigned char> data;
};

// Writes a GGUF file of version 3 at `path` (through a temporary name and a rename, so a killed writer
// leaves no half-written file): the metadata in order (general.alignment is added when absent), then
// the tensors in order, each at the next multiple of the alignment.
inline void write(const std::string& path, const std::vector<std::pair<std::string, value>>& metadata,
                  const std::vector<tensor_out>& tensors, std::uint32_t alignment = default_alignment) {
  check(alignment > 0 && (alignment & (alignment - 1)) == 0, "gguf::write: alignment ", alignment, " is not a power of two");
  std::vector<std::pair<std::string, value>> kv = metadata;
  std::map<std::string, int> seen;
  for (const auto& [k, v] : kv) {
    check(!k.empty(), "gguf::write: an empty metadata key");
    check(seen[k]++ == 0, "gguf::write: metadata key '", k, "' twice");
    check(v.type != value_type::array, "gguf::write: '", k, "': an array's type is its element type");
    check(v.array || v.size() == 1, "gguf::write: '", k, "' is a scalar holding ", v.size(), " values");
  }
  if (!seen.count("general.alignment")) kv.emplace_back("general.alignment", integer(value_type::u32, alignment));
  for (const auto& [k, v] : kv)
    if (k == "general.alignment")
      check(!v.array && v.type == value_type::u32 && v.ints.front() == static_cast<std::int64_t>(alignment),
            "gguf::write: general.alignment in the metadata is not the u32 ", alignment, " the file is written with");

  std::string head;
  detail::put<std::uint32_t>(head, magic);
  detail::put<std::uint32_t>(head, version);
  detail::put<std::uint64_t>(head, tensors.size());
  detail::put<std::uint64_t>(head, kv.size());
  for (const auto& [k, v] : kv) {
    detail::put_string(head, k);
    if (v.array) {
      detail::put<std::uint32_t>(head, static_cast<std::uint32_t>(value_type::array));
      detail::put<std::uint32_t>(head, static_cast<std::uint32_t>(v.type));
      detail::put<std::uint64_t>(head, v.size());
    } else {
      detail::put<std::uint32_t>(head, static_cast<std::uint32_t>(v.type));
    }
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (v.type == value_type::string) detail::put_string(head, v.strings[i]);
      else if (v.type == value_type::f32) detail::put<float>(head, static_cast<float>(v.reals[i]));
      else if (v.type == value_type::f64) detail::put<double>(head, v.reals[i]);
      else detail::write_integer(head, v.type, v.ints[i]);
    }
  }
  std::map<std::string, int> names;
  std::uint64_t at = 0;
  std::vector<std::uint64_t> offsets;
  for (const auto& t : tensors) {
    check(!t.name.empty() && names[t.name]++ == 0, "gguf::write: tensor name '", t.name, "' is empty or given twice");
    check(!t.dims.empty() && t.dims.size() <= static_cast<std::size_t>(max_dims), "gguf::write: tensor '", t.name, "' has ",
          t.dims.size(), " dimensions (expected 1 to ", max_dims, ")");
    std::uint64_t rows = 1;
    for (const auto d : t.dims) check(d >= 1, "gguf::write: tensor '", t.name, "' has an extent of 0");
    for (std::size_t d = 1; d < t.dims.size(); ++d) rows *= t.dims[d];
    check(t.dims.front() % block_values(t.type) == 0, "gguf::write: tensor '", t.name, "' has rows of ", t.dims.front(),
          " values, not a multiple of ", tensor_type_name(t.type), "'s ", block_values(t.type), "-value blocks");
    check(t.data.size() == row_bytes(t.type, t.dims.front()) * rows, "gguf::write: tensor '", t.name, "' holds ", t.data.size(),
          " bytes, ", tensor_type_name(t.type), " of its shape needs ", row_bytes(t.type, t.dims.front()) * rows);
    detail::put_string(head, t.name);
    detail::put<std::uint32_t>(head, static_cast<std::uint32_t>(t.dims.size()));
    for (auto d : t.dims) detail::put<std::uint64_t>(head, d);
    detail::put<std::uint32_t>(head, static_cast<std::uint32_t>(t.type));
    detail::put<std::uint64_t>(head, at);
    offsets.push_back(at);
    at = (at + t.data.size() + alignment - 1) / alignment * alignment;
  }
  head.resize((head.size() + alignment - 1) / alignment * alignment, '\0');
  atomic_file out(path);
  out.write(head.data(), head.size());
  const std::vector<char> zeros(alignment, 0);
  std::uint64_t written = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    out.write(zeros.data(), static_cast<std::size_t>(offsets[i] - written));
    out.write(tensors[i].data.data(), tensors[i].data.size());
    written = offsets[i] + tensors[i].data.size();
  }
  out.write(zeros.data(), static_cast<std::size_t>(at - written));  // ggml pads the last tensor too
  out.commit();
}

}  // namespace lwcl::checkpoint::gguf
