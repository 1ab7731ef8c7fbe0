#pragma once
// Every policy kind's concept in one include, for code that names several kinds (the bundle, tests).
// A policy header includes only its own kind's concept: policies/<kind>/concept.hpp.

#include "lwcl/backend/interface.hpp"
#include "lwcl/policies/backend/concept.hpp"
#include "lwcl/policies/cache/concept.hpp"
#include "lwcl/policies/curriculum/concept.hpp"
#include "lwcl/policies/loss/concept.hpp"
#include "lwcl/policies/named.hpp"
#include "lwcl/policies/pruning/concept.hpp"
#include "lwcl/policies/segmentation/concept.hpp"

namespace lwcl::policies {
using lwcl::backend::backend_interface;
}  // namespace lwcl::policies
