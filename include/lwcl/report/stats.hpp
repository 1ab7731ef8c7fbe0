#pragma once
// Mean and sample standard deviation over seeds, and the "mean +- sd" cell the tables print. The one
// implementation: the study harness's seed summaries, tables and chart bands all call summarise.

#include <cmath>
#include <string>
#include <vector>

#include "lwcl/report/format.hpp"

namespace lwcl::report {

struct summary {
  double mean = 0, sd = 0;  // sd: the sample standard deviation (n - 1); 0 for fewer than two values
  int n = 0;
};

inline summary summarise(const std::vector<double>& v) {
  summary s;
  s.n = static_cast<int>(v.size());
  if (v.empty()) return s;
  // Shifted by the first value, so that equal values give exactly their value and a deviation of 0.
  double shift = 0;
  for (double x : v) shift += x - v.front();
  s.mean = v.front() + shift / static_cast<double>(v.size());
  if (v.size() > 1) {
    double ss = 0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.sd = std::sqrt(ss / static_cast<double>(v.size() - 1));
  }
  return s;
}

// "mean +- sd" in printf format `fmt` (the mean alone for one value).
inline std::string cell(const summary& s, const char* fmt = "%.3f") {
  std::string out = format(fmt, s.mean);
  if (s.n > 1) out += " +- " + format(fmt, s.sd);
  return out;
}

}  // namespace lwcl::report
