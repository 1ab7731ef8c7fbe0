// A curriculum in the segmentation slot: make_policies must name the slot and the concept it expects.
// expect: the policy in the segmentation slot is not a segmentation_policy
#include "lwcl/policies/bundle.hpp"
#include "lwcl/policies/pruning/magnitude.hpp"

int main() {
  namespace p = lwcl::policies;
  auto bundle = lwcl::make_policies(lwcl::slot<lwcl::key::segmentation>(p::curriculum::two_stage<>{}),
                                    lwcl::slot<lwcl::key::pruning>(p::pruning::magnitude_l2{}));
  (void)bundle;
}
