#pragma once
// Whole-file text reads and atomic writes: a file written with write_text_atomic is either the old
// one or the complete new one, never a half-written one, because the text goes to <path>.tmp first
// and is renamed over the target (a killed run loses nothing it had saved).

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>

#include "lwcl/core/error.hpp"

namespace lwcl {

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "cannot read '", path.string(), "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_text_atomic(const std::filesystem::path& path, const std::string& text) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    f << text;
    f.flush();
    if (!f.good()) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      fail("writing '", tmp.string(), "' failed");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    fail("cannot rename '", tmp.string(), "' to '", path.string(), "'");
  }
}

}  // namespace lwcl
