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
//
// The tuning knobs (tools/tune.sh sweeps them over seeds; choose on validation, report on the test
// split): per-method learning rates (--lwcl-lr, --e2e-lr), LWCL's closing logit-KD stage
// (--final-kd-share, at --kd-lr), its local loss (--cosine-weight: nmse + w * cosine), segment growth (--growth:
// 1, 2, 4, ... layers per segment, stage by stage) or a ramp from teacher to student inputs instead of
// the two stages (--ramp START,END of a visit of --ramp-visit-steps steps), and end-to-end KD's
// temperature and hidden-state MSE weight (--e2e-temperature, --e2e-hidden-mse). --only runs one
// method (the time-to-target summary needs all of them). The defaults are what that tuning chose on
// the validation sample (llama, 50% width, 60 s; experiments/evidence.md): the layer-wise methods at
// --lr 4e-3, end-to-end KD at 2e-3 with the hidden-state MSE at weight 1.
#include <string>
#include <vector>

#include "host_instances.hpp"
#include "lwcl/policies/cache/host.hpp"
#include "lwcl/policies/curriculum/as_segmented.hpp"
#include "lwcl/policies/curriculum/curriculum.hpp"
#include "lwcl/policies/curriculum/front_to_back.hpp"
#include "lwcl/policies/curriculum/ramp.hpp"
#include "lwcl/policies/curriculum/teacher_inputs.hpp"
#include "lwcl/policies/curriculum/two_stage.hpp"
#include "lwcl/policies/loss/cosine.hpp"
#include "lwcl/policies/loss/nmse.hpp"
#include "lwcl/policies/loss/weighted_sum.hpp"
#include "lwcl/policies/segmentation/growing.hpp"

using namespace lwcl;
namespace cur = lwcl::policies::curriculum;
namespace seg = lwcl::policies::segmentation;
namespace loss = lwcl::policies::loss;

