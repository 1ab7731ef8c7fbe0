// lwcl_vs_kd: time to quality. The same pruned student (Wanda-sp; --ratio of heads and FFN channels,
// --depth of the layers) recovered under one budget by layer-wise curriculum learning (the default
// bundle), layer-wise training without curriculum, and end-to-end logit KD, each evaluated on a held-out
// sample at --curve-points points of its budget (and after every layer-wise visit), the evaluations'
// time excluded. Read off those curves: the wall seconds, processor seconds and model FLOPs at which
// each layer-wise method first reaches end-to-end KD's final perplexity, against what end-to-end KD
// spent to reach it; the perplexities at the common budget; and the peak memory of each. With --seeds N
// every figure as mean +- sd over the seeds. Writes <out>/{config.json, report.json with a "summary",
// table.md, quality_vs_seconds.png, quality_vs_flops.png, cumulative_error.png} and one run directory
// per method (per seed).
#include <string>
#include <vector>

#include "host_instances.hpp"
#include "lwcl/policies/cache/host.hpp"
#include "lwcl/policies/curriculum/curriculum.hpp"
#include "lwcl/policies/curriculum/teacher_inputs.hpp"

using namespace lwcl;
namespace cur = lwcl::policies::curriculum;

int main(int argc, char** argv) {
  experiments::comparison cmp("lwcl_vs_kd", "lwcl vs end-to-end KD: time to quality, read off held-out curves", "90",
                              "the budget of every method: seconds (a plain number or seconds:N), steps:N or tokens:N");
  cmp.defaults().curve_points = 12;
  if (const int rc = cmp.parse(argc, argv); rc >= 0) return rc;

  return cmp.run([&] {
    check(cmp.opt().curve_points > 0, "lwcl_vs_kd: --curve-points is 0; time to quality is read off the curves");
    std::vector<distill::compare::method_row*> layerwise = {
        &cmp.recover("lwcl", cmp.recovery_options(), slot<key::cache>(policies::cache::host{})).row,
        &cmp.recover("layerwise_no_curriculum", cmp.recovery_options(), slot<key::cache>(policies::cache::host{}),
                     slot<key::curriculum>(cur::curriculum<cur::front_to_back, cur::teacher_inputs>{})).row};
    auto& kd = cmp.e2e_kd("e2e_kd", cmp.total()).row;

    // The target: end-to-end KD's perplexity at the end of its budget on the curves' sample.
    const double target = kd.details.at("curve").back().at("ppl").get<double>();
    const auto kd_reach = cmp.reaching(kd, target);  // its first point at or below its own final value
    using report::format;
    nlohmann::ordered_json summary = {{"target_ppl", target},
                                      {"curve_sample", cmp.curve_sample().protocol()},
                                      {"e2e_kd", {{"seconds", kd_reach->seconds}, {"cpu_seconds", kd_reach->cpu_seconds},
                                                  {"flops", kd_reach->flops}, {"val_ppl", kd.val_ppl},
                                                  {"peak_compute_bytes", kd.peak_compute_bytes}}}};
    cmp.note(format("target: e2e_kd's final perplexity %.3f on the curves' sample (%s), first reached after %.1f s, "
                    "%.1f processor s, %.3g FLOPs", target, cmp.curve_sample().protocol().c_str(), kd_reach->seconds,
                    kd_reach->cpu_seconds, kd_reach->flops));
    // The pruned student may already be as good as end-to-end KD's end (a budget too small to help):
    // then nothing had to be spent to reach the target and no ratio of costs is defined.
    const bool defined = kd_reach->flops > 0;
    if (!defined)
      cmp.note("the pruned student already meets e2e_kd's final perplexity: time to quality is not defined at this budget");
    for (auto* r : layerwise) {
      auto& d = r->details;
      d["equal_budget_ppl_ratio"] = r->val_ppl / kd.val_ppl;
      d["peak_compute_ratio"] = r->peak_compute_bytes / kd.peak_compute_bytes;
      d["run_peak_compute_ratio"] = r->run_peak_compute_bytes / kd.run_peak_compute_bytes;
      const auto reach = cmp.reaching(*r, target);
      d["reached_target"] = reach ? 1 : 0;
      nlohmann::ordered_json s = {{"reached", reach.has_value()},
                                  {"equal_budget_ppl_ratio", d["equal_budget_ppl_ratio"]},
                                  {"peak_compute_ratio", d["peak_compute_ratio"]},
                                  {"run_peak_compute_ratio", d["run_peak_compute_ratio"]}};
      if (reach && defined) {
        d["time_to_target_seconds"] = reach->seconds;
        d["time_to_target_ratio"] = reach->seconds / kd_reach->seconds;
        d["cpu_to_target_ratio"] = reach->cpu_seconds / kd_reach->cpu_seconds;
        d["flops_to_target_ratio"] = reach->flops / kd_reach->flops;
        s.update({{"seconds", reach->seconds}, {"cpu_seconds", reach->cpu_seconds}, {"flops", reach->flops},
                  {"time_ratio", d["time_to_target_ratio"]}, {"cpu_ratio", d["cpu_to_target_ratio"]},
                  {"flops_ratio", d["flops_to_target_ratio"]}});
        cmp.note(format("%s reaches it after %.1f s (%.3f x e2e_kd), %.1f processor s (%.3f x), %.3g FLOPs (%.3f x)",
                        r->name.c_str(), reach->seconds, reach->seconds / kd_reach->seconds, reach->cpu_seconds,
                        reach->cpu_seconds / kd_reach->cpu_seconds, reach->flops, reach->flops / kd_reach->flops));
      } else if (!reach) {
        const auto& last = r->details.at("curve").back();
        cmp.note(format("%s does not reach it within the budget (its best %.3f at the end)", r->name.c_str(),
                        last.at("ppl").get<double>()));
      }
      cmp.note(format("%s at the common budget: perplexity %.3f against e2e_kd's %.3f (ratio %.3f); peak compute %.3f x, "
                      "whole-run peak %.3f x e2e_kd's", r->name.c_str(), r->val_ppl, kd.val_ppl,
                      r->val_ppl / kd.val_ppl, r->peak_compute_bytes / kd.peak_compute_bytes,
                      r->run_peak_compute_bytes / kd.run_peak_compute_bytes));
      summary[r->name] = s;
    }
    cmp.columns({"train_flops", "cpu_seconds", "time_to_target_ratio", "flops_to_target_ratio", "equal_budget_ppl_ratio",
                 "peak_compute_ratio"});
    cmp.report()["summary"] = summary;
  });
}
