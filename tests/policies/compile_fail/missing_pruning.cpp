// The pruning slot has no default: a bundle without it must not compile.
// expect: the pruning slot is required and has no default
#include "lwcl/policies/bundle.hpp"

int main() {
  namespace p = lwcl::policies;
  auto bundle = lwcl::make_policies(lwcl::slot<lwcl::key::segmentation>(p::segmentation::uniform<2>{}));
  (void)bundle;
}
