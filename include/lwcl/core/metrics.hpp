#pragma once
// JSON-lines metrics: one JSON object per line, flushed as written, so a killed run keeps every line it
// logged and a plot script can read the file while the run goes on.

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "lwcl/core/error.hpp"
#include "lwcl/core/fs.hpp"

namespace lwcl {

class metrics_writer {
 public:
  metrics_writer() = default;
  // append: keep the lines of an earlier run (resume); otherwise start the file afresh.
  explicit metrics_writer(const std::string& path, bool append = false) { open(path, append); }

  void open(const std::string& path, bool append = false) {
    close();
    records_ = 0;
    if (append && std::filesystem::exists(path)) {
      std::istringstream in(read_text(path));
      for (std::string line; std::getline(in, line);) records_ += !line.empty();
    }
    out_.clear();
    out_.open(path, append ? std::ios::app : std::ios::trunc);
    check(out_.good(), "metrics_writer: cannot open '", path, "' for writing");
    path_ = path;
  }
  bool is_open() const { return out_.is_open(); }
  void close() {
    if (out_.is_open()) out_.close();
  }

  void write(const nlohmann::json& record) {
    check(out_.is_open(), "metrics_writer: write before open");
    out_ << record.dump() << '\n';
    out_.flush();
    check(out_.good(), "metrics_writer: write to '", path_, "' failed");
    ++records_;
  }
  // Records in the file: those written since open, and those it held when opened to append.
  std::size_t records() const { return records_; }

 private:
  std::ofstream out_;
  std::string path_;
  std::size_t records_ = 0;
};

// A metrics file after a resume: drops the records whose `key` is past `last` (the resumed run writes
// them again) and lines cut by the kill; other records stay.
inline void truncate_metrics(const std::filesystem::path& path, const std::string& key, long last) {
  if (!std::filesystem::exists(path)) return;
  std::istringstream in(read_text(path));
  std::string line, kept;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      const auto j = nlohmann::json::parse(line);
      if (j.contains(key) && j[key].get<long>() > last) continue;
    } catch (const nlohmann::json::exception&) {
      continue;
    }
    kept += line + '\n';
  }
  write_text_atomic(path, kept);
}

// A metrics file after a resume from a checkpoint that recorded how many records the file held: keeps
// exactly those (every record after them, steps and events alike, is written again by the resumed run).
inline void truncate_metrics_records(const std::filesystem::path& path, std::size_t keep) {
  if (!std::filesystem::exists(path)) return;
  std::istringstream in(read_text(path));
  std::string line, kept;
  std::size_t n = 0;
  while (n < keep && std::getline(in, line)) {
    if (line.empty()) continue;
    kept += line + '\n';
    ++n;
  }
  check(n == keep, "truncate_metrics_records: '", path.string(), "' holds ", n, " records, its checkpoint counted ", keep);
  write_text_atomic(path, kept);
}

}  // namespace lwcl
