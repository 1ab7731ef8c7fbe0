#pragma once
// The plots of a recovery run, drawn from what the run logged, so that a resumed run's plots cover all
// of it: loss_curves.png (every segment visit's local loss over the global step, and a closing
// end-to-end stage's loss after them), memory.png (the tracker's compute, cache and prefetch-staging
// bytes and the process's resident set over wall-clock time) from a pipeline's metrics.jsonl, and
// cumulative_error.png (per-layer relative error against the teacher, one curve per method).

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/core/error.hpp"
#include "lwcl/report/plot.hpp"

namespace lwcl::distill {

// loss_curves.png and memory.png in `out_dir` from a pipeline run's metrics.jsonl. Returns the paths
// written (a run with no step records writes none).
inline std::vector<std::filesystem::path> plot_pipeline_metrics(const std::filesystem::path& metrics_jsonl,
                                                                 const std::filesystem::path& out_dir,
                                                                 const std::string& title = "layer-wise recovery") {
  std::ifstream in(metrics_jsonl);
  check(in.good(), "plot_pipeline_metrics: cannot read '", metrics_jsonl.string(), "'");
  // One loss series per visit, keyed by (phase, position) in the order the visits ran; the closing
  // stage's records (with "stage") one more, after them.
  std::vector<std::pair<std::pair<long, long>, report::series>> visits;
  report::series compute{"compute (MiB)", {}, {}, {}, {}, {}}, cache{"feature cache (MiB)", {}, {}, {}, {}, {}},
      staging{"prefetch staging (MiB)", {}, {}, {}, {}, {}}, resident{"process resident (MiB)", {}, {}, {}, {}, {}};
  constexpr double mib = 1 << 20;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      continue;  // a line cut by a kill
    }
    if (!j.contains("global_step")) continue;
    const bool stage = j.contains("stage");
    const std::pair<long, long> id =
        stage ? std::pair<long, long>{-1, -1} : std::pair<long, long>{j.at("phase").get<long>(), j.at("position").get<long>()};
    if (visits.empty() || visits.back().first != id) {
      char label[96];
      if (stage)
        std::snprintf(label, sizeof label, "closing stage (%s)", j.at("stage").get<std::string>().c_str());
      else
        std::snprintf(label, sizeof label, "phase %ld: layers %ld-%ld", id.first, j.at("first").get<long>(),
                      j.at("last").get<long>() - 1);
      visits.push_back({id, report::series{label, {}, {}, {}, {}, {}}});
    }
    const double step = j.at("global_step").get<double>(), loss = j.at("loss").get<double>();
    if (loss > 0) {
      visits.back().second.x.push_back(step);
      visits.back().second.y.push_back(loss);
    }
    const double t = j.at("seconds").get<double>();
    // A closing stage's records hold no cache or staging (both empty by then) and the resident set
    // beside the tracker's bytes.
    const auto& m = j.at("memory");
    compute.x.push_back(t);
    compute.y.push_back(m.at("compute").get<double>() / mib);
    cache.x.push_back(t);
    cache.y.push_back(m.value("cache", 0.0) / mib);
    staging.x.push_back(t);
    staging.y.push_back(m.value("staging", 0.0) / mib);
    const auto& rss = m.contains("resident") ? m.at("resident") : j.value("resident", nlohmann::json());
    if (rss.is_number()) {
      resident.x.push_back(t);
      resident.y.push_back(rss.get<double>() / mib);
    }
  }
  std::vector<std::filesystem::path> written;
  if (compute.x.empty()) return written;
  report::chart losses;
  losses.title = title + ": local loss of each segment visit";
  losses.x_label = "segment step (all visits)";
  losses.x_integer = true;
  losses.y_label = "local loss";
  losses.log_y = true;
  for (auto& v : visits)
    if (!v.second.x.empty()) losses.lines.push_back(std::move(v.second));
  if (!losses.lines.empty()) {
    report::write_png(losses, out_dir / "loss_curves.png");
    written.push_back(out_dir / "loss_curves.png");
  }
  report::chart mem;
  mem.title = title + ": memory over time";
  mem.x_label = "wall-clock seconds";
  mem.y_label = "MiB";
  mem.y_min = 0.0;
  mem.lines = {std::move(compute), std::move(cache), std::move(staging)};
  if (!resident.x.empty()) mem.lines.push_back(std::move(resident));
  report::write_png(mem, out_dir / "memory.png");
  written.push_back(out_dir / "memory.png");
  return written;
}

// The axes of a cumulative-error chart (no lines yet): relative error against the teacher, from 0, by
// student layer (whole numbers).
inline report::chart cumulative_error_chart(const std::string& title) {
  report::chart c;
  c.title = title;
  c.x_label = "student layer";
  c.x_integer = true;
  c.y_label = "||h_S - h_T|| / ||h_T||";
  c.y_min = 0.0;
  return c;
}

// cumulative_error.png: one curve per method, relative error against the teacher by student layer.
inline void plot_cumulative_error(const std::vector<std::pair<std::string, std::vector<double>>>& curves,
                                  const std::filesystem::path& png, const std::string& title = "cumulative error by depth") {
  report::chart c = cumulative_error_chart(title);
  for (const auto& [name, err] : curves) {
    report::series s{name, {}, {}, {}, {}, {}};
    for (std::size_t l = 0; l < err.size(); ++l) {
      s.x.push_back(static_cast<double>(l));
      s.y.push_back(err[l]);
    }
    c.lines.push_back(std::move(s));
  }
  report::write_png(c, png);
}

}  // namespace lwcl::distill
