// budget_scaling: LWCL against end-to-end KD as the budget grows. One pruned student (each --settings
// entry: Wanda-sp on a fraction of every layer's heads and FFN channels, block influence on a fraction of
// the layers, or both joined by '+') is recovered by LWCL (the default bundle) and by end-to-end KD (at
// its tuned settings) under --scales multiples of one base budget (--budget), each budget a run of its own
// over 3 seeds, not a point read off one long run: LWCL plans its visits, and end-to-end KD its cosine, for
// the budget it is given. Reports per setting, budget and method the test and validation perplexity, KL to the teacher,
// top-1 agreement, the share of the pruning loss recovered, the training peak, wall seconds and optimiser
// steps; notes LWCL's gap to end-to-end KD at each budget against the seeds' spread, and how much each
// doubling still gained end-to-end KD (where its curve flattens). Writes <out>/<setting>/x<scale>/ (each a
// comparison run directory with seed_*/ inside), and in <out>/ table.md, table.csv, tables.json and per
// setting quality_vs_budget_<setting>.png (mean +- sd bands over the seeds). --lwcl-kd-share S adds
// lwcl_kd: LWCL whose curriculum closes with end-to-end KD on a share S of its budget (at --kd-lr with
// --kd-hidden-mse, end-to-end KD's own rate and loss by default, in --kd-micro-batches micro-batches),
// the recipe for a budget long enough that matching boundary features stops paying. --lwcl-segment-layers 2,4 adds lwcl_seg2, lwcl_seg4: LWCL (the default
// curriculum) on segments of that many layers, whose visits cost more a step and see more of the
// cumulative error, the other recipe for a long budget.
//   budget_scaling [--quick] [--settings ratio0.5] [--scales 1,2,4,8] [--budget 20] [--lwcl-kd-share S]
//                  [--lwcl-segment-layers 2,4] [comparison options]
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "host_instances.hpp"
#include "studies/efficiency.hpp"
#include "lwcl/core/program.hpp"
#include "lwcl/policies/segmentation/uniform.hpp"
#include "lwcl/report/plot.hpp"

using namespace lwcl;
namespace pr = lwcl::studies::repro;
namespace fs = std::filesystem;

