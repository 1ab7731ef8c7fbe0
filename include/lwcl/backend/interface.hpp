#pragma once
// backend_interface: what every backend (backend::host, backend::cuda) offers the ops and the trainers:
// a name, whether it is a device, the memory tier it allocates in, and memory, copies and synchronisation.

#include <concepts>
#include <cstddef>
#include <string_view>
#include <type_traits>

#include "lwcl/core/memory.hpp"

namespace lwcl::backend {

// Requires: the interface every backend offers the ops: B::name (a static constexpr std::string_view),
// B::is_device, B::memory_tier, and
// allocate_bytes, deallocate_bytes, fill_zero, copy, synchronize.
template <class B>
concept backend_interface = requires(B& be, void* p, const void* q, std::size_t n) {
  requires std::same_as<std::remove_cv_t<decltype(B::name)>, std::string_view>;
  typename std::bool_constant<B::is_device>;
  requires std::same_as<std::remove_cv_t<decltype(B::memory_tier)>, lwcl::tier>;
  { be.allocate_bytes(n) } -> std::same_as<void*>;
  be.deallocate_bytes(p, n);
  be.fill_zero(p, n);
  be.copy(p, q, n);
  be.synchronize();
};

}  // namespace lwcl::backend
