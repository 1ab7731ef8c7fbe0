#pragma once
// What the fuzz targets share. lwcl's readers take file paths, so each input is written to a scratch
// file of this process first. A reader may refuse an input only with lwcl::error: refused() swallows
// that and nothing else, so any other exception, a crash, an out-of-bounds access (ASan) or undefined
// behaviour (UBSan) escapes to libFuzzer, which reports it with the input that caused it.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "lwcl/core/error.hpp"

namespace lwcl::fuzz {

// <temp>/lwcl_fuzz_<pid>, made on first use and removed at exit (the handler rebuilds the name rather
// than reading the static, which is destroyed before it runs).
inline std::filesystem::path scratch_name() {
  return std::filesystem::temp_directory_path() / ("lwcl_fuzz_" + std::to_string(::getpid()));
}
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    auto d = scratch_name();
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_name(), ec);
    });
    return d;
  }();
  return dir;
}

// Writes `size` bytes to <scratch>/<name> (replacing it) and returns the path.
inline std::string write_file(const std::string& name, const void* data, std::size_t size) {
  const auto path = scratch_dir() / name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path.string();
}
inline std::string write_file(const std::string& name, const std::string& text) {
  return write_file(name, text.data(), text.size());
}

// Runs f; an lwcl::error (the reader refused the input, as it should) ends it quietly.
template <class F>
void refused(F&& f) {
  try {
    f();
  } catch (const lwcl::error&) {
  }
}

}  // namespace lwcl::fuzz
