#pragma once
// A comparison over seeds: every method's figures summarised as mean and sample standard deviation over the
// seeds that ran it (report::summarise), and the tables of that summary (Markdown for table.md, and lines
// for the terminal). comparison::run calls these after the last seed; the JSON is report.json's "methods".

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/report/format.hpp"
#include "lwcl/report/stats.hpp"
#include "studies/table.hpp"

namespace lwcl::studies {

// Each seed's rows, in the order the seeds ran.
using seed_rows = std::vector<std::pair<std::uint64_t, std::vector<method_row>>>;

// {"mean", "sd", "values"} of one figure over the seeds.
inline nlohmann::ordered_json seed_figure(const std::vector<double>& values) {
  const report::summary s = report::summarise(values);
  return {{"mean", s.mean}, {"sd", s.sd}, {"values", values}};
}

// Every method of the first seed that every seed ran, in the first seed's order: its name, the seed count,
// and a seed_figure for each main figure (val_ppl, the peaks, wall seconds, tokens, err_last: the
// cumulative error at the last layer) and for each numeric detail that every seed's row has.
inline nlohmann::ordered_json summarise_methods(const seed_rows& per_seed) {
  using field = std::pair<const char*, double (*)(const method_row&)>;
  static const field fields[] = {
      {"val_ppl", [](const method_row& r) { return r.val_ppl; }},
      {"peak_compute_bytes", [](const method_row& r) { return r.peak_compute_bytes; }},
      {"run_peak_compute_bytes", [](const method_row& r) { return r.run_peak_compute_bytes; }},
      {"peak_cache_bytes", [](const method_row& r) { return r.peak_cache_bytes; }},
      {"peak_resident_bytes", [](const method_row& r) { return r.peak_resident_bytes; }},
      {"wall_seconds", [](const method_row& r) { return r.wall_seconds; }},
      {"tokens", [](const method_row& r) { return static_cast<double>(r.tokens); }},
      {"err_last", [](const method_row& r) { return r.cumulative_error.empty() ? 0.0 : r.cumulative_error.back(); }}};
  nlohmann::ordered_json methods = nlohmann::ordered_json::array();
  if (per_seed.empty()) return methods;
  for (const auto& first : per_seed.front().second) {
    std::vector<const method_row*> rows;
    for (const auto& [seed, seed_rows] : per_seed)
      for (const auto& r : seed_rows)
        if (r.name == first.name) rows.push_back(&r);
    if (rows.size() != per_seed.size()) continue;  // a method not run under every seed
    std::map<std::string, std::vector<double>> values;  // sorted by key, as report.json has them
    for (const auto& [key, get] : fields)
      for (const auto* r : rows) values[key].push_back(get(*r));
    for (const auto& [k, v] : first.details.items()) {
      if (!v.is_number()) continue;
      std::vector<double> vals;
      for (const auto* r : rows)
        if (r->details.contains(k) && r->details.at(k).is_number()) vals.push_back(r->details.at(k).template get<double>());
      if (vals.size() == rows.size()) values[k] = std::move(vals);
    }
    nlohmann::ordered_json m = {{"name", first.name}, {"seeds", rows.size()}};
    for (const auto& [k, v] : values) m[k] = seed_figure(v);
    methods.push_back(m);
  }
  return methods;
}

namespace seeds_detail {

// "mean +- sd" of figure `k` of a summarised method: bytes in KiB/MiB/GiB; "-" where the mean is 0.
inline std::string mean_sd(const nlohmann::ordered_json& m, const std::string& k, bool bytes) {
  const double mean = m.at(k).at("mean").get<double>(), sd = m.at(k).at("sd").get<double>();
  if (mean == 0) return "-";
  if (bytes) return report::human_bytes(mean) + " +- " + (sd > 0 ? report::human_bytes(sd) : std::string("0"));
  if (k == "kl_teacher" || k == "top1_agreement" || k == "recovered_share") return report::format("%.4f +- %.4f", mean, sd);
  return report::format(k == "val_ppl" || k == "err_last" ? "%.3f +- %.3f" : "%.1f +- %.1f", mean, sd);
}

}  // namespace seeds_detail

// table.md over the seeds: the main figures of every summarised method, then the cost (FLOPs, processor
// seconds) and `columns` (the program's own detail columns), mean +- sd where every seed has the figure.
inline std::string seeds_markdown(const nlohmann::ordered_json& methods, int seeds, const std::string& protocol,
                                  const std::vector<std::string>& columns) {
  using seeds_detail::mean_sd;
  std::string md = report::format("%d seeds (each its own calibration sample and data order): mean +- sample standard "
                                  "deviation; validation perplexity: %s\n\n",
                                  seeds, protocol.c_str());
  md += "| method | val ppl | KL | top-1 | recovered | peak compute | run peak | peak cache | peak RSS | wall s | err (last) |\n";
  md += "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  const auto opt_sd = [&](const nlohmann::ordered_json& m, const char* k) { return m.contains(k) ? mean_sd(m, k, false) : "-"; };
  for (const auto& m : methods)
    md += "| " + m.at("name").get<std::string>() + " | " + mean_sd(m, "val_ppl", false) + " | " + opt_sd(m, "kl_teacher") +
          " | " + opt_sd(m, "top1_agreement") + " | " + opt_sd(m, "recovered_share") + " | " +
          mean_sd(m, "peak_compute_bytes", true) + " | " + mean_sd(m, "run_peak_compute_bytes", true) + " | " +
          mean_sd(m, "peak_cache_bytes", true) + " | " + mean_sd(m, "peak_resident_bytes", true) + " | " +
          mean_sd(m, "wall_seconds", false) + " | " + mean_sd(m, "err_last", false) + " |\n";
  std::vector<std::string> cols = {"train_flops", "cpu_seconds"};
  for (const auto& c : columns)
    if (std::find(cols.begin(), cols.end(), c) == cols.end()) cols.push_back(c);
  md += "\n| method |";
  std::string rule = "|---|";
  for (const auto& c : cols) {
    md += " " + table_detail::header(c) + " |";
    rule += "---:|";
  }
  md += "\n" + rule + "\n";
  for (const auto& m : methods) {
    md += "| " + m.at("name").get<std::string>() + " |";
    for (const auto& c : cols) {
      if (!m.contains(c)) {
        md += " - |";
        continue;
      }
      const double mean = m.at(c).at("mean").get<double>(), sd = m.at(c).at("sd").get<double>();
      md += std::abs(mean) >= 1e5 ? report::format(" %.3g +- %.2g |", mean, sd) : report::format(" %.3f +- %.3f |", mean, sd);
    }
    md += "\n";
  }
  return md;
}

// The summary on the terminal: validation perplexity, peak compute, peak RSS and wall seconds of each method.
inline void print_seeds(const nlohmann::ordered_json& methods, int seeds, const std::string& protocol) {
  using seeds_detail::mean_sd;
  std::printf("\n%d seeds: mean +- sd (validation perplexity: %s)\n", seeds, protocol.c_str());
  std::printf("%-26s %20s %24s %24s %12s\n", "method", "val ppl", "peak compute", "peak RSS", "wall s");
  for (const auto& m : methods)
    std::printf("%-26s %20s %24s %24s %12s\n", m.at("name").get<std::string>().c_str(), mean_sd(m, "val_ppl", false).c_str(),
                mean_sd(m, "peak_compute_bytes", true).c_str(), mean_sd(m, "peak_resident_bytes", true).c_str(),
                mean_sd(m, "wall_seconds", false).c_str());
}

}  // namespace lwcl::studies
