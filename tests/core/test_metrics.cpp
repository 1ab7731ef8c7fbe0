// metrics_writer: every record is one valid JSON line, readable while the writer is still open;
// append keeps an earlier run's lines, the default starts afresh; failures name the file.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "lwcl/core/metrics.hpp"

using namespace lwcl;
namespace fs = std::filesystem;

namespace {

std::vector<nlohmann::json> read_lines(const fs::path& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));  // throws if invalid
  return out;
}

struct temp_file {
  fs::path path = fs::temp_directory_path() / ("lwcl_test_metrics_" + std::to_string(::getpid()) + ".jsonl");
  ~temp_file() {
    std::error_code ec;
    fs::remove(path, ec);
  }
};

}  // namespace

TEST_CASE("metrics_writer writes JSON lines that can be read while it is open") {
  temp_file f;
  metrics_writer w(f.path.string());
  CHECK(w.is_open());
  w.write({{"step", 1}, {"loss", 2.5}, {"segment", "block 0\t\"a\"\n"}});
  auto lines = read_lines(f.path);  // the writer is still open: the line must already be on disk
  REQUIRE(lines.size() == 1);
  CHECK(lines[0]["step"] == 1);
  CHECK(lines[0]["loss"] == 2.5);
  CHECK(lines[0]["segment"] == "block 0\t\"a\"\n");

  w.write({{"step", 2}, {"loss", NAN}, {"per_layer", {0.1, 0.2}}});
  lines = read_lines(f.path);
  REQUIRE(lines.size() == 2);
  CHECK(lines[1]["step"] == 2);
  CHECK(lines[1]["loss"].is_null());  // a NaN must not make the line invalid JSON
  CHECK(lines[1]["per_layer"][1] == 0.2);
}

TEST_CASE("metrics_writer appends on resume and starts afresh otherwise") {
  temp_file f;
  {
    metrics_writer w(f.path.string());
    w.write({{"step", 1}});
    w.write({{"step", 2}});
  }
  {
    metrics_writer w(f.path.string(), /*append=*/true);
    w.write({{"step", 3}});
  }
  auto lines = read_lines(f.path);
  REQUIRE(lines.size() == 3);
  CHECK(lines[2]["step"] == 3);
  {
    metrics_writer w;
    CHECK_FALSE(w.is_open());
    w.open(f.path.string());
    w.write({{"step", 1}});
  }
  lines = read_lines(f.path);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0]["step"] == 1);
}

TEST_CASE("metrics_writer errors name the file") {
  CHECK_THROWS_WITH_AS(metrics_writer("/nonexistent-lwcl-dir/metrics.jsonl"),
                       doctest::Contains("metrics_writer: cannot open '/nonexistent-lwcl-dir/metrics.jsonl' for writing"),
                       lwcl::error);
  metrics_writer w;
  CHECK_THROWS_WITH_AS(w.write({{"step", 1}}), doctest::Contains("metrics_writer: write before open"), lwcl::error);
}
