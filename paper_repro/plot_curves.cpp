// plot_curves: one quality-against-time chart from the curves of several runs, for sweeps whose methods
// sit in separate run directories (tools/tune.sh writes one per setting). Each source is
// LABEL=DIR:METHOD, the curves of METHOD in every seed of the run directory DIR (a run made with
// --curve-points), drawn as LABEL: the mean over the seeds with a band of one sd, as the paper tables'
// own quality_vs_time figures are drawn (studies::plot_quality_vs_time).
//   plot_curves --out FILE.png --title TEXT [--y-label TEXT] LABEL=DIR:METHOD...
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/core/program.hpp"
#include "lwcl/report/stats.hpp"
#include "studies/repro.hpp"

namespace {

namespace fs = std::filesystem;
namespace pr = lwcl::studies::repro;
using lwcl::check;

// LABEL=DIR:METHOD, checked: the directory has seed reports and some seed's METHOD has a curve.
pr::curve_source parse_source(const std::string& text) {
  const auto eq = text.find('='), colon = text.rfind(':');
  check(eq != std::string::npos && eq > 0 && colon != std::string::npos && colon > eq + 1 && colon + 1 < text.size(),
        "plot_curves: '", text, "' is not LABEL=DIR:METHOD");
  pr::curve_source s{text.substr(0, eq), fs::path(text.substr(eq + 1, colon - eq - 1)), text.substr(colon + 1)};
  check(fs::is_directory(s.dir), "plot_curves: ", s.dir.string(), " (of '", s.label, "') is not a directory");
  check(fs::exists(pr::seed_dirs(s.dir).front() / "report.json"), "plot_curves: ", s.dir.string(),
        " holds no report.json (expected a finished run, or seed_N/report.json of its seeds)");
  bool named = false, curve = false;
  for (const auto& r : pr::seed_reports(s.dir))
    if (const auto* m = pr::method_of(r, s.method)) {
      named = true;
      curve = curve || (m->contains("curve") && m->at("curve").size() >= 2);
    }
  check(named, "plot_curves: the run in ", s.dir.string(), " has no method '", s.method, "'");
  check(curve, "plot_curves: '", s.method, "' in ", s.dir.string(), " has no curve (run it with --curve-points)");
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"plot_curves: quality against training seconds of several runs' curves, mean and sd over their seeds"};
  std::string out, title, y_label = "held-out perplexity";
  std::vector<std::string> texts;
  app.add_option("--out", out, "the PNG written")->required();
  app.add_option("--title", title, "the chart's title")->required();
  app.add_option("--y-label", y_label, "the quality's name (an encoder's curves hold 1 - mean cosine)");
  app.add_option("sources", texts, "LABEL=DIR:METHOD: METHOD's curves in the run directory DIR, drawn as LABEL")->required();
  CLI11_PARSE(app, argc, argv);
  return lwcl::guard_main([&] {
    std::vector<pr::curve_source> sources;
    for (const auto& t : texts) sources.push_back(parse_source(t));
    check(pr::plot_quality_vs_time(sources, out, title, y_label), "plot_curves: no source had a curve to draw");
    for (const auto& s : sources) {
      std::vector<double> last;
      for (const auto& r : pr::seed_reports(s.dir))
        if (const auto* m = pr::method_of(r, s.method); m && m->contains("curve") && !m->at("curve").empty())
          last.push_back(m->at("curve").back().at("ppl").get<double>());
      const auto sum = lwcl::report::summarise(last);
      std::printf("%-28s %zu seeds, last point %.5g +- %.2g\n", s.label.c_str(), last.size(), sum.mean, sum.sd);
    }
    std::printf("plot_curves: wrote %s\n", out.c_str());
    return 0;
  });
}
