#pragma once
// The rules the programs' numeric options check, stated in words. CLI11's own range checks print their
// bounds as numbers a machine chose: its PositiveNumber says "not in range 0.000000 to 1797693...", 309
// digits of the largest double, for --lr -1. These say "--lr: must be greater than 0 (got -1)", and --help
// shows the rule ("FLOAT:> 0", "FLOAT:in [0, 0.95]").
//   app.add_option("--lr", lr, "peak learning rate")->check(studies::positive);

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>

namespace lwcl::studies {

namespace validators_detail {

// `text` read whole as a finite number; false for anything else (empty, trailing characters, NaN, Inf).
inline bool number(const std::string& text, double& v) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  v = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && errno != ERANGE && std::isfinite(v);
}

// A bound as a person writes it: 0.95, 512, 1048576.
inline std::string shown(double x) {
  char buf[48];
  if (x == std::floor(x) && std::fabs(x) < 1e15) std::snprintf(buf, sizeof buf, "%.0f", x);
  else std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

// A validator that accepts a finite number for which `ok` holds; `rule` completes "must be ...".
inline CLI::Validator rule(std::string rule_words, std::string help, std::function<bool(double)> ok) {
  return CLI::Validator(
      [rule_words, ok](std::string& text) {
        double v = 0;
        if (!number(text, v)) return "must be a number " + rule_words + " (got '" + text + "')";
        if (!ok(v)) return "must be " + rule_words + " (got " + text + ")";
        return std::string();
      },
      std::move(help));
}

}  // namespace validators_detail

// Greater than 0.
inline const CLI::Validator positive = validators_detail::rule("greater than 0", "> 0", [](double v) { return v > 0; });

// 0 or more.
inline const CLI::Validator non_negative =
    validators_detail::rule("0 or more", ">= 0", [](double v) { return v >= 0; });

// From `lo` to `hi`, both included.
inline CLI::Validator within(double lo, double hi) {
  namespace d = validators_detail;
  return d::rule("from " + d::shown(lo) + " to " + d::shown(hi), "in [" + d::shown(lo) + ", " + d::shown(hi) + "]",
                 [lo, hi](double v) { return v >= lo && v <= hi; });
}

}  // namespace lwcl::studies
