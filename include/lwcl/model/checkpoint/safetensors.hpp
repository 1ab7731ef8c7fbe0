#pragma once
// Hugging Face safetensors files: reading by memory map with every offset and size checked, and
// writing (to a temporary name, then renamed). Layout: u64 little-endian header length N, N bytes of
// JSON {"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the data area; offsets are relative to the data area, which the tensors must tile exactly.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/core/error.hpp"
#include "lwcl/core/fs.hpp"
#include "lwcl/tensor/dtype.hpp"
#include "lwcl/tensor/shape.hpp"

namespace lwcl::checkpoint {

// The safetensors dtype names lwcl reads and writes.
inline std::string_view safetensors_dtype_name(dtype t) {
  switch (t) {
    case dtype::f32: return "F32";
    case dtype::f64: return "F64";
    case dtype::bf16: return "BF16";
    case dtype::f16: return "F16";
    case dtype::i32: return "I32";
  }
  return "?";
}
inline bool parse_safetensors_dtype(std::string_view s, dtype& out) {
  for (dtype t : {dtype::f32, dtype::f64, dtype::bf16, dtype::f16, dtype::i32})
    if (safetensors_dtype_name(t) == s) {
      out = t;
      return true;
    }
  return false;
}

// Element sizes of the integer and boolean dtypes lwcl has no tensor type for (0: not one of them).
// Checkpoints carry such tensors next to the weights (BERT's I64 position_ids buffer, for one); they
// are validated like any tensor but never read.
inline std::size_t safetensors_skipped_dtype_size(std::string_view s) {
  if (s == "I64" || s == "U64") return 8;
  if (s == "U32") return 4;
  if (s == "I16" || s == "U16") return 2;
  if (s == "I8" || s == "U8" || s == "BOOL") return 1;
  return 0;
}

struct safetensors_entry {
  std::string name;
  lwcl::dtype type = lwcl::dtype::f32;  // meaningless when `skipped` is set
  lwcl::shape dims;
  std::size_t begin = 0, end = 0;  // byte offsets inside the data area
  std::string skipped;             // the safetensors dtype (I64, U8, BOOL, ...) of a tensor lwcl does not read
};

// A read-only, memory-mapped safetensors file. Construction validates the whole header; afterwards
// every access is in bounds.
class safetensors_file {
 public:
  explicit safetensors_file(const std::string& path) : path_(path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    check(fd >= 0, "safetensors: cannot open '", path, "': ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      fail("safetensors: cannot stat '", path, "'");
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      ::close(fd);
      check(p != MAP_FAILED, "safetensors: cannot map '", path, "'");
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
  ~safetensors_file() { unmap(); }
  safetensors_file(const safetensors_file&) = delete;
  safetensors_file& operator=(const safetensors_file&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<safetensors_entry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  const safetensors_entry& entry(const std::string& name) const {
    auto it = index_.find(name);
    check(it != index_.end(), "safetensors: '", path_, "' has no tensor '", name, "'");
    return entries_[it->second];
  }
  // The tensor's bytes inside the mapping (zero copy; not necessarily aligned for its dtype).
  const unsigned char* bytes(const std::string& name) const {
    const auto& e = entry(name);
    return base_ + data_start_ + e.begin;
  }

  // Copies the tensor into `out` as T (float or double), converting from F32, F64, BF16 or F16
  // (every conversion to double is exact); `want` is the shape the caller expects (an error names
  // both when they differ).
  template <class T>
  void read(const std::string& name, const shape& want, T* out) const {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "safetensors_file::read: T is float or double");
    const auto& e = entry(name);
    check(e.skipped.empty(), "safetensors: tensor '", name, "' in '", path_, "' has dtype ", e.skipped,
          ", expected a float type");
    check(e.dims == want, "safetensors: tensor '", name, "' in '", path_, "' has shape ", e.dims.str(), ", expected ", want.str());
    const unsigned char* p = bytes(name);
    const auto n = static_cast<std::size_t>(e.dims.numel());
    for (std::size_t i = 0; i < n; ++i) {
      switch (e.type) {
        case dtype::f32: {
          float f;
          std::memcpy(&f, p + 4 * i, 4);
          out[i] = static_cast<T>(f);
          break;
        }
        case dtype::f64: {
          double d;
          std::memcpy(&d, p + 8 * i, 8);
          out[i] = static_cast<T>(d);
          break;
        }
        case dtype::bf16: {
          std::uint16_t b;
          std::memcpy(&b, p + 2 * i, 2);
          out[i] = static_cast<T>(bf16::from_bits(b).to_float());
          break;
        }
        case dtype::f16: {
          std::uint16_t h;
          std::memcpy(&h, p + 2 * i, 2);
          out[i] = static_cast<T>(f16_to_float(h));
          break;
        }
        default:
          fail("safetensors: tensor '", name, "' in '", path_, "' has dtype ", dtype_name(e.type), ", expected a float type");
      }
    }
  }
  void read_f32(const std::string& name, const shape& want, float* out) const { read<float>(name, want, out); }

 private:
  void unmap() {
    if (base_) ::munmap(const_cast<unsigned char*>(base_), size_);
    base_ = nullptr;
  }

  void parse() {
    check(size_ >= 8, "safetensors: '", path_, "' is truncated: ", size_, " bytes, fewer than the 8-byte header length");
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | base_[i];
    check(n <= size_ - 8, "safetensors: '", path_, "' declares a ", n, "-byte header but only ", size_ - 8,
          " bytes follow the length");
    data_start_ = 8 + static_cast<std::size_t>(n);
    const std::size_t data_size = size_ - data_start_;
    nlohmann::json header;
    try {
      header = nlohmann::json::parse(base_ + 8, base_ + data_start_);
    } catch (const nlohmann::json::exception& e) {
      fail("safetensors: '", path_, "' has a malformed JSON header: ", e.what());
    }
    check(header.is_object(), "safetensors: '", path_, "': the header is not a JSON object");
    for (auto it = header.begin(); it != header.end(); ++it) {
      const std::string& name = it.key();
      const auto& v = it.value();
      if (name == "__metadata__") {
        check(v.is_object(), "safetensors: '", path_, "': __metadata__ is not an object");
        for (auto m = v.begin(); m != v.end(); ++m) {
          check(m.value().is_string(), "safetensors: '", path_, "': metadata value '", m.key(), "' is not a string");
          metadata_[m.key()] = m.value().get<std::string>();
        }
        continue;
      }
      check(v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"), "safetensors: '",
            path_, "': tensor '", name, "' needs dtype, shape and data_offsets");
      safetensors_entry e;
      e.name = name;
      check(v["dtype"].is_string(), "safetensors: '", path_, "': tensor '", name, "' has a non-string dtype");
      const std::string dt = v["dtype"].get<std::string>();
      std::size_t esize = 0;
      if (parse_safetensors_dtype(dt, e.type)) {
        esize = dtype_size(e.type);
      } else if ((esize = safetensors_skipped_dtype_size(dt)) > 0) {
        e.skipped = dt;
      }
      check(esize > 0, "safetensors: '", path_, "': tensor '", name, "' has unknown dtype '", dt,
            "' (expected F32, F64, BF16, F16 or I32, or an integer or BOOL tensor to skip)");
      check(v["shape"].is_array() && v["shape"].size() <= static_cast<std::size_t>(shape::max_rank), "safetensors: '",
            path_, "': tensor '", name, "' has a malformed shape");
      for (const auto& d : v["shape"]) {
        check(d.is_number_unsigned() || (d.is_number_integer() && d.get<std::int64_t>() >= 0), "safetensors: '", path_,
              "': tensor '", name, "' has a negative or non-integer extent");
        e.dims.push(d.get<index_t>());
      }
      const auto& off = v["data_offsets"];
      check(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(),
            "safetensors: '", path_, "': tensor '", name, "' has malformed data_offsets");
      e.begin = off[0].get<std::size_t>();
      e.end = off[1].get<std::size_t>();
      check(e.begin <= e.end && e.end <= data_size, "safetensors: '", path_, "': tensor '", name, "' has data_offsets [",
            e.begin, ", ", e.end, "] outside the ", data_size, "-byte data area");
      const std::size_t want = static_cast<std::size_t>(e.dims.numel()) * esize;
      check(e.end - e.begin == want, "safetensors: '", path_, "': tensor '", name, "' spans ", e.end - e.begin,
            " bytes, but ", e.skipped.empty() ? dtype_name(e.type) : std::string_view(e.skipped), e.dims.str(), " needs ", want);
      index_[name] = entries_.size();
      entries_.push_back(std::move(e));
    }
    // The tensors must tile the data area: sorted by offset, each starts where the previous ended.
    std::vector<const safetensors_entry*> order;
    for (const auto& e : entries_) order.push_back(&e);
    std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->begin < b->begin || (a->begin == b->begin && a->end < b->end); });
    std::size_t at = 0;
    for (const auto* e : order) {
      check(e->begin >= at, "safetensors: '", path_, "': tensor '", e->name, "' overlaps the tensor before it (starts at ",
            e->begin, ", previous ends at ", at, ")");
      check(e->begin == at, "safetensors: '", path_, "': bytes [", at, ", ", e->begin, ") of the data area belong to no tensor");
      at = e->end;
    }
    check(at == data_size, "safetensors: '", path_, "': bytes [", at, ", ", data_size, ") of the data area belong to no tensor");
  }

