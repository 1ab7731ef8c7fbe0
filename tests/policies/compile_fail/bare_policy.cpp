// A policy passed without its slot: make_policies must say how to write an entry.
// expect: every argument must be lwcl::slot<key::X>(policy)
#include "lwcl/policies/bundle.hpp"
#include "lwcl/policies/pruning/magnitude.hpp"

int main() {
  namespace p = lwcl::policies;
  auto bundle = lwcl::make_policies(p::pruning::magnitude_l2{});
  (void)bundle;
}
