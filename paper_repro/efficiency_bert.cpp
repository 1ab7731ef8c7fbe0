// efficiency_bert: the paper's efficiency table on BERT: the real all-MiniLM-L6-v2 sentence encoder
// (tools/install_deps.sh --minilm) with half of every layer's heads and FFN channels removed, and with
// 6 -> 3 layers, each recovered by LWCL, layer-wise training without curriculum, end-to-end
// distillation on the mean-pooled embedding and on the last hidden state, and not at all, under one
// budget over 3 seeds (experiments/minilm_compress's run, once per setting). Reports the cosine of the
// student's sentence embeddings with the teacher's and top-10 neighbour agreement over 1000 held-out
// sentences of both corpora (validation and test pools), peak memory from the tracker and the resident
// set, cost, and the cost to reach the embedding-objective end-to-end student's final distance.
// Writes <out>/<setting>/ (minilm_compress run directories) and in <out>/ table.md, table.csv,
// tables.json, quality_vs_time_<setting>.png and memory_over_time_<setting>.png.
//   efficiency_bert [--quick] [--settings ratio0.5,depth0.5] [--out DIR] [minilm_compress options]
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "minilm_study.hpp"
#include "studies/repro.hpp"
#include "studies/time_to_target.hpp"
#include "lwcl/core/program.hpp"

using namespace lwcl;
namespace pr = lwcl::studies::repro;
namespace fs = std::filesystem;

namespace {

const char* usage =
    "paper_repro efficiency_bert: all-MiniLM-L6-v2 at 50% width and 6 -> 3 layers, LWCL against end-to-end "
    "distillation over seeds\n"
    "  --quick             a run of about half a minute (small budgets, pools and batches, one seed)\n"
    "  --settings LIST     comma-separated ratio<r> / depth<d> (default ratio0.5,depth0.5)\n"
    "  --out DIR           run directory (default runs/efficiency_bert)\n"
    "  any other option goes to every setting's minilm_compress run (see minilm_compress --help); --ratio,\n"
    "  --depth and its --out are the settings'\n";

// One setting's minilm_compress run in `dir` with the options `pass`; a setting finished before with the
// same arguments is not run again (minilm_compress writes its report.json last; the arguments are
// recorded after it, so a killed setting runs again). Returns minilm_compress's exit code.
int run_once(const std::vector<std::string>& pass, const pr::setting& s, const fs::path& dir) {
  std::vector<std::string> args = {"minilm_compress"};
  args.insert(args.end(), pass.begin(), pass.end());
  args.insert(args.end(), {"--ratio", report::format("%g", s.ratio), "--depth", report::format("%g", s.depth), "--out",
                           dir.string()});
  std::string command;
  for (const auto& a : args) command += a + "\n";
  const fs::path command_file = dir / "run_command.txt";
  if (fs::exists(dir / "report.json") && fs::exists(command_file) && read_text(command_file) == command) {
    std::printf("efficiency_bert: %s finished before with the same arguments: not run again\n", dir.string().c_str());
  } else {
    std::vector<char*> av;
    for (auto& a : args) av.push_back(a.data());
    av.push_back(nullptr);
    if (const int rc = experiments::minilm_main(static_cast<int>(args.size()), av.data()); rc != 0) return rc;
    write_text_atomic(command_file, command);
  }
  return 0;
}

// A setting's table: every method's quality, and the cost of those that trained (their names into `trained`).
pr::table setting_table(const pr::json& rep, const pr::setting& s, std::vector<std::string>& trained) {
  pr::table t;
  t.label_headers = {"method"};
  t.columns = {{"cosine", "val cosine", pr::unit::cosine},
               {"test_cosine", "test cosine", pr::unit::cosine},
               {"min_cosine", "min cosine", pr::unit::cosine},
               {"top10_agreement", "val top-10", pr::unit::cosine},
               {"test_top10_agreement", "test top-10", pr::unit::cosine},
               {"peak_compute_bytes", "peak training MiB", pr::unit::mib},
               {"run_peak_compute_bytes", "run peak MiB", pr::unit::mib},
               {"run_peak_total_bytes", "run + cache MiB", pr::unit::mib, "run_peak_compute_bytes"},
               {"peak_resident_bytes", "peak RSS MiB", pr::unit::mib},
               {"wall_seconds", "wall s", pr::unit::seconds},
               {"cpu_seconds", "CPU s", pr::unit::seconds},
               {"train_flops", "GFLOPs", pr::unit::gflops},
               {"time_to_target_ratio", "wall x e2e to target", pr::unit::ratio},
               {"flops_to_target_ratio", "FLOPs x e2e to target", pr::unit::ratio},
               {"reached_target", "reached", pr::unit::reached}};
  for (const int q : studies::gain_levels())  // wall time to a share of the embedding baseline's gain
    t.columns.push_back({studies::time_to_level_key(q), report::format("wall x e2e to %d%% of its gain", q), pr::unit::ratio});
  std::string shape;
  if (const auto* p = pr::method_of(rep, "pruned")) {
    const auto layers = pr::figure(*p, "layers"), removed = pr::figure(*p, "removed_fraction");
    if (layers && removed)
      shape = report::format("; student %.0f layers, %.1f%% of all parameters removed", layers->mean, 100 * removed->mean);
  }
  t.title = report::format("%s: ratio %g, depth %g%s", s.name.c_str(), s.ratio, s.depth, shape.c_str());
  for (const auto& m : rep.at("methods")) {
    const std::string name = m.at("name").get<std::string>();
    if (name != "teacher" && name != "pruned") trained.push_back(name);
    pr::json row = m;
    if (name == "teacher" || name == "pruned") {  // quality only: no training
      row = {{"name", name}};
      for (const char* k : {"cosine", "test_cosine", "min_cosine", "top10_agreement", "test_top10_agreement"})
        if (m.contains(k)) row[k] = m.at(k);
    }
    t.add({name == "pruned" ? "pruned (no recovery)" : name}, row);
  }
  return t;
}

// The notes under a setting's table: each layer-wise method's test cosine and peak (LWCL's; lwcl_kd's,
// LWCL closed by end-to-end distillation, where it ran) against each end-to-end student's, and how
// often it reached e2e_embedding's final distance.
void add_notes(const pr::json& rep, const pr::setting& s, std::vector<std::string>& notes) {
  for (const char* lw_name : {"lwcl", "lwcl_kd"}) {
    const auto* lw = pr::method_of(rep, lw_name);
    if (!lw) continue;
    const char* who = std::string_view(lw_name) == "lwcl" ? "LWCL" : "LWCL closed end to end (lwcl_kd)";
    for (const char* kd_name : {"e2e_embedding", "e2e_hidden"}) {
      const auto* kd = pr::method_of(rep, kd_name);
      if (!kd) continue;
      const auto c = pr::figure(*lw, "test_cosine"), kc = pr::figure(*kd, "test_cosine");
      const auto p = pr::figure(*lw, "peak_compute_bytes"), kp = pr::figure(*kd, "peak_compute_bytes");
      if (c && kc && p && kp && kp->mean > 0)
        notes.push_back(report::format("- %s: %s's test cosine %.4f against %s's %.4f, at %.2f x its training peak.",
                                       s.name.c_str(), who, c->mean, kd_name, kc->mean, p->mean / kp->mean));
    }
    const auto reached = pr::figure(*lw, "reached_target"), time = pr::figure(*lw, "time_to_target_ratio");
    if (reached)
      notes.push_back(report::format("- %s: %s reaches e2e_embedding's final distance in %d of %d seeds%s.",
                                     s.name.c_str(), who, static_cast<int>(std::lround(reached->mean * reached->n)),
                                     reached->n, time ? report::format(", at %.2f x its wall time", time->mean).c_str() : ""));
  }
}

}  // namespace

