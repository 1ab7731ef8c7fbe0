#pragma once
// The tables of a sweep (the programs of paper_repro/ and experiments/gelaco_recover): the --quick switch, a sweep of one comparison over the
// paper's settings (progress and an estimate of the time left), the tables read back from the
// report.json every setting wrote (printed as Markdown, written as Markdown, CSV and JSON), and the
// figures: cumulative error by depth, quality against training time with a band of one standard
// deviation over the seeds, and memory over time. Every number a table prints is read from a JSON file
// in the run directory, so it can be traced to the run that made it.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/core/error.hpp"
#include "lwcl/core/fs.hpp"
#include "lwcl/distill/report.hpp"
#include "lwcl/report/format.hpp"
#include "lwcl/report/plot.hpp"
#include "lwcl/report/stats.hpp"
#include "studies/cli.hpp"

namespace lwcl::studies::repro {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using studies::parse_fraction;
using studies::quick_requested;
using studies::split_list;


// The machine a table was measured on: processor model, logical processors, and the vector features
// that change kernel speed (from /proc/cpuinfo).
inline std::string machine() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model = "unknown processor", flags;
  int cpus = 0;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "processor") ++cpus;
    if (key == "model name" && model == "unknown processor") model = value;
    if (key == "flags" && flags.empty()) flags = " " + value + " ";
  }
  std::string features;
  for (const char* f : {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})
    if (flags.find(" " + std::string(f) + " ") != std::string::npos) features += " " + std::string(f);
  return model + ", " + std::to_string(cpus) + " logical processors," + (features.empty() ? " no AVX2" : features);
}

inline json read_json(const fs::path& p) {
  std::ifstream in(p);
  check(in.good(), "paper_repro: cannot read ", p.string(), " (a run that should have written it did not finish)");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail("paper_repro: ", p.string(), " is not JSON: ", e.what());
  }
}

// A method's entry in a report.json (a comparison's `methods`), or nullptr.
inline const json* method_of(const json& report, const std::string& name) {
  if (!report.contains("methods")) return nullptr;
  for (const auto& m : report.at("methods"))
    if (m.contains("name") && m.at("name") == name) return &m;
  return nullptr;
}

// The methods of a report that trained (every one but the teacher and the pruned student), in its order.
inline std::vector<std::string> trained_methods(const json& report) {
  std::vector<std::string> names;
  if (!report.contains("methods")) return names;
  for (const auto& m : report.at("methods"))
    if (m.contains("name") && m.at("name") != "teacher" && m.at("name") != "pruned")
      names.push_back(m.at("name").get<std::string>());
  return names;
}

// A figure of a method: mean and sample standard deviation over n seeds, whether the run had one seed
// (a plain number) or several (the seeds' summary: {mean, sd, values}).
struct stat {
  double mean = 0, sd = 0;
  int n = 0;
};
inline std::optional<stat> figure(const json& method, const std::string& key) {
  if (!method.contains(key)) return std::nullopt;
  const auto& v = method.at(key);
  if (v.is_number()) return stat{v.get<double>(), 0.0, 1};
  if (v.is_object() && v.contains("mean") && v.at("mean").is_number())
    return stat{v.at("mean").get<double>(), v.at("sd").get<double>(),
                v.contains("values") ? static_cast<int>(v.at("values").size()) : 1};
  return std::nullopt;
}

// How a column's numbers print.
enum class unit {
  ppl,      // 3 decimals
  mib,      // bytes shown in MiB, 1 decimal
  seconds,  // 1 decimal
  ratio,    // 3 decimals
  gflops,   // FLOPs shown in GFLOPs, no decimals
  cosine,   // 4 decimals
  count,    // whole numbers
  reached,  // a 0/1 figure: the count of seeds where it is 1, "k/n"
  text,     // a string entry
};

struct column {
  std::string key, header;
  unit u = unit::ratio;
  std::string fallback = {};  // read where a method has no `key` (end-to-end KD's run total is its run peak)
};