namespace {

// What a tuning run changes of each method (the defaults: every method as the comparison runs it).
struct knobs {
  double lwcl_lr = 0, e2e_lr = 2e-3;  // 0: --lr (the defaults: see the top)
  double final_kd_share = 0;       // > 0: LWCL closes with end-to-end logit KD on this share of its budget
  double kd_lr = 0;                // that stage's peak learning rate (0: LWCL's)
  double cosine_weight = 0;        // > 0: LWCL's local loss is nmse + w * cosine
  bool growth = false;             // LWCL's segments grow (segmentation::growing) instead of one layer each
  std::vector<double> ramp;        // START,END: LWCL ramps to student inputs instead of its two stages
  long ramp_visit_steps = 0;       // the visit length the ramp's fractions refer to
  double e2e_temperature = 1, e2e_hidden_mse = 1;
  std::string only;                // one method alone
};

void add_knobs(CLI::App& cli, knobs& k) {
  cli.add_option("--lwcl-lr", k.lwcl_lr, "LWCL's peak learning rate (0: --lr)")->check(CLI::NonNegativeNumber);
  cli.add_option("--e2e-lr", k.e2e_lr, "end-to-end KD's peak learning rate (2e-3 unless given; 0: --lr)")
      ->check(CLI::NonNegativeNumber);
  cli.add_option("--final-kd-share", k.final_kd_share, "share of LWCL's budget for a closing end-to-end logit KD stage "
                 "(0: none)")->check(CLI::Range(0.0, 0.9));
  cli.add_option("--kd-lr", k.kd_lr, "peak learning rate of LWCL's closing KD stage, decaying to a tenth (0: LWCL's)")
      ->check(CLI::NonNegativeNumber);
  cli.add_option("--cosine-weight", k.cosine_weight, "LWCL's local loss nmse + w * cosine (0: nmse alone)")
      ->check(CLI::NonNegativeNumber);
  cli.add_flag("--growth", k.growth, "LWCL's segments grow stage by stage, 1, 2, 4, ... layers (segmentation::growing), "
               "instead of one layer each");
  cli.add_option("--ramp", k.ramp, "START,END: LWCL moves each segment from teacher to student inputs between these "
                 "fractions of a visit (curriculum::ramp) instead of its two stages; needs --ramp-visit-steps")
      ->expected(2)->delimiter(',')->check(CLI::Range(0.0, 1.0));
  cli.add_option("--ramp-visit-steps", k.ramp_visit_steps, "steps of a visit the --ramp fractions refer to (under a "
                 "seconds budget a visit's length is not known in advance: read it off a run without the ramp)")
      ->check(CLI::NonNegativeNumber);
  cli.add_option("--e2e-temperature", k.e2e_temperature, "end-to-end KD's softmax temperature")->check(CLI::PositiveNumber);
  cli.add_option("--e2e-hidden-mse", k.e2e_hidden_mse,
                 "weight of end-to-end KD's last-hidden-state MSE term (1 unless given; 0: none)")
      ->check(CLI::NonNegativeNumber);
  cli.add_option("--only", k.only, "run this method alone (no time-to-target summary)")
      ->check(CLI::IsMember({"lwcl", "layerwise_no_curriculum", "e2e_kd"}));
}

// LWCL's run under the knobs: its curriculum (two stages or a ramp, closing KD or not), segmentation
// (one layer each or growing) and local loss, one bundle per combination.
distill::compare::method_row& run_lwcl(experiments::comparison& cmp, const knobs& k) {
  auto po = cmp.recovery_options();
  if (k.lwcl_lr > 0) {
    po.lr = k.lwcl_lr;
    po.min_lr = k.lwcl_lr / 10;
  }
  po.final_kd_share = k.final_kd_share > 0 ? k.final_kd_share : po.final_kd_share;
  po.kd_lr = k.kd_lr;
  const bool final_kd = k.final_kd_share > 0;
  const auto with_loss = [&](auto... entries) -> distill::compare::method_row& {
    if (k.cosine_weight > 0) {
      loss::weighted_sum<loss::nmse, loss::cosine> l;
      l.weights = {1.0, k.cosine_weight};
      return cmp.recover("lwcl", po, slot<key::cache>(policies::cache::host{}), slot<key::loss>(l), entries...).row;
    }
    return cmp.recover("lwcl", po, slot<key::cache>(policies::cache::host{}), entries...).row;
  };
  const auto with_segmentation = [&](auto curriculum) -> distill::compare::method_row& {
    if (k.growth) return with_loss(slot<key::curriculum>(curriculum), slot<key::segmentation>(seg::growing{}));
    return with_loss(slot<key::curriculum>(curriculum));
  };
  if (!k.ramp.empty()) {
    check(k.ramp.size() == 2 && k.ramp[0] <= k.ramp[1], "lwcl_vs_kd: --ramp wants START,END with START <= END");
    check(k.ramp_visit_steps > 0, "lwcl_vs_kd: --ramp needs --ramp-visit-steps (the steps of a visit its fractions refer to)");
    cur::curriculum<cur::front_to_back, cur::ramp, cur::as_segmented> c;
    c.inputs = cur::ramp::over(k.ramp_visit_steps, k.ramp[0], k.ramp[1]);
    c.growth.final_kd = final_kd;
    auto& row = with_segmentation(c);
    row.details["ramp"] = std::to_string(c.inputs.start) + "-" + std::to_string(c.inputs.end) + " of " +
                          std::to_string(k.ramp_visit_steps);
    return row;
  }
  cur::two_stage<> c;
  c.final_kd = final_kd;
  return with_segmentation(c);
}

}  // namespace

int main(int argc, char** argv) {
  experiments::comparison cmp("lwcl_vs_kd", "lwcl vs end-to-end KD: time to quality, read off held-out curves", "90",
                              "the budget of every method: seconds (a plain number or seconds:N), steps:N or tokens:N");
  cmp.defaults().curve_points = 12;
  cmp.defaults().lr = 4e-3;  // the layer-wise methods' (end-to-end KD's: --e2e-lr)
  knobs k;
  add_knobs(cmp.cli(), k);
  if (const int rc = cmp.parse(argc, argv); rc >= 0) return rc;

  return cmp.run([&] {
    check(cmp.opt().curve_points > 0, "lwcl_vs_kd: --curve-points is 0; time to quality is read off the curves");
    const auto runs = [&](const char* name) { return k.only.empty() || k.only == name; };
    std::vector<distill::compare::method_row*> layerwise;
    if (runs("lwcl")) layerwise.push_back(&run_lwcl(cmp, k));
    if (runs("layerwise_no_curriculum"))
      layerwise.push_back(&cmp.recover("layerwise_no_curriculum", cmp.recovery_options(),
                                       slot<key::cache>(policies::cache::host{}),
                                       slot<key::curriculum>(cur::curriculum<cur::front_to_back, cur::teacher_inputs>{}))
                               .row);
    if (!runs("e2e_kd")) return;
    distill::e2e_options eo = cmp.e2e_defaults(cmp.total());
    if (k.e2e_lr > 0) {
      eo.lr = k.e2e_lr;
      eo.min_lr = k.e2e_lr / 10;
    }
    eo.temperature = k.e2e_temperature;
    eo.hidden_mse_weight = k.e2e_hidden_mse;
    auto& kd = cmp.e2e_kd("e2e_kd", eo, cmp.total()).row;
    if (!k.only.empty()) return;
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
