// checkpoint_dir (core/checkpoint_dir.hpp), the checkpoints/ folder teacher training and the pipeline
// share: `latest` names the newest committed checkpoint, a commit keeps only the newest `keep`, a
// started folder is emptied of what a killed run left, forget() makes a fresh start, and bad names or
// a bad `latest` are lwcl::error.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "lwcl/core/checkpoint_dir.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/core/fs.hpp"

using namespace lwcl;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("lwcl_test_checkpoint_dir_" + name);
  fs::remove_all(p);
  return p;
}

}  // namespace

TEST_CASE("checkpoint_dir commits, keeps the newest, and names the latest") {
  const auto root = scratch("keep");
  const checkpoint_dir ck(root / "checkpoints", "step_", 2);
  CHECK(fs::is_directory(root / "checkpoints"));
  CHECK(!ck.latest().has_value());
  for (const char* name : {"step_00000001", "step_00000002", "step_00000003"}) {
    const auto dir = ck.start(name);
    write_text_atomic(dir / "state.json", name);
    ck.commit(name);
    REQUIRE(ck.latest().has_value());
    CHECK(*ck.latest() == root / "checkpoints" / name);
  }
  CHECK(!fs::exists(root / "checkpoints" / "step_00000001"));  // beyond keep = 2
  CHECK(fs::exists(root / "checkpoints" / "step_00000002" / "state.json"));
  CHECK(read_text(*ck.latest() / "state.json") == "step_00000003");
  fs::create_directories(root / "checkpoints" / "other");  // not a checkpoint: left alone
  ck.commit("step_00000003");
  CHECK(fs::exists(root / "checkpoints" / "other"));
  ck.forget();
  CHECK(!ck.latest().has_value());
  fs::remove_all(root);
}

TEST_CASE("checkpoint_dir empties a started folder and refuses bad names") {
  const auto root = scratch("start");
  const checkpoint_dir ck(root, "ck_", 1);
  {
    const auto dir = ck.start("ck_1");
    std::ofstream(dir / "half_written.bin") << "x";
  }
  CHECK(fs::exists(root / "ck_1" / "half_written.bin"));
  const auto again = ck.start("ck_1");  // what a killed run left is gone
  CHECK(fs::is_empty(again));
  CHECK_THROWS_AS(ck.start("step_1"), lwcl::error);
  CHECK_THROWS_AS(checkpoint_dir(root, "ck_", 0), lwcl::error);
  write_text_atomic(root / "latest", "../elsewhere");
  CHECK_THROWS_AS(ck.latest(), lwcl::error);
  fs::remove_all(root);
}
