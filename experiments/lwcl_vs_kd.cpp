// lwcl_vs_kd: time to quality. The same Wanda-sp 50% student recovered by layer-wise curriculum
// learning (the default bundle) and by end-to-end logit KD, each under wall-clock budgets S/4, S/2, 3S/4
// and S, alternating so that a change in the machine's load over the run falls on both. Reports each
// run's perplexity and wall seconds, the peak compute memory of LWCL over that of end-to-end KD, the
// smallest LWCL budget that reaches end-to-end KD's perplexity at S (and the ratio of the wall times),
// and both perplexities at equal budget S. Writes <out>/{config.json, report.json with a "summary",
// table.md, cumulative_error.png, perplexity_vs_seconds.png} and one run directory per run.
#include <algorithm>
#include <string>
#include <vector>

#include "host_instances.hpp"

using namespace lwcl;

int main(int argc, char** argv) {
  experiments::comparison cmp("lwcl_vs_kd", "lwcl vs end-to-end KD: perplexity against wall-clock budget",
                              "90", "S, the largest wall-clock budget: seconds (a plain number or seconds:N)");
  bool e2e_final_only = false;
  cmp.cli().add_flag("--e2e-final-only", e2e_final_only, "run end-to-end KD at S only (one run instead of four)");
  if (const int rc = cmp.parse(argc, argv); rc >= 0) return rc;

  return cmp.run([&] {
    check(cmp.total().unit == distill::budget_unit::seconds, "lwcl_vs_kd: the budget is ", cmp.total().str(),
          "; time to quality needs wall-clock seconds (a plain number or seconds:N)");
    const double S = cmp.total().amount;
    std::vector<const distill::compare::method_row*> lw, kd;
    for (const double f : {0.25, 0.5, 0.75, 1.0}) {
      const distill::budget b{distill::budget_unit::seconds, f * S};
      lw.push_back(&cmp.recover(report::format("lwcl_%gs", b.amount), cmp.recovery_options(b)).row);
      if (e2e_final_only && f < 1.0) continue;
      kd.push_back(&cmp.e2e_kd(report::format("e2e_kd_%gs", b.amount), b).row);
    }
    auto peak = [](const auto& v) {
      double m = 0;
      for (const auto* r : v) m = std::max(m, r->peak_compute_bytes);
      return m;
    };
    const auto& kd_S = *kd.back();
    const auto& lw_S = *lw.back();
    const auto reach = std::find_if(lw.begin(), lw.end(), [&](const auto* r) { return r->val_ppl <= kd_S.val_ppl; });
    nlohmann::ordered_json summary = {{"budget_seconds", S},
                                      {"peak_compute_bytes", {{"lwcl", peak(lw)}, {"e2e_kd", peak(kd)}}},
                                      {"peak_compute_ratio_lwcl_over_e2e", peak(lw) / peak(kd)},
                                      {"e2e_final", {{"val_ppl", kd_S.val_ppl}, {"wall_seconds", kd_S.wall_seconds}}},
                                      {"time_to_reach_e2e_final", {{"reached", reach != lw.end()}}},
                                      {"equal_budget", {{"lwcl_val_ppl", lw_S.val_ppl}, {"e2e_val_ppl", kd_S.val_ppl},
                                                        {"ppl_ratio_lwcl_over_e2e", lw_S.val_ppl / kd_S.val_ppl}}}};
    using report::format;
    cmp.note(format("peak compute: lwcl %s, e2e_kd %s (lwcl / e2e_kd = %.3f)", report::human_bytes(peak(lw)).c_str(),
                    report::human_bytes(peak(kd)).c_str(), peak(lw) / peak(kd)));
    if (reach != lw.end()) {
      const auto& r = **reach;
      summary["time_to_reach_e2e_final"] = {{"reached", true}, {"lwcl_run", r.name}, {"lwcl_val_ppl", r.val_ppl},
                                            {"lwcl_wall_seconds", r.wall_seconds},
                                            {"ratio_lwcl_over_e2e_wall", r.wall_seconds / kd_S.wall_seconds}};
      cmp.note(format("time to reach %s's perplexity %.3f: %s reaches %.3f in %.1f s, %.3f x e2e_kd's %.1f s",
                      kd_S.name.c_str(), kd_S.val_ppl, r.name.c_str(), r.val_ppl, r.wall_seconds,
                      r.wall_seconds / kd_S.wall_seconds, kd_S.wall_seconds));
    } else {
      cmp.note(format("time to reach %s's perplexity %.3f: no lwcl budget up to %gs reaches it", kd_S.name.c_str(),
                      kd_S.val_ppl, S));
    }
    cmp.note(format("equal budget %gs: lwcl %.3f, e2e_kd %.3f (ratio %.3f)", S, lw_S.val_ppl, kd_S.val_ppl,
                    lw_S.val_ppl / kd_S.val_ppl));
    cmp.report()["summary"] = summary;
    cmp.plot("perplexity_vs_seconds.png", "validation perplexity vs wall seconds", "wall_seconds", "val_ppl", "method");
  });
}
