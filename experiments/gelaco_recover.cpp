// gelaco_recover: the students of an experiments/gelaco run (the best collapse the search found at each
// removed count, and ShortGPT and LaCo at the same depths) recovered two ways under the same wall-clock
// budget: by LWCL through each student's layer map (every student layer learns to stand for the teacher
// span it absorbed) and by end-to-end KD, over --seeds seeds. Prints and writes, before and after
// recovery, each student's held-out perplexity (validation, and the test split) and each recovery's peak
// memory from the tracker:
//   <out>/<student>/               one comparison run directory per student (seed_<s>/ for each seed)
//   <out>/table.md, table.csv, tables.json, perplexity.png (test perplexity, or validation with --no-test-split)
//   gelaco_recover --search runs/gelaco_llama [--students gelaco_remove2,shortgpt_remove2] [--budget 30]
//                  [--seeds 3] [--out runs/gelaco_llama/recovery]
// The teacher is the run directory the search's students were collapsed from (their summary.json);
// --teacher, when given, must be that one.
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "host_instances.hpp"
#include "studies/efficiency.hpp"
#include "lwcl/core/program.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/model/layer_map.hpp"
#include "lwcl/report/plot.hpp"

using namespace lwcl;
namespace pr = lwcl::studies::repro;
namespace fs = std::filesystem;

