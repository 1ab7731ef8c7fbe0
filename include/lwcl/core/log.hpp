#pragma once
// Minimal levelled logging to stderr. LWCL_LOG_LEVEL (0 quiet, 1 info, 2 debug) sets the level.

#include <cstdio>
#include <cstdlib>
#include <string>

#include "lwcl/core/error.hpp"

namespace lwcl {

inline int log_level() {
  static const int level = [] {
    const char* env = std::getenv("LWCL_LOG_LEVEL");
    return env ? std::atoi(env) : 1;
  }();
  return level;
}

template <class... Parts>
void log_info(Parts&&... parts) {
  if (log_level() >= 1) std::fprintf(stderr, "[lwcl] %s\n", detail::concat(std::forward<Parts>(parts)...).c_str());
}
template <class... Parts>
void log_debug(Parts&&... parts) {
  if (log_level() >= 2) std::fprintf(stderr, "[lwcl:debug] %s\n", detail::concat(std::forward<Parts>(parts)...).c_str());
}

}  // namespace lwcl