// A table: leading label columns (setting, method, ...), then one column per figure.
struct table {
  std::string title;
  std::vector<std::string> label_headers;
  std::vector<column> columns;
  struct row {
    std::vector<std::string> labels;
    json method;
  };
  std::vector<row> rows;

  void add(std::vector<std::string> labels, const json& method) {
    check(labels.size() == label_headers.size(), "paper_repro table '", title, "': ", labels.size(),
          " labels for ", label_headers.size(), " label columns");
    rows.push_back({std::move(labels), method});
  }

  static std::optional<stat> value(const json& m, const column& c) {
    auto f = figure(m, c.key);
    if (!f && !c.fallback.empty()) f = figure(m, c.fallback);
    return f;
  }

  static std::string cell(const json& m, const column& c) {
    if (c.u == unit::text) return m.contains(c.key) && m.at(c.key).is_string() ? m.at(c.key).get<std::string>() : "-";
    const auto f = value(m, c);
    if (!f) return "-";
    if (c.u == unit::reached)
      return std::to_string(static_cast<int>(std::lround(f->mean * f->n))) + "/" + std::to_string(f->n);
    double scale = 1;
    const char* fmt = "%.3f";
    switch (c.u) {
      case unit::mib: scale = 1.0 / (1 << 20); fmt = "%.1f"; break;
      case unit::seconds: fmt = "%.1f"; break;
      case unit::gflops: scale = 1e-9; fmt = "%.0f"; break;
      case unit::cosine: fmt = "%.4f"; break;
      case unit::count: fmt = "%.0f"; break;
      default: break;
    }
    std::string s = report::format(fmt, f->mean * scale);
    if (f->n > 1) {
      s += " +- ";
      s += report::format(fmt, f->sd * scale);
    }
    return s;
  }

  std::string markdown() const {
    std::string md = title.empty() ? "" : "### " + title + "\n\n";
    md += "|";
    std::string rule = "|";
    for (const auto& h : label_headers) {
      md += " " + h + " |";
      rule += "---|";
    }
    for (const auto& c : columns) {
      md += " " + c.header + " |";
      rule += c.u == unit::text ? "---|" : "---:|";
    }
    md += "\n" + rule + "\n";
    for (const auto& r : rows) {
      md += "|";
      for (const auto& l : r.labels) md += " " + l + " |";
      for (const auto& c : columns) {
        md += " ";  // piece by piece: GCC 12 misreads the bound of "literal" + temporary at -O3
        md += cell(r.method, c);
        md += " |";
      }
      md += "\n";
    }
    return md;
  }

  // One line per row; a figure as its mean and, beside it, <key>_sd and <key>_n (raw units: bytes, FLOPs).
  std::string csv() const {
    auto quoted = [](const std::string& s) {
      if (s.find_first_of(",\"\n") == std::string::npos) return s;
      std::string q = "\"";
      for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
      return q + "\"";
    };
    std::string out;
    for (const auto& h : label_headers) {
      if (!out.empty()) out += ",";
      out += quoted(h);
    }
    for (const auto& c : columns)
      out += c.u == unit::text ? "," + c.key : "," + c.key + "," + c.key + "_sd," + c.key + "_n";
    out += "\n";
    for (const auto& r : rows) {
      std::string line;
      for (const auto& l : r.labels) {
        if (!line.empty()) line += ",";
        line += quoted(l);
      }
      for (const auto& c : columns) {
        if (c.u == unit::text) {
          line += ",";
          line += quoted(cell(r.method, c));
          continue;
        }
        const auto f = value(r.method, c);
        line += f ? report::format(",%.10g,%.10g,%d", f->mean, f->sd, f->n) : std::string(",,,");
      }
      out += line + "\n";
    }
    return out;
  }

