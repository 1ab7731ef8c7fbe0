#pragma once
// The host backend as a bundle's backend policy: a tag naming backend::host<Gemm> (OpenMP kernels,
// GEMMs through the Gemm provider, by default the one chosen at run time), the default backend of every bundle. Its name
// spells the provider's, so it includes the provider (and the backend it names).

#include <string_view>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/policies/backend/concept.hpp"
#include "lwcl/policies/name.hpp"

namespace lwcl::policies::backend {

namespace detail {
struct host_head {
  static constexpr std::string_view name = "host";
};
}  // namespace detail

template <class Gemm = lwcl::backend::host_default_gemm>
struct host {
  using type = lwcl::backend::host<Gemm>;
  static constexpr std::string_view name = policies::detail::template_name<detail::host_head, Gemm>::value;
  static constexpr bool is_device = false;
};
static_assert(backend_policy<host<>>);
static_assert(host<>::name == "host<chosen>");

}  // namespace lwcl::policies::backend
