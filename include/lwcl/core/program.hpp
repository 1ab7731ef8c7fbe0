#pragma once
// What a program's main does with an exception that is not an lwcl::error (the library's bad-input
// error, which programs report themselves): out of memory, or a standard-library length or range error
// from a size nothing validated. One line on stderr and exit code 2, never an abort.
//   } catch (const lwcl::error& e) { ... } catch (const std::exception& e) { return lwcl::report_failure(e); }

#include <cstdio>
#include <exception>
#include <new>

namespace lwcl {

inline int report_failure(const std::exception& e) noexcept {
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr)
    std::fprintf(stderr, "error: out of memory (std::bad_alloc): the model, batch or data asked for more than this "
                         "machine could allocate\n");
  else
    std::fprintf(stderr, "error: %s\n", e.what());
  return 2;
}

}  // namespace lwcl