  json to_json() const {
    json rs = json::array();
    for (const auto& r : rows) {
      json j = json::object();
      for (std::size_t i = 0; i < r.labels.size(); ++i) j[label_headers[i]] = r.labels[i];
      for (const auto& c : columns) {
        if (c.u == unit::text) {
          j[c.key] = cell(r.method, c);
        } else if (const auto f = value(r.method, c)) {
          j[c.key] = {{"mean", f->mean}, {"sd", f->sd}, {"n", f->n}};
        }
      }
      rs.push_back(j);
    }
    return {{"title", title}, {"rows", rs}};
  }
};

// A method of a table that sets methods side by side: its name in report.json, the prefix of its
// columns, its label in their headers.
struct method_columns {
  std::string name, prefix, label;
};

// Per recovered method (all but "pruned"): its training peak, and for the layer-wise ones (all but
// "e2e_kd") the run's peak with the host feature cache.
inline void add_peak_columns(table& t, const std::vector<method_columns>& methods) {
  for (const auto& m : methods) {
    if (m.name == "pruned") continue;
    t.columns.push_back({m.prefix + "peak_compute_bytes", m.label + " peak MiB", unit::mib});
    if (m.name != "e2e_kd") t.columns.push_back({m.prefix + "run_peak_total_bytes", m.label + " run + cache MiB", unit::mib});
  }
}

// The program's tables: printed as Markdown, and written to <dir>/table.md (with the notes under them),
// table.csv (every table, a blank line between) and tables.json; `program` names the writer in the
// line that says so.
inline void write_tables(const fs::path& dir, const std::string& heading, const std::vector<table>& tables,
                         const std::vector<std::string>& notes, const json& extra = json::object(),
                         const std::string& program = "paper_repro") {
  std::string md = "## " + heading + "\n\n", csv;
  json js = {{"heading", heading}, {"tables", json::array()}, {"notes", notes}};
  for (const auto& [k, v] : extra.items()) js[k] = v;
  for (const auto& t : tables) {
    md += t.markdown() + "\n";
    csv += (csv.empty() ? "" : "\n") + t.csv();
    js["tables"].push_back(t.to_json());
  }
  for (const auto& n : notes) md += n + "\n";
  std::printf("\n%s", md.c_str());
  // Temporaries of their own: run_all.sh's two parts of a pruning table write the same folder's tables
  // and may finish together; the last rename wins with a whole file either way.
  const write_options own{.unique_temporary = true};
  write_file_atomic(dir / "table.md", md, own);
  write_file_atomic(dir / "table.csv", csv, own);
  write_file_atomic(dir / "tables.json", js.dump(2) + "\n", own);
  std::printf("%s: wrote %s/{table.md, table.csv, tables.json}\n", program.c_str(), dir.string().c_str());
}

// Progress over a program's runs, with the time left estimated from the runs done so far (weighted by
// each run's expected share of the work). A run that ended within `read_back_seconds` of its start was
// read back from an earlier, interrupted run: its weight and its seconds stay out of the estimate, so a
// resumed program estimates from the runs it trains, not from the ones it found finished.
class sweep_progress {
 public:
  static constexpr double read_back_seconds = 2.0;

  sweep_progress(std::string program, std::vector<double> weights)
      : program_(std::move(program)), weights_(std::move(weights)), start_(std::chrono::steady_clock::now()) {}

  void begin(std::size_t k, const std::string& what) {
    const double now = seconds();
    if (current_ < weights_.size()) {  // the run before this one ended now
      if (now - current_start_ >= read_back_seconds) {
        trained_weight_ += weights_[current_];
        trained_seconds_ += now - current_start_;
      }
    }
    double total_left = 0;
    for (std::size_t i = k; i < weights_.size(); ++i) total_left += weights_[i];
    std::string left = "estimate after the first run it trains";
    if (trained_weight_ > 0 && trained_seconds_ > 0)
      left = report::format("about %.0f min left", trained_seconds_ / trained_weight_ * total_left / 60.0);
    std::printf("\n######## %s: run %zu of %zu: %s (%.0f min so far, %s)\n", program_.c_str(), k + 1, weights_.size(),
                what.c_str(), now / 60.0, left.c_str());
    std::fflush(stdout);
    current_ = k;
    current_start_ = now;
  }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::string program_;
  std::vector<double> weights_;
  std::chrono::steady_clock::time_point start_;
  std::size_t current_ = static_cast<std::size_t>(-1);
  double current_start_ = 0, trained_weight_ = 0, trained_seconds_ = 0;
};

