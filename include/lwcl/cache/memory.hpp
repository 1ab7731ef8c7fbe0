#pragma once
// Where the cache keeps bytes in RAM: a memory policy allocates and frees, reporting to lwcl's memory
// tracker. heap_memory (64-byte aligned, tier host) is the host default; under CUDA, pinned_memory
// (backend/cuda/cache/feature_stores.cuh, tier pinned) lets staged features be copied to the GPU asynchronously.

#include <concepts>
#include <cstddef>
#include <cstdlib>
#include <string_view>
#include <type_traits>
#include <utility>

#include "lwcl/core/error.hpp"
#include "lwcl/core/memory.hpp"

namespace lwcl::cache {

// Requires: M::name, a static constexpr std::string_view for reports; M::memory_tier, the lwcl::tier
// the bytes are reported under; M::allocate(bytes) -> void*, reporting the bytes to lwcl::memory() and
// throwing lwcl::error when out of memory; and M::deallocate(p, bytes), noexcept, reporting them freed.
template <class M>
concept staging_memory = requires(void* p, std::size_t bytes) {
  requires std::same_as<std::remove_cv_t<decltype(M::name)>, std::string_view>;
  requires std::same_as<std::remove_cv_t<decltype(M::memory_tier)>, lwcl::tier>;
  { M::allocate(bytes) } -> std::same_as<void*>;
  requires noexcept(M::deallocate(p, bytes));
};

struct heap_memory {
  static constexpr std::string_view name = "heap";
  static constexpr lwcl::tier memory_tier = lwcl::tier::host;

  static void* allocate(std::size_t bytes) {
    const std::size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded ? rounded : 64);
    check(p != nullptr, "heap_memory: out of memory allocating ", bytes, " bytes for cached features");
    memory().on_alloc(memory_tier, bytes, purpose::cache);
    return p;
  }
  static void deallocate(void* p, std::size_t bytes) noexcept {
    if (!p) return;
    std::free(p);
    memory().on_free(memory_tier, bytes, purpose::cache);
  }
};
static_assert(staging_memory<heap_memory>);

// Owning bytes from a memory policy. Move-only.
template <staging_memory Memory>
class memory_block {
 public:
  memory_block() = default;
  explicit memory_block(std::size_t bytes)
      : data_(bytes ? static_cast<std::byte*>(Memory::allocate(bytes)) : nullptr), bytes_(bytes) {}
  ~memory_block() { Memory::deallocate(data_, bytes_); }
  memory_block(memory_block&& o) noexcept : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  memory_block& operator=(memory_block&& o) noexcept {
    if (this != &o) {
      Memory::deallocate(data_, bytes_);
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
  }
  memory_block(const memory_block&) = delete;
  memory_block& operator=(const memory_block&) = delete;

  std::byte* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace lwcl::cache