  std::string path_;
  const unsigned char* base_ = nullptr;
  std::size_t size_ = 0, data_start_ = 0;
  std::vector<safetensors_entry> entries_;
  std::map<std::string, std::size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write: its bytes (host memory, little-endian, dense) in the named dtype.
struct safetensors_item {
  std::string name;
  lwcl::dtype type;
  lwcl::shape dims;
  const void* data;
  // A dtype lwcl has no tensor type for (U8 for packed codes, say; safetensors_skipped_dtype_size
  // gives its element size), written instead of `type` when not empty.
  std::string raw_dtype = {};

  std::size_t element_size() const { return raw_dtype.empty() ? dtype_size(type) : safetensors_skipped_dtype_size(raw_dtype); }
  std::string dtype_name() const { return raw_dtype.empty() ? std::string(safetensors_dtype_name(type)) : raw_dtype; }
};

// Writes `items` in order to `path` (through path.tmp and a rename, so a killed writer leaves no
// half-written file). The header is padded with spaces to a multiple of 8 bytes, so every tensor of
// an aligned dtype starts aligned when the file is mapped.
inline void write_safetensors(const std::string& path, const std::vector<safetensors_item>& items,
                              const std::map<std::string, std::string>& metadata = {}) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::size_t at = 0;
  for (const auto& it : items) {
    check(it.name != "__metadata__" && !it.name.empty(), "write_safetensors: invalid tensor name '", it.name, "'");
    check(!header.contains(it.name), "write_safetensors: duplicate tensor name '", it.name, "'");
    check(it.element_size() > 0, "write_safetensors: tensor '", it.name, "' has dtype '", it.raw_dtype,
          "', which is not a safetensors dtype lwcl writes");
    const std::size_t bytes = static_cast<std::size_t>(it.dims.numel()) * it.element_size();
    std::vector<index_t> dims;
    for (int a = 0; a < it.dims.rank(); ++a) dims.push_back(it.dims[a]);
    header[it.name] = {{"dtype", it.dtype_name()}, {"shape", dims}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');
  atomic_file out(path);
  unsigned char len[8];
  std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  out.write(len, 8);
  out.write(text.data(), text.size());
  for (const auto& it : items) out.write(it.data, static_cast<std::size_t>(it.dims.numel()) * it.element_size());
  out.commit();
}

}  // namespace lwcl::checkpoint