// The run directory of every seed of a comparison's run directory: <dir>/seed_*/ (with a report.json)
// in seed order, or <dir> itself for a run of one seed.
inline std::vector<fs::path> seed_dirs(const fs::path& dir) {
  std::vector<std::pair<long, fs::path>> seeds;
  if (fs::exists(dir))
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string n = e.path().filename().string();
      if (e.is_directory() && n.rfind("seed_", 0) == 0 && fs::exists(e.path() / "report.json"))
        seeds.emplace_back(std::stol(n.substr(5)), e.path());
    }
  std::sort(seeds.begin(), seeds.end());
  std::vector<fs::path> out;
  for (const auto& [s, p] : seeds) out.push_back(p);
  if (out.empty()) out.push_back(dir);
  return out;
}

// The report.json of every seed, in seed_dirs' order.
inline std::vector<json> seed_reports(const fs::path& dir) {
  std::vector<json> out;
  for (const auto& d : seed_dirs(dir)) out.push_back(read_json(d / "report.json"));
  return out;
}

namespace detail {

// Mean and mean -+ one sample standard deviation of each column of `v` (rows of equal length).
inline void mean_sd(const std::vector<std::vector<double>>& v, std::vector<double>& mean, std::vector<double>& lo,
                    std::vector<double>& hi) {
  const std::size_t n = v.front().size();
  mean.assign(n, 0);
  lo.assign(n, 0);
  hi.assign(n, 0);
  std::vector<double> column(v.size());
  for (std::size_t j = 0; j < n; ++j) {
    for (std::size_t i = 0; i < v.size(); ++i) column[i] = v[i][j];
    const report::summary s = report::summarise(column);
    mean[j] = s.mean;
    lo[j] = s.mean - s.sd;
    hi[j] = s.mean + s.sd;
  }
}

// y of the piecewise-linear curve (xs, ys) at x (held at the ends).
inline double at(const std::vector<double>& xs, const std::vector<double>& ys, double x) {
  if (x <= xs.front()) return ys.front();
  for (std::size_t i = 1; i < xs.size(); ++i)
    if (x <= xs[i]) {
      const double w = xs[i] > xs[i - 1] ? (x - xs[i - 1]) / (xs[i] - xs[i - 1]) : 1.0;
      return ys[i - 1] + w * (ys[i] - ys[i - 1]);
    }
  return ys.back();
}

// A chart line: the mean over the seeds' rows (equal lengths) at `x`, labelled with the seed count and,
// with two seeds or more, a band of one sd.
inline report::series over_seeds(const std::string& name, const std::vector<std::vector<double>>& rows,
                                 std::vector<double> x) {
  report::series s;
  s.label = name;
  if (rows.size() > 1) s.label += report::format(" (%zu seeds)", rows.size());
  mean_sd(rows, s.y, s.lo, s.hi);
  s.x = std::move(x);
  if (rows.size() < 2) {
    s.lo.clear();
    s.hi.clear();
  }
  return s;
}

// Writes the chart unless it has no line; whether it did.
inline bool write_if_any(const report::chart& c, const fs::path& png) {
  if (c.lines.empty()) return false;
  report::write_png(c, png);
  return true;
}

}  // namespace detail

