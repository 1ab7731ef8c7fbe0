#pragma once
// Small command-line helpers the programs share: --quick read early, comma-separated lists, fractions.

#include <algorithm>
#include <exception>
#include <string>
#include <vector>

#include "lwcl/core/error.hpp"

namespace lwcl::studies {

// --quick on the command line, read before the options are declared so that a program's defaults can
// follow it (the program still declares the flag, for --help and config.json).
inline bool quick_requested(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--quick") return true;
  return false;
}

// "a,b,,c" -> {"a", "b", "c"}.
inline std::vector<std::string> split_list(const std::string& text, char by = ',') {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t end = std::min(text.find(by, at), text.size());
    if (end > at) out.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

// `text` as a number in (0, below), or an lwcl::error naming `what`.
inline double parse_fraction(const std::string& text, double below, const std::string& what) {
  std::size_t used = 0;
  double v = -1;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  check(used == text.size() && v > 0 && v < below, what, ": '", text, "' is not a fraction in (0, ", below, ")");
  return v;
}

}  // namespace lwcl::studies
