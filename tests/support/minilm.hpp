#pragma once
// Where tools/install_deps.sh --minilm puts the pretrained all-MiniLM-L6-v2, for the tests that run it:
// ${LWCL_MODELS:-$HOME/.cache/lwcl/models}/all-MiniLM-L6-v2.

#include <cstdlib>
#include <filesystem>
#include <string>

namespace lwcl::test {

inline std::string minilm_dir() {
  const char* models = std::getenv("LWCL_MODELS");
  const char* home = std::getenv("HOME");
  const std::filesystem::path root = models && *models ? std::filesystem::path(models)
                                                       : std::filesystem::path(home ? home : "") / ".cache" / "lwcl" / "models";
  return (root / "all-MiniLM-L6-v2").string();
}

}  // namespace lwcl::test