// Cumulative error by depth (||h_S - h_T|| / ||h_T|| at every student layer on the held-out batches)
// of each of `methods` in the run directory `dir`: the mean over the seeds, with a band of one sd.
// False (and no file) when none of them has one.
inline bool plot_cumulative_error(const fs::path& dir, const std::vector<std::string>& methods, const fs::path& png,
                                  const std::string& title) {
  const auto reps = seed_reports(dir);
  report::chart c = distill::cumulative_error_chart(title);
  for (const auto& name : methods) {
    std::vector<std::vector<double>> per_seed;
    for (const auto& r : reps)
      if (const auto* m = method_of(r, name); m && m->contains("cumulative_error") && !m->at("cumulative_error").empty())
        per_seed.push_back(m->at("cumulative_error").get<std::vector<double>>());
    if (per_seed.empty()) continue;
    std::vector<double> layers;
    for (std::size_t l = 0; l < per_seed.front().size(); ++l) layers.push_back(static_cast<double>(l));
    c.lines.push_back(detail::over_seeds(name, per_seed, std::move(layers)));
  }
  return detail::write_if_any(c, png);
}

// One line of a quality-against-time chart: the curves of `method` in the run directory `dir` (each
// seed's), drawn as `label`.
struct curve_source {
  std::string label;
  fs::path dir;
  std::string method;
};

// Held-out quality (a curve's `ppl`: perplexity, or 1 - cosine for an encoder) against training seconds
// of each source (evaluation time excluded): every seed's curve read at 48 evenly spaced seconds up to
// the shortest seed's end, the mean drawn with a band of one sd. Sources without a curve are left out;
// false (and no file) when all are.
inline bool plot_quality_vs_time(const std::vector<curve_source>& sources, const fs::path& png, const std::string& title,
                                 const std::string& y_label = "held-out perplexity") {
  report::chart c;
  c.title = title;
  c.x_label = "training wall seconds (evaluation excluded)";
  c.y_label = y_label;
  c.log_y = true;
  for (const auto& src : sources) {
    std::vector<std::pair<std::vector<double>, std::vector<double>>> curves;
    double end = 1e300;
    for (const auto& r : seed_reports(src.dir)) {
      const auto* m = method_of(r, src.method);
      if (!m || !m->contains("curve") || m->at("curve").size() < 2) continue;
      std::vector<double> xs, ys;
      for (const auto& p : m->at("curve")) {
        xs.push_back(p.at("seconds").get<double>());
        ys.push_back(p.at("ppl").get<double>());
      }
      end = std::min(end, xs.back());
      curves.emplace_back(std::move(xs), std::move(ys));
    }
    if (curves.empty() || !(end > 0)) continue;
    constexpr int points = 48;
    std::vector<std::vector<double>> grid;
    for (const auto& [xs, ys] : curves) {
      std::vector<double> g;
      for (int i = 0; i < points; ++i) g.push_back(detail::at(xs, ys, end * i / (points - 1)));
      grid.push_back(std::move(g));
    }
    std::vector<double> seconds;
    for (int i = 0; i < points; ++i) seconds.push_back(end * i / (points - 1));
    c.lines.push_back(detail::over_seeds(src.label, grid, std::move(seconds)));
  }
  return detail::write_if_any(c, png);
}

// The same for `methods` of one run directory, each labelled by its name.
inline bool plot_quality_vs_time(const fs::path& dir, const std::vector<std::string>& methods, const fs::path& png,
                                 const std::string& title, const std::string& y_label = "held-out perplexity") {
  std::vector<curve_source> sources;
  for (const auto& m : methods) sources.push_back({m, dir, m});
  return plot_quality_vs_time(sources, png, title, y_label);
}

