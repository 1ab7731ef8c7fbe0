#pragma once
// disk: the feature cache as memory-mapped record files under <run directory>/<folder>. RAM holds only
// what the page cache keeps; a resumed run reopens the records its teacher pass already wrote.

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>

#include "lwcl/core/error.hpp"
#include "lwcl/core/fs.hpp"
#include "lwcl/cache/disk_store.hpp"
#include "lwcl/cache/feature_cache.hpp"
#include "lwcl/policies/cache/concept.hpp"

namespace lwcl::policies::cache {

struct disk {
  static constexpr std::string_view name = "disk";
  using store = lwcl::cache::disk_store;

  std::string folder = "features";  // inside the run directory; an absolute path is used as it is

  // The cache directory, created and checked to be writable (a probe file is written and removed), so
  // an unwritable place fails before the teacher pass rather than at its first record.
  std::tuple<std::filesystem::path> store_args(const std::filesystem::path& run_dir) const {
    const std::filesystem::path dir = std::filesystem::path(folder).is_absolute() ? std::filesystem::path(folder) : run_dir / folder;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    check(!ec, "cache::disk: cannot create the feature cache directory '", dir.string(), "': ", ec.message());
    const auto probe = dir / ".write_probe";
    try {
      write_file_atomic(probe, "lwcl", {.sync = durability::process});
    } catch (const error& e) {
      fail("cache::disk: the feature cache directory '", dir.string(), "' cannot be written (", e.what(),
           "); pick a writable run directory or cache::disk{.folder = ...}");
    }
    std::filesystem::remove(probe, ec);
    return {dir};
  }
  std::unique_ptr<lwcl::cache::feature_cache<store>> open(const std::filesystem::path& run_dir) const {
    return std::make_unique<lwcl::cache::feature_cache<store>>(std::get<0>(store_args(run_dir)));
  }
};
static_assert(cache_policy<disk>);

}  // namespace lwcl::policies::cache
