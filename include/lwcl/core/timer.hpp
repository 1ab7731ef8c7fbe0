#pragma once
// Wall-clock timer on the steady clock, in seconds.

#include <chrono>

namespace lwcl {

class timer {
 public:
  timer() : start_(clock::now()) {}
  void reset() { start_ = clock::now(); }
  double seconds() const { return std::chrono::duration<double>(clock::now() - start_).count(); }

 private:
  using clock = std::chrono::steady_clock;
  clock::time_point start_;
};

}  // namespace lwcl
