#pragma once
// Page-locked host memory, reported to the tracker as tier::pinned. The feature cache stages features
// here so that copies to and from the GPU run asynchronously on the copy stream at full bus speed.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "lwcl/backend/cuda/error.cuh"
#include "lwcl/core/memory.hpp"

namespace lwcl::backend {

// Portable pinned memory: usable with every device in the process, whichever is current.
inline void* allocate_pinned_bytes(std::size_t bytes) {
  void* p = nullptr;
  LWCL_CUDA_CHECK(cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable));
  memory().on_alloc(tier::pinned, bytes);
  return p;
}

// Never throws (it runs from destructors); a failure is printed.
inline void deallocate_pinned_bytes(void* p, std::size_t bytes) noexcept {
  if (!p) return;
  LWCL_CUDA_REPORT(cudaFreeHost(p));
  memory().on_free(tier::pinned, bytes);
}

// Owning pinned host buffer. Move-only.
class pinned_buffer {
 public:
  pinned_buffer() = default;
  explicit pinned_buffer(std::size_t bytes) : data_(bytes ? allocate_pinned_bytes(bytes) : nullptr), bytes_(bytes) {}
  ~pinned_buffer() { deallocate_pinned_bytes(data_, bytes_); }
  pinned_buffer(pinned_buffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  pinned_buffer& operator=(pinned_buffer&& o) noexcept {
    if (this != &o) {
      deallocate_pinned_bytes(data_, bytes_);
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace lwcl::backend
