#pragma once
// lwcl::error: the one exception type the framework throws for bad input. Its message names the op,
// file, tensor or option at fault and says what was expected; programs catch it in main.

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace lwcl {

class error : public std::runtime_error {
 public:
  explicit error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
template <class... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream os;
  (os << ... << std::forward<Parts>(parts));
  return os.str();
}
}  // namespace detail

// Throws lwcl::error with the pieces streamed together: fail("layernorm_forward: weight has ", n, ...).
template <class... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  throw error(detail::concat(std::forward<Parts>(parts)...));
}

// Throws lwcl::error unless cond holds.
template <class... Parts>
void check(bool cond, Parts&&... parts) {
  if (!cond) fail(std::forward<Parts>(parts)...);
}

}  // namespace lwcl
