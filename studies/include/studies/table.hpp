#pragma once
// The rows of a comparison and how they are shown: the main table (perplexity, peak compute and cache
// bytes, wall seconds, tokens, last-layer error), a table of the columns a program names from its rows'
// details, and both as Markdown for results a person can paste.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/report/format.hpp"

namespace lwcl::studies {

// One row of a comparison table. `details` holds whatever else is known of the run (its policies, steps,
// stall, ...): all of it goes into report.json, and the columns a program names into its second table.
struct method_row {
  std::string name;
  double val_ppl = 0;
  // Memory, from the tracker: compute while training (LWCL: the largest segment visit, or its final KD
  // stage; end-to-end KD: teacher and student resident), compute over the whole run (LWCL: the teacher
  // pass included), the cache; and the process's peak resident set (0: not measured).
  double peak_compute_bytes = 0, run_peak_compute_bytes = 0, peak_cache_bytes = 0, peak_resident_bytes = 0;
  double wall_seconds = 0;
  long tokens = 0;
  std::vector<double> cumulative_error;  // empty for the teacher
  nlohmann::ordered_json details = nlohmann::ordered_json::object();

  nlohmann::ordered_json to_json() const {
    nlohmann::ordered_json j = {{"name", name},
                                {"val_ppl", val_ppl},
                                {"peak_compute_bytes", static_cast<std::int64_t>(peak_compute_bytes)},
                                {"run_peak_compute_bytes", static_cast<std::int64_t>(run_peak_compute_bytes)},
                                {"peak_cache_bytes", static_cast<std::int64_t>(peak_cache_bytes)},
                                {"peak_resident_bytes", static_cast<std::int64_t>(peak_resident_bytes)},
                                {"wall_seconds", wall_seconds},
                                {"tokens", tokens},
                                {"cumulative_error", cumulative_error}};
    for (const auto& [k, v] : details.items()) j[k] = v;
    return j;
  }

