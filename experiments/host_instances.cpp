// The one unit that compiles the host-backend instantiations declared in host_instances.hpp, for the
// library every experiment program links.
#define LWCL_HOST_INSTANCES_DEFINE
#include "host_instances.hpp"
