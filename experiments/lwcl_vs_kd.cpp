// lwcl_vs_kd: time to quality. The same Wanda-sp 50% student recovered by layer-wise curriculum
// learning (the default bundle) and by end-to-end logit KD, each under wall-clock budgets S/4, S/2, 3S/4
// and S. Reports each run's perplexity and wall seconds, the peak compute memory of LWCL over that of
// end-to-end KD, the smallest LWCL budget that reaches end-to-end KD's perplexity at S (and the ratio of
// the wall times), and both perplexities at equal budget S. Writes <out>/{config.json, report.json with
// a "summary", cumulative_error.png, perplexity_vs_seconds.png} and one run directory per run.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "common.hpp"
#include "lwcl/policies/pruning/wanda_sp.hpp"
#include "lwcl/report/plot.hpp"

using namespace lwcl;
using namespace lwcl::experiments;

namespace {

std::string seconds_name(const std::string& method, double s) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s_%gs", method.c_str(), s);
  return buf;
}

struct point {
  double budget = 0, wall = 0, ppl = 0, peak_compute = 0;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lwcl vs end-to-end KD: perplexity against wall-clock budget"};
  common_options opt;
  opt.budget = "90";
  opt.out = "runs/lwcl_vs_kd";
  bool e2e_final_only = false;
  add_common_options(app, opt, "S, the largest wall-clock budget: seconds (a plain number or seconds:N)");
  app.add_flag("--e2e-final-only", e2e_final_only, "run end-to-end KD at S only (one run instead of four)");
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  try {
    timer total;
    backend::cpu be;
    const distill::budget budget = budget_option(opt.budget);
    check(budget.unit == distill::budget_unit::seconds, "lwcl_vs_kd: the budget is ", budget.str(),
          "; time to quality needs wall-clock seconds (a plain number or seconds:N)");
    const double S = budget.amount;
    fs::create_directories(opt.out);

    // 1. The teacher and its Wanda-sp student.
    const auto val = validation_ids(opt.data);
    auto start = start_pruned(be, opt, policies::pruning::wanda_sp{}, val, "lwcl_vs_kd");
    std::vector<method_row> rows = start.rows;

    // 2. Both methods at each budget, alternating, so that a change in the machine's load over the run
    // falls on both.
    const auto st = make_study(be, opt, start, val);
    const auto bundle = make_policies(slot<key::pruning>(policies::pruning::wanda_sp{}));  // two_stage<>, uniform<1>
    std::vector<point> lw, kd;
    for (const double f : {0.25, 0.5, 0.75, 1.0}) {
      const double b = f * S;
      const auto po = recovery_options(opt, {distill::budget_unit::seconds, b});
      rows.push_back(run_pipeline(st, seconds_name("lwcl", b), bundle, start.pruned, po));
      rows.back().extra["budget_seconds"] = b;
      lw.push_back({b, rows.back().wall_seconds, rows.back().val_ppl, rows.back().peak_compute_bytes});
      if (e2e_final_only && f < 1.0) continue;
      distill::e2e_options eo;
      eo.lr = opt.lr;
      eo.min_lr = opt.lr / 10;
      eo.steps = 1000000;
      eo.time_budget_seconds = b;
      rows.push_back(run_e2e_kd(st, seconds_name("e2e_kd", b), start.pruned, eo));
      rows.back().extra["budget_seconds"] = b;
      kd.push_back({b, rows.back().wall_seconds, rows.back().val_ppl, rows.back().peak_compute_bytes});
    }

    // 3. The summary.
    auto peak = [](const std::vector<point>& v) {
      double m = 0;
      for (const auto& p : v) m = std::max(m, p.peak_compute);
      return m;
    };
    const point& kd_final = kd.back();
    const point& lw_final = lw.back();
    std::optional<point> reach;  // the smallest LWCL budget at or below end-to-end KD's final perplexity
    for (const auto& p : lw)
      if (p.ppl <= kd_final.ppl) {
        reach = p;
        break;
      }
    nlohmann::ordered_json runs = nlohmann::ordered_json::array();
    for (const auto& [method, pts] : {std::pair{"lwcl", &lw}, std::pair{"e2e_kd", &kd}})
      for (const auto& p : *pts)
        runs.push_back({{"method", method}, {"budget_seconds", p.budget}, {"val_ppl", p.ppl}, {"wall_seconds", p.wall}});
    nlohmann::ordered_json summary = {
        {"budget_seconds", S},
        {"runs", runs},
        {"peak_compute_bytes",
         {{"lwcl", static_cast<std::int64_t>(peak(lw))}, {"e2e_kd", static_cast<std::int64_t>(peak(kd))}}},
        {"peak_compute_ratio_lwcl_over_e2e", peak(lw) / peak(kd)},
        {"e2e_final", {{"budget_seconds", kd_final.budget}, {"val_ppl", kd_final.ppl}, {"wall_seconds", kd_final.wall}}},
        {"time_to_reach_e2e_final",
         reach ? nlohmann::ordered_json{{"reached", true},
                                        {"lwcl_budget_seconds", reach->budget},
                                        {"lwcl_val_ppl", reach->ppl},
                                        {"lwcl_wall_seconds", reach->wall},
                                        {"ratio_lwcl_over_e2e_wall", reach->wall / kd_final.wall}}
               : nlohmann::ordered_json{{"reached", false}}},
        {"equal_budget",
         {{"budget_seconds", S}, {"lwcl_val_ppl", lw_final.ppl}, {"e2e_val_ppl", kd_final.ppl},
          {"ppl_ratio_lwcl_over_e2e", lw_final.ppl / kd_final.ppl}}}};

    // 4. The tables, the chart and the report.
    print_table(rows, start.protocol);
    std::printf("\n%8s %14s %12s %14s %12s\n", "budget s", "lwcl ppl", "lwcl wall s", "e2e_kd ppl", "e2e wall s");
    for (const auto& p : lw) {
      const auto q = std::find_if(kd.begin(), kd.end(), [&](const point& k) { return k.budget == p.budget; });
      if (q == kd.end())
        std::printf("%8g %14.3f %12.1f %14s %12s\n", p.budget, p.ppl, p.wall, "-", "-");
      else
        std::printf("%8g %14.3f %12.1f %14.3f %12.1f\n", p.budget, p.ppl, p.wall, q->ppl, q->wall);
    }
    std::printf("peak compute: lwcl %s, e2e_kd %s (lwcl / e2e_kd = %.3f)\n", human_bytes(peak(lw)).c_str(),
                human_bytes(peak(kd)).c_str(), peak(lw) / peak(kd));
    if (reach)
      std::printf("time to reach e2e_kd's perplexity at %gs (%.3f): lwcl at %gs reaches %.3f in %.1f s, %.3f x e2e_kd's "
                  "%.1f s\n",
                  S, kd_final.ppl, reach->budget, reach->ppl, reach->wall, reach->wall / kd_final.wall, kd_final.wall);
    else
      std::printf("time to reach e2e_kd's perplexity at %gs (%.3f): no lwcl budget up to %gs reaches it\n", S, kd_final.ppl,
                  S);
    std::printf("equal budget %gs: lwcl %.3f, e2e_kd %.3f (ratio %.3f)\n", S, lw_final.ppl, kd_final.ppl,
                lw_final.ppl / kd_final.ppl);

    report::chart chart;
    chart.title = "validation perplexity vs wall seconds";
    chart.x_label = "wall seconds";
    chart.y_label = "validation perplexity";
    const double x_end = std::max(lw_final.wall, kd_final.wall);
    auto add = [&](const std::string& label, const std::vector<point>& pts, report::rgb color) {
      report::series line{label, {}, {}, color};
      for (const auto& p : pts) {
        line.x.push_back(p.wall);
        line.y.push_back(p.ppl);
        chart.lines.push_back({"", {p.wall}, {p.ppl}, color});  // a dot at each run
      }
      chart.lines.push_back(line);
    };
    add("lwcl (two_stage, uniform<1>)", lw, report::palette[0]);
    add("end-to-end KD", kd, report::palette[1]);
    chart.lines.push_back({"pruned", {0, x_end}, {start.rows[1].val_ppl, start.rows[1].val_ppl}, report::palette[6]});
    chart.lines.push_back({"teacher", {0, x_end}, {start.rows[0].val_ppl, start.rows[0].val_ppl}, report::palette[2]});
    report::write_png(chart, fs::path(opt.out) / "perplexity_vs_seconds.png");

    write_json(fs::path(opt.out) / "config.json",
               {{"program", "lwcl_vs_kd"}, {"teacher", start.teacher.dir.string()}, {"data", opt.data},
                {"criterion", "wanda_sp"}, {"ratio", opt.ratio}, {"budget_seconds", S}, {"batch", opt.batch},
                {"seq", opt.seq}, {"lr", opt.lr}, {"feature_batches", opt.feature_batches},
                {"calibration_batches", opt.calib_batches}, {"e2e_final_only", e2e_final_only},
                {"policies", describe(bundle)}, {"backend", std::string(backend::cpu::name)}});
    write_report(opt.out, rows,
                 {{"val_protocol", start.protocol}, {"teacher_parameters", start.teacher_parameters},
                  {"student_parameters", start.pruned.layout.numel()}, {"summary", summary},
                  {"wall_seconds_total", total.seconds()}});
    std::printf("lwcl_vs_kd: wrote %s/ (report.json, perplexity_vs_seconds.png, cumulative_error.png, one folder per "
                "run) in %.0f s\n",
                opt.out.c_str(), total.seconds());
    return 0;
  } catch (const lwcl::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