  // The row to_json wrote (report.json's "methods"): the fixed fields back in place, every other key a
  // detail, so a finished seed read back summarises exactly as when it ran.
  static method_row from_json(const nlohmann::ordered_json& j) {
    method_row r;
    for (const auto& [k, v] : j.items()) {
      if (k == "name") r.name = v.get<std::string>();
      else if (k == "val_ppl") r.val_ppl = v.get<double>();
      else if (k == "peak_compute_bytes") r.peak_compute_bytes = v.get<double>();
      else if (k == "run_peak_compute_bytes") r.run_peak_compute_bytes = v.get<double>();
      else if (k == "peak_cache_bytes") r.peak_cache_bytes = v.get<double>();
      else if (k == "peak_resident_bytes") r.peak_resident_bytes = v.get<double>();
      else if (k == "wall_seconds") r.wall_seconds = v.get<double>();
      else if (k == "tokens") r.tokens = v.get<long>();
      else if (k == "cumulative_error") r.cumulative_error = v.get<std::vector<double>>();
      else r.details[k] = v;
    }
    return r;
  }
};

namespace table_detail {

// A cell: strings as they are, integers whole, bytes (a key ending in _bytes) as KiB/MiB, other numbers
// to 4 significant digits; "-" where the row has no such entry. A key not in the row is looked up in its
// "policies" (so "curriculum" names the row's curriculum).
inline std::string cell(const nlohmann::ordered_json& row, const std::string& key) {
  const nlohmann::ordered_json* v = nullptr;
  if (row.contains(key)) v = &row.at(key);
  else if (row.contains("policies") && row.at("policies").contains(key)) v = &row.at("policies").at(key);
  if (!v || v->is_null()) return "-";
  if (v->is_string()) return v->get<std::string>();
  if (v->is_boolean()) return v->get<bool>() ? "yes" : "no";
  const bool bytes = key.size() > 6 && key.compare(key.size() - 6, 6, "_bytes") == 0;
  if (bytes && v->is_number()) return report::human_bytes(v->get<double>());
  if (v->is_number_integer() || v->is_number_unsigned()) return std::to_string(v->get<long long>());
  if (v->is_number()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.4g", v->get<double>());
    return buf;
  }
  return v->dump();
}

inline std::string header(std::string key) {
  std::replace(key.begin(), key.end(), '_', ' ');
  return key;
}

}  // namespace table_detail

// The main table's header and a row's cells, shared by the terminal and Markdown forms.
inline const std::vector<std::string>& main_header() {
  static const std::vector<std::string> h = {"method",     "val ppl",  "KL",     "top-1",  "recovered", "peak compute",
                                             "run peak",   "peak cache", "peak RSS", "wall s", "tokens", "err (last)"};
  return h;
}
inline std::vector<std::string> main_cells(const method_row& r) {
  char ppl[32], wall[32], err[32] = "-";
  std::snprintf(ppl, sizeof ppl, "%.3f", r.val_ppl);
  std::snprintf(wall, sizeof wall, "%.1f", r.wall_seconds);
  if (!r.cumulative_error.empty()) std::snprintf(err, sizeof err, "%.4f", r.cumulative_error.back());
  auto detail = [&](const char* key, const char* fmt) {
    return r.details.contains(key) && r.details.at(key).is_number() ? report::format(fmt, r.details.at(key).get<double>())
                                                                     : std::string("-");
  };
  return {r.name, ppl, detail("kl_teacher", "%.4f"), detail("top1_agreement", "%.3f"), detail("recovered_share", "%.3f"),
          report::human_bytes(r.peak_compute_bytes), report::human_bytes(r.run_peak_compute_bytes),
          report::human_bytes(r.peak_cache_bytes), report::human_bytes(r.peak_resident_bytes), wall,
          std::to_string(r.tokens), err};
}
inline constexpr const char* main_note =
    "(KL: mean KL(teacher || student) of the next-token distributions on the validation sample, nats a token; "
    "top-1: the share of its positions where student and teacher predict the same next token; recovered: the share "
    "of the pruning loss won back, (ppl pruned - ppl) / (ppl pruned - ppl teacher); peak compute: tracker bytes "
    "resident while training (weights, gradients, AdamW moments, activations; for end-to-end KD also the frozen "
    "teacher); run peak: the same over the whole run, LWCL's teacher pass included; peak cache: the feature store "
    "and staging ring; peak RSS: the process's peak resident set during the method; err (last): relative error of "
    "the last layer's hidden state against the teacher's)";

inline void print_table(const std::vector<method_row>& rows, const std::string& protocol) {
  std::printf("\nvalidation perplexity: %s\n", protocol.c_str());
  static const int width[] = {26, 9, 8, 6, 9, 12, 11, 11, 11, 8, 9, 10};
  auto line = [](const std::vector<std::string>& c) {
    std::printf("%-26s", c[0].c_str());
    for (std::size_t k = 1; k < c.size(); ++k) std::printf(" %*s", width[k], c[k].c_str());
    std::printf("\n");
  };
  line(main_header());
  for (const auto& r : rows) line(main_cells(r));
  std::printf("%s\n", main_note);
}

// A column "key" or "key=label" (label: its header; default the key with spaces for underscores).
inline std::pair<std::string, std::string> column_key_label(const std::string& column) {
  const auto eq = column.find('=');
  if (eq == std::string::npos) return {column, table_detail::header(column)};
  return {column.substr(0, eq), column.substr(eq + 1)};
}

// The cells of `columns` for every row with details (the methods, not the teacher or the pruned
// student), the row's name first; the header line first.
inline std::vector<std::vector<std::string>> detail_cells(const std::vector<method_row>& rows,
                                                          const std::vector<std::string>& columns) {
  std::vector<std::vector<std::string>> cells;
  std::vector<std::string> head = {"method"};
  for (const auto& c : columns) head.push_back(column_key_label(c).second);
  cells.push_back(head);
  for (const auto& r : rows) {
    if (r.details.empty()) continue;
    const auto j = r.to_json();
    std::vector<std::string> line = {r.name};
    for (const auto& c : columns) line.push_back(table_detail::cell(j, column_key_label(c).first));
    cells.push_back(line);
  }
  return cells;
}

// The detail table, columns as wide as their widest cell; a column of numbers is aligned right.
inline void print_details(const std::vector<method_row>& rows, const std::vector<std::string>& columns) {
  if (columns.empty()) return;
  const auto cells = detail_cells(rows, columns);
  const std::size_t n = cells.front().size();
  std::vector<std::size_t> width(n, 0);
  std::vector<bool> numeric(n, true);
  for (std::size_t k = 0; k < cells.size(); ++k)
    for (std::size_t i = 0; i < n; ++i) {
      const auto& c = cells[k][i];
      width[i] = std::max(width[i], c.size());
      if (k > 0 && c != "-" && c.find_first_not_of("0123456789.-+e KiBM") != std::string::npos) numeric[i] = false;
    }
  numeric[0] = false;
  std::printf("\n");
  for (const auto& line : cells) {
    std::string s;
    for (std::size_t i = 0; i < n; ++i) {
      const std::string pad(width[i] - line[i].size(), ' ');
      s += numeric[i] ? pad + line[i] : line[i] + pad;
      if (i + 1 < n) s += "  ";
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    std::printf("%s\n", s.c_str());
  }
}

// Both tables as Markdown: the main one (with the protocol above it) and, when `columns` is not empty,
// the details.
inline std::string markdown(const std::vector<method_row>& rows, const std::string& protocol,
                            const std::vector<std::string>& columns) {
  std::string md = "validation perplexity: " + protocol + "\n\n";
  auto row_md = [](const std::vector<std::string>& c) {
    std::string out = "|";
    for (const auto& x : c) out += " " + x + " |";
    return out + "\n";
  };
  md += row_md(main_header());
  md += "|---|";
  for (std::size_t k = 1; k < main_header().size(); ++k) md += "---:|";
  md += "\n";
  for (const auto& r : rows) md += row_md(main_cells(r));
  md += std::string("\n") + main_note + "\n";
  if (columns.empty()) return md;
  const auto cells = detail_cells(rows, columns);
  md += "\n";
  for (std::size_t k = 0; k < cells.size(); ++k) {
    md += "|";
    for (const auto& c : cells[k]) md += " " + c + " |";
    md += "\n";
    if (k == 0) {
      md += "|";
      for (std::size_t i = 0; i < cells[k].size(); ++i) md += i == 0 ? "---|" : "---:|";
      md += "\n";
    }
  }
  return md;
}

}  // namespace lwcl::studies
