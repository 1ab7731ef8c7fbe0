#pragma once
// Compiler and target switches shared by every lwcl header. LWCL_HD marks functions that run on both
// the host and a CUDA device; under a host compiler it collapses to plain inline code, so functor
// logic is tested without CUDA.

#if defined(__CUDACC__)
#define LWCL_HD __host__ __device__
#define LWCL_DEVICE __device__
#else
#define LWCL_HD
#define LWCL_DEVICE
#endif

#define LWCL_HD_INLINE LWCL_HD inline

#include <cstddef>
#include <cstdint>

namespace lwcl {
using index_t = std::int64_t;

inline constexpr const char* version = "0.1.0";
}  // namespace lwcl