int main(int argc, char** argv) {
  return lwcl::guard_main([&] {
    bool quick = false;
    std::string settings = "ratio0.5,depth0.5", base = "runs/efficiency_bert";
    std::vector<std::string> pass;  // the options every setting's run gets
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      const auto value = [&] {
        check(i + 1 < argc, "efficiency_bert: ", a, " needs a value");
        return std::string(argv[++i]);
      };
      if (a == "--help" || a == "-h") {
        std::printf("%s", usage);
        return 0;
      }
      if (a == "--quick") quick = true;
      else if (a == "--settings") settings = value();
      else if (a == "--out") base = value();
      else if (a == "--ratio" || a == "--depth") fail("efficiency_bert: ", a, " comes from --settings");
      else pass.push_back(a);
    }
    // Defaults, unless given: the paper's table in full, or a minute's run.
    const auto given = [&](const std::string& opt) {
      for (const auto& p : pass)
        if (p == opt) return true;
      return false;
    };
    const std::vector<std::pair<std::string, std::string>> defaults =
        quick ? std::vector<std::pair<std::string, std::string>>{{"--budget", "steps:12"},  {"--seeds", "1"},
                                                                 {"--curve-points", "2"},  {"--pool", "24"},
                                                                 {"--curve-pool", "8"},    {"--batch", "4"},
                                                                 {"--seq", "16"},          {"--feature-batches", "2"},
                                                                 {"--calib-batches", "1"}}
              : std::vector<std::pair<std::string, std::string>>{{"--budget", "40"}, {"--seeds", "3"}, {"--curve-points", "6"},
                                                                 {"--pool", "1000"}};
    for (const auto& [opt, v] : defaults)
      if (!given(opt)) pass.insert(pass.end(), {opt, v});
    if (!given("--test-split")) pass.push_back("--test-split");

    const auto list = pr::parse_settings(settings);
    pr::sweep_progress progress("efficiency_bert", std::vector<double>(list.size(), 1.0));
    std::vector<pr::table> tables;
    std::vector<std::string> notes;
    pr::json sources = pr::json::array();
    for (std::size_t i = 0; i < list.size(); ++i) {
      const auto& s = list[i];
      progress.begin(i, s.name);
      const fs::path dir = fs::path(base) / s.name;
      if (const int rc = run_once(pass, s, dir); rc != 0) return rc;
      const pr::json rep = pr::read_json(dir / "report.json");
      sources.push_back((dir / "report.json").string());
      std::vector<std::string> trained;
      pr::table t = setting_table(rep, s, trained);
      add_notes(rep, s, notes);
      pr::plot_quality_vs_time(dir, trained, fs::path(base) / ("quality_vs_time_" + s.name + ".png"),
                               "embedding distance, all-MiniLM-L6-v2 " + s.name, "1 - mean cosine with the teacher");
      check(pr::plot_memory_over_time(dir, trained, fs::path(base) / ("memory_over_time_" + s.name + ".png"),
                                      "memory while training, all-MiniLM-L6-v2 " + s.name),
            "efficiency_bert: no step records with memory in ", dir.string());
      tables.push_back(std::move(t));
    }
    std::string passed;
    for (const auto& p : pass) passed += " " + p;
    notes.push_back("(mean +- sample sd over the seeds; every setting ran minilm_compress with" + passed + ")");
    const pr::json extra = {{"machine", pr::machine()}, {"options", pass}, {"sources", sources},
                            {"wall_seconds", progress.seconds()}};
    std::printf("machine: %s\n", pr::machine().c_str());
    pr::write_tables(base, "Efficiency, BERT (all-MiniLM-L6-v2)", tables, notes, extra);
    return 0;
  });
}
