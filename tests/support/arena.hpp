#pragma once
// Tensors on one backend for the span of a test: uploads host vectors, hands out zeroed tensors, and
// reads results back, as their own element type or as doubles. The CUDA tests compare a device run
// with the host run of the same code through it.

#include <cstdint>
#include <type_traits>
#include <vector>

#include <doctest/doctest.h>

#include "lwcl/tensor/dtype.hpp"
#include "lwcl/tensor/tensor.hpp"

namespace lwcl::test {

template <class Be>
class arena {
 public:
  explicit arena(Be& be) : be_(be) {}

  template <class T>
  tensor upload(const std::vector<T>& host, shape s) {
    REQUIRE(static_cast<index_t>(host.size()) == s.numel());
    void* p = allocate(host.size() * sizeof(T));
    be_.from_host(p, host.data(), host.size() * sizeof(T));
    return tensor(static_cast<T*>(p), s);
  }
  template <class T>
  tensor zeros(shape s) {
    const std::size_t bytes = static_cast<std::size_t>(s.numel()) * sizeof(T);
    void* p = allocate(bytes);
    be_.fill_zero(p, bytes);
    return tensor(static_cast<T*>(p), s);
  }
  // The tensor's elements as they are.
  template <class T>
  std::vector<T> read(const tensor& t) {
    std::vector<T> v(static_cast<std::size_t>(t.numel()));
    REQUIRE(v.size() * sizeof(T) == t.bytes());
    be_.to_host(v.data(), t.data, t.bytes());
    return v;
  }
  // The tensor's elements as doubles.
  std::vector<double> get(const tensor& t) {
    switch (t.type) {
      case dtype::f32: return as_doubles(read<float>(t));
      case dtype::f64: return read<double>(t);
      case dtype::i32: return as_doubles(read<std::int32_t>(t));
      case dtype::bf16: return as_doubles(read<bf16>(t));
      default: FAIL("arena::get: unexpected dtype ", dtype_name(t.type)); return {};
    }
  }

 private:
  void* allocate(std::size_t bytes) {
    bufs_.emplace_back(be_, bytes);
    return bufs_.back().data();
  }
  template <class T>
  static std::vector<double> as_doubles(const std::vector<T>& v) {
    std::vector<double> d(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) {
      if constexpr (std::is_same_v<T, bf16>) d[i] = static_cast<float>(v[i]);
      else d[i] = static_cast<double>(v[i]);
    }
    return d;
  }

  Be& be_;
  std::vector<buffer<Be>> bufs_;
};

}  // namespace lwcl::test
