#pragma once
// Reader for oracle fixtures written by tools/fixtures/fixture_io.py: a small binary file of named
// tensors (float64 or int64) computed by PyTorch. Layout (little-endian):
//   magic "LWCLFIX1" | u32 version (1) | u32 count | count x { u32 name_len | name | u32 kind (0 f64, 1 i64)
//   | u32 rank | i64 dims[rank] | data }

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/tensor/shape.hpp"

namespace lwcl::test {

inline std::string data_path(const std::string& rel) { return std::string(LWCL_TEST_DATA_DIR) + "/" + rel; }

class fixture {
 public:
  explicit fixture(const std::string& rel) : path_(data_path(rel)) {
    std::ifstream in(path_, std::ios::binary);
    check(in.good(), "fixture: cannot open '", path_, "' (regenerate with tools/make_fixtures.py)");
    char magic[8];
    in.read(magic, 8);
    check(in.good() && std::memcmp(magic, "LWCLFIX1", 8) == 0, "fixture: '", path_, "' has no LWCLFIX1 magic");
    const auto version = read<std::uint32_t>(in);
    check(version == 1, "fixture: '", path_, "' has version ", version, ", expected 1");
    const auto count = read<std::uint32_t>(in);
    for (std::uint32_t i = 0; i < count; ++i) {
      entry e;
      const auto len = read<std::uint32_t>(in);
      std::string name(len, '\0');
      in.read(name.data(), len);
      e.is_int = read<std::uint32_t>(in) == 1;
      const auto rank = read<std::uint32_t>(in);
      for (std::uint32_t r = 0; r < rank; ++r) e.dims.push(read<std::int64_t>(in));
      const auto n = static_cast<std::size_t>(e.dims.numel());
      if (e.is_int) {
        e.ints.resize(n);
        in.read(reinterpret_cast<char*>(e.ints.data()), static_cast<std::streamsize>(n * 8));
      } else {
        e.values.resize(n);
        in.read(reinterpret_cast<char*>(e.values.data()), static_cast<std::streamsize>(n * 8));
      }
      check(in.good(), "fixture: '", path_, "' is truncated in tensor '", name, "'");
      entries_.emplace(name, std::move(e));
    }
  }

  bool has(const std::string& name) const { return entries_.count(name) != 0; }
  const lwcl::shape& dims(const std::string& name) const { return get(name).dims; }
  std::vector<double> f64(const std::string& name) const { return get(name).values; }
  std::vector<float> f32(const std::string& name) const {
    const auto& v = get(name).values;
    return std::vector<float>(v.begin(), v.end());
  }
  template <class T>
  std::vector<T> as(const std::string& name) const {
    const auto& v = get(name).values;
    return std::vector<T>(v.begin(), v.end());
  }
  std::vector<std::int64_t> ints(const std::string& name) const {
    const auto& e = get(name);
    check(e.is_int, "fixture: tensor '", name, "' in '", path_, "' is not an integer tensor");
    return e.ints;
  }
  double scalar(const std::string& name) const { return get(name).values.at(0); }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [k, v] : entries_) out.push_back(k);
    return out;
  }

 private:
  struct entry {
    lwcl::shape dims;
    bool is_int = false;
    std::vector<double> values;
    std::vector<std::int64_t> ints;
  };
  template <class T>
  static T read(std::ifstream& in) {
    T v{};
    in.read(reinterpret_cast<char*>(&v), sizeof v);
    return v;
  }
  const entry& get(const std::string& name) const {
    auto it = entries_.find(name);
    check(it != entries_.end(), "fixture: no tensor '", name, "' in '", path_, "'");
    return it->second;
  }
  std::string path_;
  std::map<std::string, entry> entries_;
};

}  // namespace lwcl::test
