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
#include "studies/time_to_target.hpp"
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
#include "studies/validators.hpp"

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
  double kd_hidden_mse = 0;        // that stage's last-hidden-state MSE weight (0: logit KD alone)
  long kd_warmup_steps = 0;        // that stage's warm-up steps
  double cosine_weight = 0;        // > 0: LWCL's local loss is nmse + w * cosine
  bool growth = false;             // LWCL's segments grow (segmentation::growing) instead of one layer each
  std::vector<double> ramp;        // START,END: LWCL ramps to student inputs instead of its two stages
  long ramp_visit_steps = 0;       // the visit length the ramp's fractions refer to
  double e2e_temperature = 1, e2e_hidden_mse = 1;
  long e2e_warmup_steps = 0;       // end-to-end KD's linear warm-up before its cosine decay
  std::string only;                // one method alone
};

void add_knobs(CLI::App& cli, knobs& k) {
  cli.add_option("--lwcl-lr", k.lwcl_lr, "LWCL's peak learning rate (0: --lr)")->check(studies::non_negative);
  cli.add_option("--e2e-lr", k.e2e_lr, "end-to-end KD's peak learning rate (2e-3 unless given; 0: --lr)")
      ->check(studies::non_negative);
  cli.add_option("--e2e-warmup-steps", k.e2e_warmup_steps, "end-to-end KD: steps of a linear learning-rate warm-up "
                 "before its cosine decay (--warmup-steps is the layer-wise visits')")->check(studies::within(0, 1000000));
  cli.add_option("--final-kd-share", k.final_kd_share, "share of LWCL's budget for a closing end-to-end logit KD stage "
                 "(0: none)")->check(studies::within(0.0, 0.9));
  cli.add_option("--kd-lr", k.kd_lr, "peak learning rate of LWCL's closing KD stage, decaying to a tenth (0: LWCL's)")
      ->check(studies::non_negative);
  cli.add_option("--kd-hidden-mse", k.kd_hidden_mse, "LWCL's closing KD stage: weight of a last-hidden-state MSE term "
                 "beside the logit KL (0: none)")->check(studies::non_negative);
  cli.add_option("--kd-warmup-steps", k.kd_warmup_steps, "LWCL's closing KD stage: steps of a linear learning-rate "
                 "warm-up")->check(studies::within(0, 1000000));
  cli.add_option("--cosine-weight", k.cosine_weight, "LWCL's local loss nmse + w * cosine (0: nmse alone)")
      ->check(studies::non_negative);
  cli.add_flag("--growth", k.growth, "LWCL's segments grow stage by stage, 1, 2, 4, ... layers (segmentation::growing), "
               "instead of one layer each");
  cli.add_option("--ramp", k.ramp, "START,END: LWCL moves each segment from teacher to student inputs between these "
                 "fractions of a visit (curriculum::ramp) instead of its two stages; needs --ramp-visit-steps")
      ->expected(2)->delimiter(',')->check(studies::within(0.0, 1.0));
  cli.add_option("--ramp-visit-steps", k.ramp_visit_steps, "steps of a visit the --ramp fractions refer to (under a "
                 "seconds budget a visit's length is not known in advance: read it off a run without the ramp)")
      ->check(studies::non_negative);
  cli.add_option("--e2e-temperature", k.e2e_temperature, "end-to-end KD's softmax temperature")->check(studies::positive);
  cli.add_option("--e2e-hidden-mse", k.e2e_hidden_mse,
                 "weight of end-to-end KD's last-hidden-state MSE term (1 unless given; 0: none)")
      ->check(studies::non_negative);
  cli.add_option("--only", k.only, "run this method alone (no time-to-target summary)")
      ->check(CLI::IsMember({"lwcl", "layerwise_no_curriculum", "e2e_kd"}));
}

// LWCL's run under the knobs: its curriculum (two stages or a ramp, closing KD or not), segmentation
// (one layer each or growing) and local loss, one bundle per combination.
studies::method_row& run_lwcl(experiments::comparison& cmp, const knobs& k) {
  auto po = cmp.recovery_options();
  if (k.lwcl_lr > 0) {
    po.lr = k.lwcl_lr;
    po.min_lr = k.lwcl_lr / 10;
  }
  po.final_kd_share = k.final_kd_share > 0 ? k.final_kd_share : po.final_kd_share;
  po.kd_lr = k.kd_lr;
  po.kd_hidden_mse = k.kd_hidden_mse;
  po.kd_warmup_steps = k.kd_warmup_steps;
  const bool final_kd = k.final_kd_share > 0;
  const auto with_loss = [&](auto... entries) -> studies::method_row& {
    if (k.cosine_weight > 0) {
      loss::weighted_sum<loss::nmse, loss::cosine> l;
      l.weights = {1.0, k.cosine_weight};
      return cmp.recover("lwcl", po, slot<key::cache>(policies::cache::host{}), slot<key::loss>(l), entries...).row;
    }
    return cmp.recover("lwcl", po, slot<key::cache>(policies::cache::host{}), entries...).row;
  };
  const auto with_segmentation = [&](auto curriculum) -> studies::method_row& {
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
    std::vector<studies::method_row*> layerwise;
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
    eo.warmup_steps = k.e2e_warmup_steps;
    auto& kd = cmp.e2e_kd("e2e_kd", eo, cmp.total()).row;
    if (!k.only.empty()) return;
    cmp.report()["summary"] = studies::time_to_target(cmp, kd, layerwise);
    cmp.columns(studies::time_to_target_columns());
  });
}