namespace {

// The budget `base` times `scale`, in the form --budget takes (unit:amount).
std::string scaled_budget(const std::string& base, double scale) {
  const auto b = studies::budget_option(base);
  return std::string(distill::budget_unit_name(b.unit)) + ":" + report::format("%g", b.amount * scale);
}

pr::table scaling_table(const std::string& title) {
  pr::table t;
  t.title = title;
  t.label_headers = {"budget", "method"};
  t.columns = {{"test_ppl", "test ppl", pr::unit::ppl},
               {"val_ppl", "val ppl", pr::unit::ppl},
               {"kl_teacher", "KL to teacher", pr::unit::cosine},
               {"top1_agreement", "top-1", pr::unit::ratio},
               {"recovered_share", "recovered", pr::unit::ratio},
               {"peak_compute_bytes", "training peak MiB", pr::unit::mib},
               {"wall_seconds", "wall s", pr::unit::seconds},
               {"steps", "steps", pr::unit::count, "segment_steps"},
               {"kd_steps", "closing KD steps", pr::unit::count}};
  return t;
}

// One method's line of a setting's figure: its test perplexity (mean, with a band of +- sd) at each budget.
report::series quality_line(const std::string& label, const std::vector<double>& budgets,
                            const std::vector<std::optional<pr::stat>>& test) {
  report::series s;
  s.label = label;
  for (std::size_t i = 0; i < budgets.size(); ++i) {
    if (!test[i]) continue;
    s.x.push_back(budgets[i]);
    s.y.push_back(test[i]->mean);
    s.lo.push_back(test[i]->mean - test[i]->sd);
    s.hi.push_back(test[i]->mean + test[i]->sd);
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = pr::quick_requested(argc, argv);
  experiments::comparison cmp("budget_scaling", "paper_repro budget_scaling: LWCL against end-to-end KD at 1x, 2x, 4x "
                              "and 8x a base budget, each budget its own runs over seeds", quick ? "steps:8" : "20",
                              "the base budget, scaled by --scales: seconds (a plain number), steps:N or tokens:N");
  pr::efficiency_defaults(cmp.defaults(), "runs/teacher_deep_gpt2", quick);
  cmp.defaults().curve_points = quick ? 2 : 6;
  pr::efficiency_knobs k;
  bool quick_flag = false;
  std::string settings = "ratio0.5";
  std::vector<double> scale_list = quick ? std::vector<double>{1, 2} : std::vector<double>{1, 2, 4, 8};
  cmp.cli().add_flag("--quick", quick_flag, "a run of about a minute: step budgets, 2 seeds, short samples");
  pr::add_settings_option(cmp.cli(), settings);
  cmp.sweep_option(cmp.cli().add_option("--scales", scale_list, "multiples of --budget, comma-separated, each a run of its own"))
      ->delimiter(',')->check(studies::positive);
  pr::add_efficiency_knobs(cmp.cli(), k);
  std::vector<long> segment_layers;
  cmp.cli().add_option("--lwcl-segment-layers", segment_layers, "also LWCL on segments of this many layers (lwcl_seg<N>), "
                       "comma-separated sizes above 1")->delimiter(',')->check(CLI::Range(2L, 64L));
  if (const int rc = cmp.parse(argc, argv); rc >= 0) return rc;

  return lwcl::guard_main([&] {
    std::vector<std::string> methods = {"lwcl", "e2e_kd"};
    if (k.lwcl_kd_share > 0) methods.insert(methods.begin() + 1, "lwcl_kd");
    for (const long n : segment_layers) methods.insert(methods.end() - 1, "lwcl_seg" + std::to_string(n));
    // LWCL on segments of n layers, labelled uniform<n> in its config.json (the same segments).
    const auto lwcl_segments = [&] {
      for (const long n : segment_layers) {
        auto po = cmp.recovery_options();
        po.policy_labels["segmentation"] = "uniform<" + std::to_string(n) + ">";
        cmp.recover("lwcl_seg" + std::to_string(n), po, slot<key::cache>(policies::cache::host{}),
                    slot<key::segmentation>(policies::segmentation::sized{.layers = n}));
      }
    };
    const auto list = pr::parse_settings(settings);
    check(!scale_list.empty(), "budget_scaling: --scales needs at least one multiple");
    const std::string base = cmp.opt().out, base_budget = cmp.opt().budget;
    const auto unit = studies::budget_option(base_budget);
    const std::string x_label = std::string(distill::budget_unit_name(unit.unit));
    pr::sweep_progress progress("budget_scaling", std::vector<double>(list.size() * scale_list.size(), 1.0));
    std::vector<pr::table> tables;
    std::vector<std::string> notes;
    pr::json sources = pr::json::array();
    std::size_t cell = 0;
    for (const auto& s : list) {
      pr::table t = scaling_table(report::format("%s: ratio %g, depth %g; %d seeds a budget", s.name.c_str(), s.ratio,
                                                 s.depth, cmp.opt().seeds));
      std::vector<double> budgets;
      std::map<std::string, std::vector<std::optional<pr::stat>>> test;
      for (const double scale : scale_list) {
        const std::string budget = scaled_budget(base_budget, scale);
        const pr::setting at{s.name + "/x" + report::format("%g", scale), s.ratio, s.depth};
        progress.begin(cell++, at.name + " (" + budget + ")");
        cmp.defaults().budget = budget;
        const int rc = pr::run_setting(cmp, base, at, [&] {
          pr::lwcl_and_e2e_kd(cmp, k);
          lwcl_segments();
        });
        cmp.defaults().budget = base_budget;
        if (rc != 0) return rc;
        const fs::path dir = fs::path(base) / at.name;
        const pr::json rep = pr::read_json(dir / "report.json");
        sources.push_back((dir / "report.json").string());
        budgets.push_back(unit.amount * scale);
        for (const auto& name : methods) {
          const auto* m = pr::method_of(rep, name);
          test[name].push_back(m ? pr::figure(*m, "test_ppl") : std::nullopt);
          if (m) t.add({budget, name}, *m);
        }
        // Each layer-wise method's gap to end-to-end KD at this budget, against the seeds' spread.
        const auto& kd = test["e2e_kd"].back();
        for (const auto& name : methods) {
          if (name == "e2e_kd") continue;
          const auto& lw = test[name].back();
          const std::string seg_prefix = "lwcl_seg";
          const std::string label = name == "lwcl"      ? "LWCL"
                                    : name == "lwcl_kd" ? "LWCL + closing KD"
                                                        : "LWCL on " + name.substr(seg_prefix.size()) + "-layer segments";
          if (lw && kd)
            notes.push_back(report::format("- %s at %s: test perplexity %s %.3f +- %.3f, end-to-end KD %.3f +- %.3f: %s "
                                           "%s by %.3f (%s the larger sd)", s.name.c_str(), budget.c_str(), label.c_str(), lw->mean,
                                           lw->sd, kd->mean, kd->sd, label.c_str(), lw->mean <= kd->mean ? "ahead" : "behind",
                                           std::abs(lw->mean - kd->mean),
                                           std::abs(lw->mean - kd->mean) > std::max(lw->sd, kd->sd) ? "more than" : "within"));
        }
      }
      // Where end-to-end KD's curve flattens: what each step up the budgets still gained it.
      const auto& kd = test["e2e_kd"];
      for (std::size_t i = 1; i < kd.size(); ++i)
        if (kd[i] && kd[i - 1])
          notes.push_back(report::format("- %s, end-to-end KD from %g to %g %s: test perplexity %.3f -> %.3f (%+.2f%%)",
                                         s.name.c_str(), budgets[i - 1], budgets[i], x_label.c_str(), kd[i - 1]->mean,
                                         kd[i]->mean, 100 * (kd[i]->mean / kd[i - 1]->mean - 1)));
      report::chart c;
      c.title = "test perplexity by budget, " + s.name + " (mean +- sd over seeds)";
      c.x_label = "budget (" + x_label + ")";
      c.y_label = "test perplexity";
      for (const auto& name : methods) c.lines.push_back(quality_line(name, budgets, test[name]));
      report::write_png(c, fs::path(base) / ("quality_vs_budget_" + s.name + ".png"));
      tables.push_back(std::move(t));
    }
    notes.push_back("(mean +- sample sd over the seeds; every budget its own runs; memory from the tracker)");
    const pr::json extra = {{"machine", pr::machine()}, {"base_budget", base_budget}, {"scales", scale_list},
                            {"seeds", cmp.opt().seeds}, {"sources", sources}, {"wall_seconds", progress.seconds()}};
    std::printf("machine: %s\n", pr::machine().c_str());
    pr::write_tables(base, "Budget scaling: LWCL against end-to-end KD (teacher " + cmp.opt().teacher + ")", tables,
                     notes, extra);
    return 0;
  });
}
