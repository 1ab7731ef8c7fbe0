#pragma once
// JSON-lines metrics: one JSON object per line, flushed as written, so a killed run keeps every line it
// logged and a plot script can read the file while the run goes on.

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "lwcl/core/error.hpp"

namespace lwcl {

class metrics_writer {
 public:
  metrics_writer() = default;
  // append: keep the lines of an earlier run (resume); otherwise start the file afresh.
  explicit metrics_writer(const std::string& path, bool append = false) { open(path, append); }

  void open(const std::string& path, bool append = false) {
    out_.open(path, append ? std::ios::app : std::ios::trunc);
    check(out_.good(), "metrics_writer: cannot open '", path, "' for writing");
    path_ = path;
  }
  bool is_open() const { return out_.is_open(); }

  void write(const nlohmann::json& record) {
    check(out_.is_open(), "metrics_writer: write before open");
    out_ << record.dump() << '\n';
    out_.flush();
    check(out_.good(), "metrics_writer: write to '", path_, "' failed");
  }

 private:
  std::ofstream out_;
  std::string path_;
};

}  // namespace lwcl
