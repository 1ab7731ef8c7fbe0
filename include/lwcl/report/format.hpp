#pragma once
// Numbers as the tables print them.

#include <cstdarg>
#include <cstdio>
#include <string>

namespace lwcl::report {

// "12.3 MiB", "512 KiB", or "-" for zero (nothing held).
inline std::string human_bytes(double b) {
  char buf[32];
  if (b <= 0) return "-";
  if (b >= 1 << 20)
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1 << 20));
  else
    std::snprintf(buf, sizeof buf, "%.0f KiB", b / 1024);
  return buf;
}

// printf into a string.
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
inline std::string format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, args);
  va_end(args);
  std::string s(n > 0 ? static_cast<std::size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(s.data(), s.size() + 1, fmt, again);
  va_end(again);
  return s;
}

}  // namespace lwcl::report
