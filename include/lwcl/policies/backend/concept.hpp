#pragma once
// The backend policy kind: a tag naming the backend class a pipeline runs on (backend_interface, in
// backend/interface.hpp, is what that class offers the ops).

#include <type_traits>

#include "lwcl/policies/named.hpp"

namespace lwcl::policies {

// Requires: named_policy; P::is_device, a static constexpr bool; and P::type, the backend class the
// pipeline instantiates (a backend_interface, checked where it is complete: backend::cuda is only
// complete in CUDA translation units). The policy is a tag: it names the backend without creating
// one, so a bundle that selects CUDA can be built and described on a machine without a GPU.
template <class P>
concept backend_policy = named_policy<P> && requires {
  typename P::type;
  typename std::bool_constant<P::is_device>;
};

}  // namespace lwcl::policies
