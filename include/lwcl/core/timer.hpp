#pragma once
// Wall-clock timer on the steady clock, in seconds.

#include <chrono>

#include <sys/resource.h>

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

// Processor seconds of the whole process (user and system, every thread) since it was made: the cost
// of a run that the machine's load does not stretch as it does wall seconds.
class cpu_timer {
 public:
  cpu_timer() : start_(now()) {}
  double seconds() const { return now() - start_; }
  static double now() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  }

 private:
  double start_;
};

}  // namespace lwcl
