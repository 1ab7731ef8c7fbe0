#pragma once
// Time to quality, read off a comparison's held-out curves: the target is end-to-end KD's perplexity at
// the end of its budget on the curves' sample; for every layer-wise row, the wall seconds, processor
// seconds and FLOPs at which its curve first reaches that target, over what end-to-end KD spent to first
// reach it; the perplexity at the common budget and the peak memory, both against end-to-end KD's. The
// figures go into each row's details (and so into the seeds' summary), the lines into the comparison's
// notes; the returned object is report.json's "summary". Also the same at lower quality levels: the
// time each side takes to cover a share q of end-to-end KD's gain (from the pruned student's point,
// the curves' first, to its final one), q in gain_levels(), where a method that converges faster
// early shows. lwcl_vs_kd and paper_repro's efficiency tables call it after their runs.

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/core/error.hpp"
#include "lwcl/distill/curve.hpp"
#include "lwcl/report/format.hpp"
#include "studies/table.hpp"

namespace lwcl::studies {

// The shares of end-to-end KD's gain at which the time to quality is also read, in percent.
inline const std::vector<int>& gain_levels() {
  static const std::vector<int> levels = {50, 90};
  return levels;
}

// The detail key of a layer-wise row's wall time to `percent` of end-to-end KD's gain, over end-to-end KD's.
inline std::string time_to_level_key(int percent) { return "time_to_gain" + std::to_string(percent) + "_ratio"; }

// The quality at `percent` of the gain from `start` (the pruned student's) to `end` (end-to-end KD's final).
inline double gain_level_target(double start, double end, int percent) { return start - percent / 100.0 * (start - end); }

// Where two curves cover one share of the reference's gain: `reference` is end-to-end KD's curve, its
// gain the way from its first point (the pruned student) to its last; `level` the quality at `percent`
// of it; the wall seconds at which the reference and `curve` first reach it (distill::first_reaching),
// `seconds` empty where `curve` does not.
struct gain_level_reach {
  int percent = 0;
  double level = 0, reference_seconds = 0;
  std::optional<double> seconds;
};

// The levels of gain_levels() that the reference reaches after some training (none when it gains
// nothing), each with where `curve` reaches it.
inline std::vector<gain_level_reach> gain_level_reaches(const std::vector<distill::curve_point>& reference,
                                                        const std::vector<distill::curve_point>& curve) {
  std::vector<gain_level_reach> out;
  if (reference.empty()) return out;
  const double start = reference.front().ppl, end = reference.back().ppl;
  if (!(start > end)) return out;  // no gain to share out
  for (const int q : gain_levels()) {
    gain_level_reach g;
    g.percent = q;
    g.level = gain_level_target(start, end, q);
    const auto k = distill::first_reaching(reference, g.level);
    if (!k || !(k->seconds > 0)) continue;
    g.reference_seconds = k->seconds;
    if (const auto at = distill::first_reaching(curve, g.level)) g.seconds = at->seconds;
    out.push_back(g);
  }
  return out;
}

// The detail columns time_to_target fills, for comparison::columns.
inline std::vector<std::string> time_to_target_columns() {
  std::vector<std::string> c = {"train_flops", "cpu_seconds", "time_to_target_ratio", "flops_to_target_ratio",
                                "equal_budget_ppl_ratio", "peak_compute_ratio"};
  for (const int q : gain_levels()) c.push_back(time_to_level_key(q));
  return c;
}

// `Comparison`: a studies::comparison (reaching, curve_sample, note). `kd` and every row of `layerwise`
// must have a curve (--curve-points > 0).
template <class Comparison>
nlohmann::ordered_json time_to_target(Comparison& cmp, const method_row& kd, const std::vector<method_row*>& layerwise) {
  using report::format;
  check(kd.details.contains("curve") && !kd.details.at("curve").empty(), "time_to_target: ", kd.name,
        " has no held-out curve (give --curve-points)");
  const double target = kd.details.at("curve").back().at("ppl").get<double>();
  const auto kd_reach = cmp.reaching(kd, target);  // its first point at or below its own final value
  nlohmann::ordered_json summary = {{"target_ppl", target},
                                    {"curve_sample", cmp.curve_sample().protocol()},
                                    {kd.name, {{"seconds", kd_reach->seconds}, {"cpu_seconds", kd_reach->cpu_seconds},
                                               {"flops", kd_reach->flops}, {"val_ppl", kd.val_ppl},
                                               {"peak_compute_bytes", kd.peak_compute_bytes}}}};
  cmp.note(format("target: %s's final perplexity %.3f on the curves' sample (%s), first reached after %.1f s, "
                  "%.1f processor s, %.3g FLOPs", kd.name.c_str(), target, cmp.curve_sample().protocol().c_str(),
                  kd_reach->seconds, kd_reach->cpu_seconds, kd_reach->flops));
  // The pruned student may already be as good as end-to-end KD's end (a budget too small to help):
  // then nothing had to be spent to reach the target and no ratio of costs is defined.
  const bool defined = kd_reach->flops > 0;
  if (!defined)
    cmp.note(format("the pruned student already meets %s's final perplexity: time to quality is not defined at this "
                    "budget", kd.name.c_str()));
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
      cmp.note(format("%s reaches it after %.1f s (%.3f x %s), %.1f processor s (%.3f x), %.3g FLOPs (%.3f x)",
                      r->name.c_str(), reach->seconds, reach->seconds / kd_reach->seconds, kd.name.c_str(),
                      reach->cpu_seconds, reach->cpu_seconds / kd_reach->cpu_seconds, reach->flops,
                      reach->flops / kd_reach->flops));
    } else if (!reach) {
      const auto& last = r->details.at("curve").back();
      cmp.note(format("%s does not reach it within the budget (its best %.3f at the end)", r->name.c_str(),
                      last.at("ppl").template get<double>()));
    }
    cmp.note(format("%s at the common budget: perplexity %.3f against %s's %.3f (ratio %.3f); peak compute %.3f x, "
                    "whole-run peak %.3f x %s's", r->name.c_str(), r->val_ppl, kd.name.c_str(), kd.val_ppl,
                    r->val_ppl / kd.val_ppl, r->peak_compute_bytes / kd.peak_compute_bytes,
                    r->run_peak_compute_bytes / kd.run_peak_compute_bytes, kd.name.c_str()));
    // Lower levels of quality: a share of end-to-end KD's gain over the pruned student.
    for (const auto& g : gain_level_reaches(kd.details.at("curve").get<std::vector<distill::curve_point>>(),
                                            r->details.at("curve").get<std::vector<distill::curve_point>>())) {
      if (g.seconds) {
        d[time_to_level_key(g.percent)] = *g.seconds / g.reference_seconds;
        s["time_ratio_gain" + std::to_string(g.percent)] = d[time_to_level_key(g.percent)];
        cmp.note(format("%s covers %d%% of %s's gain (perplexity %.3f) after %.1f s against its %.1f s (%.3f x)",
                        r->name.c_str(), g.percent, kd.name.c_str(), g.level, *g.seconds, g.reference_seconds,
                        *g.seconds / g.reference_seconds));
      } else {
        cmp.note(format("%s does not cover %d%% of %s's gain (perplexity %.3f) within the budget", r->name.c_str(),
                        g.percent, kd.name.c_str(), g.level));
      }
    }
    summary[r->name] = s;
  }
  return summary;
}

}  // namespace lwcl::studies
