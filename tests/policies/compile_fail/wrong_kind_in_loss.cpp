// A segmentation policy in the loss slot: make_policies must name the slot and the concept it expects.
// expect: the policy in the loss slot is not a loss_policy
#include "lwcl/policies/bundle.hpp"
#include "lwcl/policies/pruning/magnitude.hpp"

int main() {
  namespace p = lwcl::policies;
  auto bundle = lwcl::make_policies(lwcl::slot<lwcl::key::pruning>(p::pruning::magnitude_l2{}),
                                    lwcl::slot<lwcl::key::loss>(p::segmentation::uniform<2>{}));
  (void)bundle;
}
