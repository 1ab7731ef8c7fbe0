#pragma once
// The CUDA backend as a bundle's backend policy: a tag naming backend::cuda. backend::cuda itself is
// declared in backend/cuda/cuda.cuh, which only nvcc compiles; the tag needs only its name, so host
// code can build, sweep and describe bundles that run on a GPU.

#include <string_view>

#include "lwcl/policies/backend/concept.hpp"

namespace lwcl::backend {
class cuda;
}  // namespace lwcl::backend

namespace lwcl::policies::backend {

struct cuda {
  using type = lwcl::backend::cuda;
  static constexpr std::string_view name = "cuda";
  static constexpr bool is_device = true;
};
static_assert(backend_policy<cuda>);

}  // namespace lwcl::policies::backend
