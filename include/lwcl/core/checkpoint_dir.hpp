#pragma once
// The checkpoints/ folder of a run directory, shared by teacher training and layer-wise recovery: one
// folder per checkpoint, named with a prefix and a zero-padded count so that names sort by age, and a
// file `latest` naming the newest complete one. `latest` is written last and atomically, so a run
// killed while writing a checkpoint resumes from the one before it.

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/core/fs.hpp"

namespace lwcl {

class checkpoint_dir {
 public:
  // dir: the checkpoints folder (created); prefix: what every checkpoint folder's name starts with;
  // keep: how many complete checkpoints survive a commit (the newest ones).
  checkpoint_dir(std::filesystem::path dir, std::string prefix, std::size_t keep)
      : dir_(std::move(dir)), prefix_(std::move(prefix)), keep_(keep) {
    check(keep_ >= 1, "checkpoint_dir: keep is 0, expected at least one checkpoint kept");
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    check(!ec, "cannot create the checkpoint folder '", dir_.string(), "': ", ec.message());
  }

  const std::filesystem::path& path() const { return dir_; }

  // The folder `latest` names, when a checkpoint was committed.
  std::optional<std::filesystem::path> latest() const {
    if (!std::filesystem::exists(dir_ / "latest")) return std::nullopt;
    const std::string name = read_text(dir_ / "latest");
    check(!name.empty() && name.find('/') == std::string::npos, "'", (dir_ / "latest").string(), "' names '", name,
          "', expected the name of a checkpoint folder beside it");
    return dir_ / name;
  }

  // An empty folder for checkpoint `name`: whatever a killed run left under that name is removed.
  std::filesystem::path start(const std::string& name) const {
    check(name.rfind(prefix_, 0) == 0, "checkpoint_dir: checkpoint '", name, "' does not start with '", prefix_, "'");
    const auto dir = dir_ / name;
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    std::filesystem::create_directories(dir, ec);
    check(!ec, "cannot create the checkpoint folder '", dir.string(), "': ", ec.message());
    return dir;
  }

  // Makes `name` the newest complete checkpoint, then removes the older ones beyond `keep`.
  void commit(const std::string& name) const {
    write_text_atomic(dir_ / "latest", name);
    std::vector<std::filesystem::path> all;
    for (const auto& e : std::filesystem::directory_iterator(dir_))
      if (e.is_directory() && e.path().filename().string().rfind(prefix_, 0) == 0) all.push_back(e.path());
    std::sort(all.begin(), all.end());
    std::error_code ec;
    for (std::size_t i = 0; i + keep_ < all.size(); ++i) std::filesystem::remove_all(all[i], ec);
  }

  // A fresh start: no checkpoint counts any more (their folders go at the next commit).
  void forget() const {
    std::error_code ec;
    std::filesystem::remove(dir_ / "latest", ec);
  }

 private:
  std::filesystem::path dir_;
  std::string prefix_;
  std::size_t keep_;
};

}  // namespace lwcl
