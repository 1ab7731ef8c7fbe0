#pragma once
// Numerical comparison helpers for tests: relative error in the infinity norm, and central
// finite-difference gradient checks.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

#include "lwcl/core/rng.hpp"

namespace lwcl::test {

// max_i |a_i - b_i| / max_i |b_i|: the error relative to the reference's largest magnitude. With an
// all-zero reference it is the absolute error.
template <class A, class B>
double rel_error(const std::vector<A>& a, const std::vector<B>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    if (!(d <= num)) num = d;  // also catches NaN
    den = std::max(den, std::abs(static_cast<double>(b[i])));
  }
  return den > 0 ? num / den : num;
}

// Random values from N(0, scale^2), deterministic in (seed, stream).
template <class T>
std::vector<T> random_normal(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  philox_stream s{seed, 7};
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<T>(scale * s.normal(i));
  return v;
}

// Compares the analytic gradient `grad` of loss() with respect to x against central differences,
// at up to max_points evenly spread elements. Returns the largest relative error
// |fd - g| / max(|fd|, |g|, floor).
inline double gradcheck(std::vector<double>& x, const std::vector<double>& grad, const std::function<double()>& loss,
                        double eps = 1e-6, std::size_t max_points = 48, double floor = 1e-7) {
  const std::size_t n = x.size();
  const std::size_t step = std::max<std::size_t>(1, n / max_points);
  double worst = 0;
  for (std::size_t i = 0; i < n; i += step) {
    const double keep = x[i];
    x[i] = keep + eps;
    const double lp = loss();
    x[i] = keep - eps;
    const double lm = loss();
    x[i] = keep;
    const double fd = (lp - lm) / (2 * eps);
    const double err = std::abs(fd - grad[i]) / std::max({std::abs(fd), std::abs(grad[i]), floor});
    worst = std::max(worst, err);
  }
  return worst;
}

// sum_i a_i * w_i: turns a tensor output into a scalar loss whose gradient is w.
template <class T>
double dot(const std::vector<T>& a, const std::vector<T>& w) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * static_cast<double>(w[i]);
  return s;
}

}  // namespace lwcl::test
