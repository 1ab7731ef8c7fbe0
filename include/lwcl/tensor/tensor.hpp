#pragma once
// Tensors. `tensor` is a non-owning, runtime-typed view (pointer, dtype, shape) that ops check and
// dispatch on; `buffer<Backend>` owns memory on a backend and reports it to the memory tracker;
// `owned_tensor<Backend>` is a buffer with a tensor view over it. Model parameters and activations are
// views carved out of one buffer each.

#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "lwcl/core/error.hpp"
#include "lwcl/tensor/dtype.hpp"
#include "lwcl/tensor/shape.hpp"

namespace lwcl {

struct tensor {
  void* data = nullptr;
  lwcl::dtype type = dtype::f32;
  lwcl::shape shape;

  tensor() = default;
  tensor(void* d, lwcl::dtype t, lwcl::shape s) : data(d), type(t), shape(s) {}
  template <class T>
  tensor(T* d, lwcl::shape s) : data(const_cast<std::remove_const_t<T>*>(d)), type(dtype_of_v<std::remove_const_t<T>>), shape(s) {}

  index_t numel() const { return shape.numel(); }
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * dtype_size(type); }
  bool empty() const { return data == nullptr || numel() == 0; }
  std::string describe() const { return std::string(dtype_name(type)) + shape.str(); }

  // Typed pointer; `what` names the op and argument for the error when the dtype differs.
  template <class T>
  T* ptr(std::string_view what = "tensor") const {
    check(type == dtype_of_v<T>, what, ": dtype is ", dtype_name(type), ", expected ", dtype_name(dtype_of_v<T>));
    return static_cast<T*>(data);
  }

  tensor reshaped(lwcl::shape s) const {
    check(s.numel() == numel(), "tensor::reshaped: cannot view ", shape.str(), " (", numel(), " elements) as ", s.str());
    return tensor(data, type, s);
  }
  // Sub-tensor i along axis 0.
  tensor operator[](index_t i) const {
    check(shape.rank() >= 1 && i >= 0 && i < shape[0], "tensor: index ", i, " out of range for ", shape.str());
    lwcl::shape s;
    for (int a = 1; a < shape.rank(); ++a) s.push(shape[a]);
    return tensor(static_cast<char*>(data) + static_cast<std::size_t>(i * shape.inner()) * dtype_size(type), type, s);
  }
};

// Owning byte storage on a backend. Move-only; the backend reports the bytes to the memory tracker.
template <class Backend>
class buffer {
 public:
  buffer() = default;
  buffer(Backend& be, std::size_t bytes) : be_(&be), bytes_(bytes) {
    data_ = bytes ? be.allocate_bytes(bytes) : nullptr;
  }
  ~buffer() { release(); }
  buffer(buffer&& o) noexcept : be_(o.be_), data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  buffer& operator=(buffer&& o) noexcept {
    if (this != &o) {
      release();
      be_ = o.be_;
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Backend* backend() const { return be_; }

 private:
  void release() {
    if (data_) be_->deallocate_bytes(data_, bytes_);
    data_ = nullptr;
    bytes_ = 0;
  }
  Backend* be_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// A tensor that owns its memory.
template <class Backend>
class owned_tensor {
 public:
  owned_tensor() = default;
  owned_tensor(Backend& be, dtype t, shape s) : buf_(be, static_cast<std::size_t>(s.numel()) * dtype_size(t)), view_(buf_.data(), t, s) {
    be.fill_zero(buf_.data(), buf_.bytes());
  }
  // A moved-from owned_tensor is empty: its view no longer points at the memory it gave away.
  owned_tensor(owned_tensor&& o) noexcept : buf_(std::move(o.buf_)), view_(std::exchange(o.view_, tensor())) {}
  owned_tensor& operator=(owned_tensor&& o) noexcept {
    if (this != &o) {
      buf_ = std::move(o.buf_);
      view_ = std::exchange(o.view_, tensor());
    }
    return *this;
  }
  const tensor& view() const { return view_; }
  operator const tensor&() const { return view_; }
  template <class T>
  T* ptr(std::string_view what = "tensor") const {
    return view_.template ptr<T>(what);
  }
  const lwcl::shape& shape() const { return view_.shape; }
  index_t numel() const { return view_.numel(); }

 private:
  buffer<Backend> buf_;
  tensor view_;
};

}  // namespace lwcl