namespace {

// A student of the search's run: its folder, summary.json's fields this program reads.
struct searched_student {
  std::string name, method;
  fs::path model_dir, teacher_dir;
  std::vector<index_t> boundaries;
  double quality = 0;
  long layers_removed = 0;
};

searched_student read_student(const fs::path& search, const std::string& name) {
  searched_student s;
  s.name = name;
  const fs::path dir = search / "students" / name;
  const fs::path summary = dir / "summary.json";
  check(fs::exists(summary), "gelaco_recover: student '", name, "' has no ", summary.string(),
        " (experiments/gelaco writes students/<name>/{model, summary.json})");
  const auto j = pr::read_json(summary);
  for (const char* key : {"model", "method", "boundaries", "quality", "layers_removed"})
    check(j.contains(key), "gelaco_recover: ", summary.string(), " has no '", key, "'");
  check(j.at("model").is_string() && j.at("method").is_string() && j.at("boundaries").is_array() &&
            j.at("quality").is_number() && j.at("layers_removed").is_number_integer(),
        "gelaco_recover: ", summary.string(), ": 'model' and 'method' must be strings, 'boundaries' an array, "
        "'quality' a number and 'layers_removed' an integer");
  s.method = j.at("method").get<std::string>();
  s.model_dir = dir / "model";
  s.teacher_dir = fs::path(j.at("model").get<std::string>());
  for (const auto& b : j.at("boundaries")) {
    check(b.is_number_integer(), "gelaco_recover: ", summary.string(), ": 'boundaries' holds a value that is not an integer");
    s.boundaries.push_back(b.get<index_t>());
  }
  s.quality = j.at("quality").get<double>();
  s.layers_removed = j.at("layers_removed").get<long>();
  check(fs::exists(s.model_dir / "config.json"), "gelaco_recover: student '", name, "' has no checkpoint in ",
        s.model_dir.string());
  return s;
}

// The search's students in the order front.json lists them, the knee left out (it repeats a removed count's
// best or stands alone at another depth without baselines beside it).
std::vector<std::string> listed_students(const fs::path& search) {
  const fs::path front = search / "front.json";
  check(fs::exists(front), "gelaco_recover: --search '", search.string(), "' has no front.json (run experiments/gelaco first)");
  const auto j = pr::read_json(front);
  check(j.contains("students") && j.at("students").is_array(), "gelaco_recover: ", front.string(), " has no 'students' list");
  std::vector<std::string> names;
  for (const auto& s : j.at("students")) {
    check(s.is_object() && s.contains("name") && s.at("name").is_string(), "gelaco_recover: ", front.string(),
          ": a student without a name");
    const auto n = s.at("name").get<std::string>();
    if (n != "gelaco_knee") names.push_back(n);
  }
  check(!names.empty(), "gelaco_recover: ", front.string(), " lists no students");
  return names;
}

std::string method_label(const std::string& m) {
  if (m == "gelaco") return "GeLaCo";
  if (m == "shortgpt") return "ShortGPT";
  if (m == "laco") return "LaCo";
  return m;
}

// Test (or validation) perplexity against layers removed: each method's students before recovery (dots), after LWCL and
// after end-to-end KD, the mean over the seeds with a band of one sd.
void plot_perplexity(const std::vector<searched_student>& students, const std::vector<pr::json>& reports,
                     const std::string& key, const std::string& title, const fs::path& png) {
  const std::map<std::string, report::rgb> hue = {{"gelaco", {31, 119, 180}}, {"shortgpt", {214, 39, 40}},
                                                  {"laco", {44, 160, 44}}};
  report::chart c;
  c.title = title;
  c.x_label = "teacher layers removed";
  c.x_integer = true;
  c.y_label = key == "test_ppl" ? "test perplexity" : "validation perplexity";
  c.log_y = true;
  for (const auto& [method, color] : hue)
    for (const auto& [row, stage] : {std::pair{"pruned", "no recovery"}, std::pair{"lwcl", "LWCL"}, std::pair{"e2e_kd", "e2e KD"}}) {
      report::series s;
      s.label = method_label(method) + ", " + stage;
      s.color = color;
      s.points = std::string(row) == "pruned";
      for (std::size_t i = 0; i < students.size(); ++i) {
        if (students[i].method != method) continue;
        const auto* m = pr::method_of(reports[i], row);
        const auto f = m ? pr::figure(*m, key) : std::nullopt;
        if (!f) continue;
        s.x.push_back(static_cast<double>(students[i].layers_removed));
        s.y.push_back(f->mean);
        s.lo.push_back(f->mean - f->sd);
        s.hi.push_back(f->mean + f->sd);
      }
      if (s.x.empty()) continue;
      if (s.points || s.x.size() < 2) s.lo.clear(), s.hi.clear();
      if (std::string(row) == "e2e_kd") s.color = report::rgb{static_cast<std::uint8_t>(color.r / 2),
                                                              static_cast<std::uint8_t>(color.g / 2),
                                                              static_cast<std::uint8_t>(color.b / 2)};
      c.lines.push_back(std::move(s));
    }
  if (!c.lines.empty()) report::write_png(c, png);
}

// The teacher run directory every student was collapsed from (the harness reads <dir>/model).
fs::path teacher_run_of(const std::vector<searched_student>& students) {
  const fs::path teacher_model = students.front().teacher_dir;
  for (const auto& s : students)
    check(fs::exists(s.teacher_dir) && fs::equivalent(s.teacher_dir, teacher_model), "gelaco_recover: student '", s.name,
          "' was collapsed from ", s.teacher_dir.string(), ", '", students.front().name, "' from ", teacher_model.string(),
          ": one run recovers the students of one teacher");
  check(teacher_model.filename() == "model" && fs::exists(teacher_model / "config.json"), "gelaco_recover: the students' "
        "teacher ", teacher_model.string(), " is not the model/ folder of a teacher run directory (train_teacher --out DIR "
        "writes DIR/model)");
  return teacher_model.parent_path();
}

// Each student's perplexity before recovery, after LWCL (and with_kd, after LWCL closing with end-to-end
// KD: lwcl_kd) and after end-to-end KD, with the peaks and times.
pr::table recovery_table(const std::string& of, const std::vector<searched_student>& students,
                         const std::vector<pr::json>& reports, bool with_kd) {
  std::vector<pr::method_columns> methods = {{"pruned", "pruned_", "no recovery"}, {"lwcl", "lwcl_", "LWCL"}};
  if (with_kd) methods.push_back({"lwcl_kd", "lwcl_kd_", "LWCL+KD"});
  methods.push_back({"e2e_kd", "e2e_", "e2e KD"});
  pr::table t;
  t.title = "students of " + of + ": held-out perplexity before and after recovery under equal training time";
  t.label_headers = {"removed", "student", "method", "search quality"};
  for (const auto& [key, split] : {std::pair{"val_ppl", "val"}, std::pair{"test_ppl", "test"}})
    for (const auto& [name, prefix, label] : methods)
      t.columns.push_back({prefix + std::string(key), label + " " + split, pr::unit::ppl});
  pr::add_peak_columns(t, methods);
  for (const auto& [name, prefix, label] : methods)
    if (name != "pruned") t.columns.push_back({prefix + "wall_seconds", label + " s", pr::unit::seconds});
  for (std::size_t i = 0; i < students.size(); ++i) {
    const auto& st = students[i];
    pr::json row = pr::json::object();
    for (const auto& [from, prefix, label] : methods) {
      const auto* m = pr::method_of(reports[i], from);
      if (!m) continue;
      for (const char* key : {"val_ppl", "test_ppl", "peak_compute_bytes", "run_peak_total_bytes", "wall_seconds"})
        if (m->contains(key)) row[prefix + key] = m->at(key);
    }
    t.add({std::to_string(st.layers_removed), st.name, method_label(st.method), report::format("%.4f", st.quality)}, row);
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  experiments::comparison cmp("gelaco_recover", "lwcl gelaco_recover: the students of an experiments/gelaco run "
                              "(its best collapses, ShortGPT, LaCo) recovered by LWCL through their layer maps and by "
                              "end-to-end KD under the same budget, before and after", "30",
                              "budget of each recovery: seconds (a plain number), steps:N or tokens:N");
  auto& d = cmp.defaults();
  d.lr = 4e-3;  // the layer-wise rate paper_repro's tables chose on validation
  d.seeds = 3;
  d.test_split = true;
  d.eval_tokens = 16384;
  d.teacher.clear();
  std::string search, students_opt;
  bool no_test_split = false;
  pr::efficiency_knobs k;
  cmp.cli().add_option("--search", search, "run directory of experiments/gelaco (front.json, students/)")->required();
  cmp.cli().add_option("--students", students_opt, "students of the search to recover, comma-separated (default: every "
                       "student front.json lists but the knee)");
  cmp.cli().add_flag("--no-test-split", no_test_split, "score validation only (data without test documents)");
  pr::add_efficiency_knobs(cmp.cli(), k);
  if (const int rc = cmp.parse(argc, argv); rc >= 0) return rc;
  if (no_test_split) d.test_split = false;

  return lwcl::guard_main([&] {
    const fs::path search_dir(search);
    const auto names = students_opt.empty() ? listed_students(search_dir) : pr::split_list(students_opt);
    check(!names.empty(), "gelaco_recover: --students names no student");
    std::vector<searched_student> students;
    for (const auto& n : names) students.push_back(read_student(search_dir, n));
    const fs::path teacher_run = teacher_run_of(students);
    const fs::path teacher_model = teacher_run / "model";
    if (cmp.opt().teacher.empty()) d.teacher = teacher_run.string();
    check(fs::exists(fs::path(cmp.opt().teacher) / "model") && fs::equivalent(fs::path(cmp.opt().teacher) / "model", teacher_model),
          "gelaco_recover: --teacher ", cmp.opt().teacher, " is not the teacher the students were collapsed from (",
          teacher_run.string(), ")");
    if (cmp.cli().get_option("--out")->count() == 0) d.out = (search_dir / "recovery").string();
    const std::string base = cmp.opt().out;

    pr::sweep_progress progress("gelaco_recover", std::vector<double>(students.size(), 1.0));
    std::vector<pr::json> reports;
    pr::json sources = pr::json::array();
    for (std::size_t i = 0; i < students.size(); ++i) {
      const auto& st = students[i];
      progress.begin(i, st.name);
      // The "pruning" is the search's: the student is read back, its layer map given as the first teacher
      // layer of each student layer's span (a collapsed span [b, e] stands at b, a dropped layer's span
      // starts at the layer kept before it).
      cmp.prune_with(st.method, [&st](const experiments::comparison::net_t& teacher, const data::batch_loader&, index_t,
                                      std::vector<index_t>& kept) {
        auto net = checkpoint::load_hf(teacher.backend(), st.model_dir.string());
        model::check_boundary_map(st.boundaries, net->config().n_layers(), teacher.config().n_layers(),
                                  "gelaco_recover: " + st.name);
        kept.assign(st.boundaries.begin(), st.boundaries.end() - 1);
        return net;
      });
      const pr::setting s{st.name, 0, 0};
      const int rc = pr::run_setting(cmp, base, s, [&] {
        pr::lwcl_and_e2e_kd(cmp, k);
        cmp.report()["search_student"] = {{"name", st.name}, {"method", st.method}, {"quality", st.quality},
                                          {"layers_removed", st.layers_removed}, {"boundaries", st.boundaries},
                                          {"folder", st.model_dir.string()}};
      });
      if (rc != 0) return rc;
      const fs::path report = fs::path(base) / st.name / "report.json";
      reports.push_back(pr::read_json(report));
      sources.push_back(report.string());
    }

    const pr::table t = recovery_table(search + " (teacher " + cmp.opt().teacher + ")", students, reports, k.lwcl_kd_share > 0);
    std::vector<std::string> notes = {report::format(
        "(budget %s for each recovery; %d seed%s, mean +- sd; LWCL: the default two-stage bundle through each student's "
        "layer map, learning rate %g; e2e KD: logit KL + %g x last-hidden MSE, learning rate %g; perplexity on %d "
        "predicted tokens over every validation document%s; peak MiB from the memory tracker)",
        cmp.opt().budget.c_str(), cmp.opt().seeds, cmp.opt().seeds == 1 ? "" : "s", cmp.opt().lr, k.e2e_hidden_mse,
        k.e2e_lr, cmp.opt().eval_tokens, cmp.opt().test_split ? ", and as many over every test document" : "")};
    if (const auto* m = pr::method_of(reports.front(), "teacher"))
      if (const auto v = pr::figure(*m, "val_ppl"), te = pr::figure(*m, "test_ppl"); v && te)
        notes.push_back(report::format("teacher: val %.3f, test %.3f", v->mean, te->mean));
    const pr::json extra = {{"machine", pr::machine()}, {"search", search}, {"teacher", cmp.opt().teacher},
                            {"budget", cmp.opt().budget}, {"seeds", cmp.opt().seeds}, {"sources", sources},
                            {"wall_seconds", progress.seconds()}};
    std::printf("machine: %s\n", pr::machine().c_str());
    pr::write_tables(base, "GeLaCo, ShortGPT and LaCo students before and after recovery", {t}, notes, extra,
                     "gelaco_recover");
    const bool test = cmp.opt().test_split;
    plot_perplexity(students, reports, test ? "test_ppl" : "val_ppl",
                    std::string(test ? "test" : "validation") + " perplexity before and after recovery (" + search + ")",
                    fs::path(base) / "perplexity.png");
    std::printf("gelaco_recover: wrote %s/perplexity.png\n", base.c_str());
    return 0;
  });
}
