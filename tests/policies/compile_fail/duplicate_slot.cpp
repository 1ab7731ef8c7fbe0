// One slot given twice is a mistake, never a silent choice of either policy.
// expect: the segmentation slot is given more than once
#include "lwcl/policies/bundle.hpp"
#include "lwcl/policies/pruning/magnitude.hpp"

int main() {
  namespace p = lwcl::policies;
  auto bundle = lwcl::make_policies(lwcl::slot<lwcl::key::segmentation>(p::segmentation::uniform<2>{}),
                                    lwcl::slot<lwcl::key::pruning>(p::pruning::magnitude_l2{}),
                                    lwcl::slot<lwcl::key::segmentation>(p::segmentation::uniform<4>{}));
  (void)bundle;
}