// Memory over time in the first seed's runs: the tracker's compute bytes of every step record of each
// method's metrics.jsonl (a layer-wise run's also with its host feature cache added), against training
// seconds. False (and no file) when no method left such records.
inline bool plot_memory_over_time(const fs::path& dir, const std::vector<std::string>& methods, const fs::path& png,
                                  const std::string& title) {
  const fs::path seed = seed_dirs(dir).front();
  report::chart c;
  c.title = title;
  c.x_label = "training wall seconds";
  c.y_label = "MiB (memory tracker)";
  c.y_min = 0.0;
  for (const auto& name : methods) {
    std::ifstream in(seed / name / "metrics.jsonl");
    if (!in.good()) continue;
    report::series compute, total;
    compute.label = name;
    total.label = name + " + host cache";
    std::string line;
    bool layerwise = false;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      const auto r = nlohmann::json::parse(line, nullptr, false);
      if (r.is_discarded() || !r.contains("memory") || !r.contains("seconds")) continue;
      const auto& m = r.at("memory");
      if (!m.contains("compute")) continue;
      const double t = r.at("seconds").get<double>(), mib = 1.0 / (1 << 20);
      compute.x.push_back(t);
      compute.y.push_back(m.at("compute").get<double>() * mib);
      if (m.contains("cache")) {
        layerwise = true;
        total.x.push_back(t);
        total.y.push_back((m.at("compute").get<double>() + m.at("cache").get<double>()) * mib);
      }
    }
    if (compute.x.empty()) continue;
    c.lines.push_back(std::move(compute));
    if (layerwise) c.lines.push_back(std::move(total));
  }
  return detail::write_if_any(c, png);
}

// A compression setting of a sweep: its name (the run directory's), the fraction of every layer's heads
// and FFN channels pruned, and the fraction of the layers removed.
struct setting {
  std::string name;
  double ratio = 0, depth = 0;
};

// "ratio0.5,ratio0.7,depth0.5,ratio0.7+depth0.5": ratio<r> prunes a fraction r of every layer's heads and
// FFN channels, depth<d> removes a fraction d of the layers (block influence; below 0.9), and the two
// joined by '+' do both (the layers removed first, then the width of those kept).
inline std::vector<setting> parse_settings(const std::string& text) {
  std::vector<setting> out;
  for (const auto& name : split_list(text)) {
    setting s;
    s.name = name;
    bool seen_ratio = false, seen_depth = false;
    std::size_t from = 0;
    while (from <= name.size()) {
      const std::size_t plus = std::min(name.find('+', from), name.size());
      const std::string part = name.substr(from, plus - from);
      const bool ratio = part.rfind("ratio", 0) == 0, depth = part.rfind("depth", 0) == 0;
      check(ratio || depth, "paper_repro: setting '", name, "'", part == name ? "" : " has '" + part + "', which",
            " is neither ratio<fraction> nor depth<fraction> (or the two joined by '+')");
      bool& seen = ratio ? seen_ratio : seen_depth;
      check(!seen, "paper_repro: setting '", name, "' names ", ratio ? "ratio" : "depth", " twice");
      seen = true;
      (ratio ? s.ratio : s.depth) =
          parse_fraction(part.substr(5), ratio ? 0.95 : 0.9, "paper_repro: setting '" + name + "'");
      from = plus + 1;
    }
    out.push_back(s);
  }
  check(!out.empty(), "paper_repro: no settings in '", text, "'");
  return out;
}

// One setting of a sweep: the comparison run in <base>/<setting name>/ with the setting's ratio and depth
// (the other options as parsed), `body` its methods. Returns the run's exit code.
template <class Comparison, class Body>
int run_setting(Comparison& cmp, const std::string& base, const setting& s, Body&& body) {
  auto& o = cmp.defaults();
  o.ratio = s.ratio;
  o.depth = s.depth;
  o.out = (fs::path(base) / s.name).string();
  const int rc = cmp.run([&] {
    body();
    cmp.report()["setting"] = {{"name", s.name}, {"ratio", s.ratio}, {"depth", s.depth}};
  });
  o.out = base;
  return rc;
}

}  // namespace lwcl::studies::repro
