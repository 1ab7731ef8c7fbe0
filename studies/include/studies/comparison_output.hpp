#pragma once
// Part of the comparison harness (studies/comparison.hpp, which includes this file last; include that):
// what a run leaves: config.json (every option's value), resuming a finished seed, the plots the
// program asked for and the quality curves, finish() (the tables, report.json, table.md, which methods
// gave bitwise the same student), and the summary over seeds.

#include "studies/comparison.hpp"

namespace lwcl::studies {

template <class Backend, policies::pruning_criterion Criterion>
nlohmann::ordered_json comparison<Backend, Criterion>::config_json() const {
  nlohmann::ordered_json c = {{"program", program_},
                              {"backend", std::string(Backend::name)},
                              {"criterion", criterion_name()},
                              {"teacher_model", (std::filesystem::path(opt_.teacher) / "model").string()}};  // what start() loads
  for (const CLI::Option* o : app_.get_options()) {
    if (o->get_lnames().empty() || o->get_lnames().front() == "help") continue;
    const std::string key = comparison_detail::option_key(*o);
    if (o->get_expected_min() == 0) {  // a flag
      c[key] = o->count() > 0;
      continue;
    }
    std::vector<std::string> values = o->results();
    const bool list = o->get_expected_max() > 1;
    if (values.empty() && !o->get_default_str().empty())
      values = list ? comparison_detail::default_values(o->get_default_str())
                    : std::vector<std::string>{o->get_default_str()};
    if (list) {
      auto a = nlohmann::ordered_json::array();
      for (const auto& v : values) a.push_back(comparison_detail::option_value(v));
      c[key] = a;
    } else {
      c[key] = values.empty() ? nlohmann::ordered_json() : comparison_detail::option_value(values.back());
    }
  }
  c["budget"] = total_;
  // What the run used where a program set it after parsing (a sweep over settings in one process).
  c["ratio"] = opt_.ratio;
  c["depth"] = opt_.depth;
  return c;
}

template <class Backend, policies::pruning_criterion Criterion>
bool comparison<Backend, Criterion>::resume_finished_seed() {
  namespace fs = std::filesystem;
  const fs::path dir(opt_.out), report_path = dir / "report.json", config_path = dir / "config.json";
  if (!fs::exists(report_path) || !fs::exists(config_path)) return false;
  nlohmann::ordered_json done, rep;
  try {
    done = nlohmann::ordered_json::parse(read_text(config_path.string()));
    rep = nlohmann::ordered_json::parse(read_text(report_path.string()));
  } catch (const nlohmann::json::exception&) {
    return false;  // not lwcl's (files are written whole): run the seed again, which rewrites them
  }
  // An option this build has and the seed's build did not counts as the same where this run leaves it
  // at its default: an option is added with a default that keeps what the program did before it.
  auto now = config_json();
  for (const CLI::Option* o : app_.get_options()) {
    if (o->get_lnames().empty()) continue;
    const std::string key = comparison_detail::option_key(*o);
    if (o->get_group() == sweep_group) {  // which cells run, not what this one does
      now.erase(key);
      done.erase(key);
      continue;
    }
    if (o->count() == 0 && !done.contains(key)) now.erase(key);
  }
  if (done != now || !rep.contains("methods") || !rep.at("methods").is_array() || rep.at("methods").empty())
    return false;
  if (opt_.seeds > 1) {
    std::vector<method_row> rows;
    for (const auto& m : rep.at("methods")) rows.push_back(method_row::from_json(m));
    per_seed_.emplace_back(opt_.seed, std::move(rows));
    if (seed_columns_.empty() && rep.contains("table_columns"))
      seed_columns_ = rep.at("table_columns").template get<std::vector<std::string>>();
    if (rep.contains("val_protocol")) protocol_ = rep.at("val_protocol").template get<std::string>();
  }
  std::printf("%s: %s finished before with the same configuration (config.json, report.json): not run again\n",
              program_.c_str(), dir.string().c_str());
  return true;
}

template <class Backend, policies::pruning_criterion Criterion>
void comparison<Backend, Criterion>::write_plot(const comparison_detail::plot_request& p,
                                               const std::vector<method_row>& rows) const {
  report::chart chart;
  chart.title = p.title;
  chart.x_label = table_detail::header(p.x_key);
  chart.y_label = table_detail::header(p.y_key);
  std::vector<std::string> groups;
  std::map<std::string, report::series> lines;
  double x_hi = 0;
  for (const auto& row : rows) {
    const nlohmann::ordered_json j = row.to_json();
    if (!j.contains(p.x_key) || !j.contains(p.y_key) || !j.contains(p.group_key)) continue;
    const auto g = j.at(p.group_key).get<std::string>();
    if (!lines.count(g)) groups.push_back(g);
    auto& s = lines[g];
    s.label = g;
    s.x.push_back(j.at(p.x_key).get<double>());
    s.y.push_back(j.at(p.y_key).get<double>());
    x_hi = std::max(x_hi, s.x.back());
  }
  for (std::size_t i = 0; i < groups.size(); ++i) {
    auto s = lines.at(groups[i]);
    s.color = report::palette[i % report::palette.size()];
    for (std::size_t k = 0; k < s.x.size(); ++k) chart.lines.push_back({.label = "", .x = {s.x[k]}, .y = {s.y[k]}, .color = s.color, .lo = {}, .hi = {}});  // dots
    chart.lines.push_back(s);
  }
  for (std::size_t i = 0; i < 2 && i < rows_.size(); ++i) {  // teacher, pruned
    const nlohmann::ordered_json j = rows_[i].to_json();
    if (j.contains(p.y_key) && j.at(p.y_key).is_number())
      chart.lines.push_back({.label = rows_[i].name, .x = {0, x_hi},
                             .y = {j.at(p.y_key).get<double>(), j.at(p.y_key).get<double>()},
                             .color = report::palette[i == 0 ? 2 : 6], .lo = {}, .hi = {}});
  }
  report::write_png(chart, std::filesystem::path(opt_.out) / p.file);
}

template <class Backend, policies::pruning_criterion Criterion>
bool comparison<Backend, Criterion>::write_curves(const std::vector<method_row>& rows) const {
  bool any = false;
  for (const auto& [x_key, file, x_label] :
       {std::tuple<const char*, const char*, const char*>{"seconds", "quality_vs_seconds.png", "training wall seconds (evaluation excluded)"},
        {"flops", "quality_vs_flops.png", "model FLOPs"}}) {
    report::chart chart;
    chart.title = "held-out perplexity while training (" + curve_.protocol() + ")";
    chart.x_label = x_label;
    chart.y_label = "perplexity";
    std::size_t k = 0;
    double x_hi = 0;
    for (const auto& r : rows) {
      if (!r.details.contains("curve")) continue;
      report::series line;
      line.label = r.name;
      line.color = report::palette[k++ % report::palette.size()];
      for (const auto& q : r.details.at("curve")) {
        line.x.push_back(q.at(x_key).template get<double>());
        line.y.push_back(q.at("ppl").template get<double>());
        x_hi = std::max(x_hi, line.x.back());
      }
      chart.lines.push_back(line);
    }
    if (chart.lines.empty()) return false;
    if (!rows.empty() && rows.front().details.contains("curve_ppl")) {
      const double y = rows.front().details.at("curve_ppl").template get<double>();
      chart.lines.push_back({.label = "teacher", .x = {0, x_hi}, .y = {y, y}, .color = report::palette[2], .lo = {}, .hi = {}});
    }
    report::write_png(chart, std::filesystem::path(opt_.out) / file);
    any = true;
  }
  return any;
}

template <class Backend, policies::pruning_criterion Criterion>
void comparison<Backend, Criterion>::finish(double seconds_so_far) {
  namespace fs = std::filesystem;
  const auto rows = this->rows();
  std::printf("\nteacher %lld parameters, student %lld (%s as f32)\n", static_cast<long long>(teacher_parameters_),
              static_cast<long long>(pruned_.layout.numel()),
              report::human_bytes(static_cast<double>(pruned_.layout.numel()) * 4).c_str());
  print_table(rows, protocol_);
  if (opt_.test_split) {
    std::printf("\ntest perplexity: %s\n", test_.protocol().c_str());
    for (const auto& r : rows)
      if (r.details.contains("test_ppl")) std::printf("  %-26s %10.3f\n", r.name.c_str(), r.details.at("test_ppl").template get<double>());
  }
  print_details(rows, columns_);
  const std::string mc_md = mc_table(rows);
  if (!mc_md.empty()) std::printf("\n%s", mc_md.c_str());
  for (const auto& n : notes_) std::printf("%s\n", n.c_str());
  const auto identical = identical_students();
  for (const auto& g : identical) {
    std::string s;
    for (const auto& n : g) s += (s.empty() ? "" : ", ") + n;
    std::printf("bitwise the same student: %s\n", s.c_str());
  }
  const fs::path out(opt_.out);
  write_text_atomic(out / "config.json", config_json().dump(2) + "\n");
  nlohmann::ordered_json rep = {{"program", program_},
                                {"val_protocol", protocol_},
                                {"teacher_parameters", teacher_parameters_},
                                {"student_parameters", pruned_.layout.numel()}};
  if (opt_.test_split) rep["test_protocol"] = test_.protocol();
  for (const auto& [k, v] : report_.items()) rep[k] = v;
  rep["malloc_mmap_threshold"] = mmap_threshold_;  // 0: the allocator's own, dynamic threshold
  rep["identical_students"] = identical;
  rep["table_columns"] = columns_;  // read back when a later run resumes over this seed
  rep["wall_seconds_total"] = seconds_so_far;
  nlohmann::ordered_json methods = nlohmann::ordered_json::array();
  std::vector<std::pair<std::string, std::vector<double>>> curves;
  for (const auto& r : rows) {
    methods.push_back(r.to_json());
    if (!r.cumulative_error.empty()) curves.emplace_back(r.name, r.cumulative_error);
  }
  rep["methods"] = methods;
  write_text_atomic(out / "report.json", rep.dump(2) + "\n");
  std::string md = markdown(rows, protocol_, columns_);
  if (opt_.test_split) {
    md += "\ntest perplexity: " + test_.protocol() + "\n\n| method | test ppl |\n|---|---:|\n";
    for (const auto& r : rows)
      if (r.details.contains("test_ppl")) md += report::format("| %s | %.3f |\n", r.name.c_str(), r.details.at("test_ppl").template get<double>());
  }
  md += mc_md.empty() ? "" : "\n" + mc_md;
  write_text_atomic(out / "table.md", md);
  std::string files = "config.json, report.json, table.md";
  if (!curves.empty()) {
    plot_cumulative_error(curves, out / "cumulative_error.png");
    files += ", cumulative_error.png";
  }
  for (const auto& p : plots_) {
    write_plot(p, rows);
    files += ", " + p.file;
  }
  if (write_curves(rows)) files += ", quality_vs_seconds.png, quality_vs_flops.png";
  std::printf("%s: wrote %s/ (%s, one folder per method) in %.0f s\n", program_.c_str(), opt_.out.c_str(),
              files.c_str(), seconds_so_far);
}

template <class Backend, policies::pruning_criterion Criterion>
void comparison<Backend, Criterion>::keep_seed() {
  per_seed_.emplace_back(opt_.seed, rows());
  if (seed_columns_.empty()) seed_columns_ = columns_;
  recoveries_.clear();
  report_ = nlohmann::ordered_json::object();
  columns_.clear();
  notes_.clear();
  plots_.clear();
}

template <class Backend, policies::pruning_criterion Criterion>
void comparison<Backend, Criterion>::summarise_seeds(double seconds_so_far) {
  const nlohmann::ordered_json methods = summarise_methods(per_seed_);
  const int seeds = static_cast<int>(per_seed_.size());
  print_seeds(methods, seeds, protocol_);
  std::vector<std::string> seed_names;
  for (const auto& [seed, rows] : per_seed_) seed_names.push_back("seed_" + std::to_string(seed));
  const std::filesystem::path out(opt_.out);
  write_text_atomic(out / "config.json", config_json().dump(2) + "\n");
  nlohmann::ordered_json rep = {{"program", program_},     {"val_protocol", protocol_}, {"seeds", seed_names},
                                {"methods", methods},      {"wall_seconds_total", seconds_so_far}};
  write_text_atomic(out / "report.json", rep.dump(2) + "\n");
  write_text_atomic(out / "table.md", seeds_markdown(methods, seeds, protocol_, seed_columns_));
  std::printf("%s: wrote %s/ (config.json, report.json, table.md over the seeds; one folder per seed) in %.0f s\n",
              program_.c_str(), opt_.out.c_str(), seconds_so_far);
}

}  // namespace lwcl::studies
