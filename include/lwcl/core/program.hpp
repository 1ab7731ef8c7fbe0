#pragma once
// What a program's main does with what its work throws: an lwcl::error (bad input) and any other
// exception (out of memory, a standard-library length or range error from a size nothing validated)
// become one line on stderr and exit code 2, never an abort. A main parses its options, then
//   return lwcl::guard_main([&] { ...the work...; return 0; });

#include <cstdio>
#include <exception>
#include <new>

#include "lwcl/core/error.hpp"

namespace lwcl {

inline int report_failure(const std::exception& e) noexcept {
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr)
    std::fprintf(stderr, "error: out of memory (std::bad_alloc): the model, batch or data asked for more than this "
                         "machine could allocate\n");
  else
    std::fprintf(stderr, "error: %s\n", e.what());
  return 2;
}

// Runs `body` (returning the exit code) and reports what it throws: "error: <what>" and exit code 2.
template <class Body>
int guard_main(Body&& body) {
  try {
    return body();
  } catch (const error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    return report_failure(e);
  }
}

}  // namespace lwcl
