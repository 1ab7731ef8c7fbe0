// curriculum_ablation: the curriculum axis of layer-wise recovery with everything else held fixed: one
// Wanda-sp 50% student of the tiny teacher, one-layer segments (uniform<1>), the host cache, nmse, and
// one step budget. Each curriculum is a composition of order x input schedule x growth; the tables show
// what each axis buys. A step budget gives every curriculum the same number of optimiser steps (not the
// same seconds: wider segments and student-feature refreshes cost more per step), and it fixes the
// length of a visit, which the ramp schedule is expressed in. Writes <out>/{config.json, report.json,
// table.md, cumulative_error.png} and one run directory per curriculum (studies/comparison.hpp).
#include <string>
#include <type_traits>

#include "host_instances.hpp"
#include "lwcl/policies/curriculum/curriculum.hpp"
#include "lwcl/policies/curriculum/doubling.hpp"
#include "lwcl/policies/curriculum/easy_to_hard.hpp"
#include "lwcl/policies/curriculum/hard_to_easy.hpp"
#include "lwcl/policies/curriculum/ramp.hpp"
#include "lwcl/policies/curriculum/random.hpp"
#include "lwcl/policies/curriculum/teacher_inputs.hpp"
#include "lwcl/policies/segmentation/uniform.hpp"
#include "studies/validators.hpp"

using namespace lwcl;
namespace cur = lwcl::policies::curriculum;

int main(int argc, char** argv) {
  experiments::comparison cmp("curriculum_ablation", "lwcl curriculum ablation: one pruned student, one step budget, "
                              "eight curricula", "steps:224",  // whole steps per visit for 8, 4 and 7 visits
                              "budget of every curriculum: steps:N or tokens:N (same optimiser steps each), or "
                              "seconds:N / a plain number (then --ramp-visit-steps is needed)");
  double ramp_start = 0.25, ramp_end = 0.75;
  long ramp_visit_steps = 0;
  std::uint64_t seed = 1;  // of the random order
  bool core_only = false;
  auto& cli = cmp.cli();
  cli.add_option("--ramp-start", ramp_start, "ramp: last teacher-only step, as a fraction of a visit")->check(studies::within(0., 1.));
  cli.add_option("--ramp-end", ramp_end, "ramp: first student-only step, as a fraction of a visit")->check(studies::within(0., 1.));
  cli.add_option("--ramp-visit-steps", ramp_visit_steps, "steps of a visit the ramp fractions refer to; 0: the "
                 "budget's steps divided by the visits")->check(studies::non_negative);
  cli.add_option("--order-seed", seed, "seed of the random visiting order");
  cli.add_flag("--core-only", core_only, "leave out the hard_to_easy and random orders");
  if (const int rc = cmp.parse(argc, argv); rc >= 0) return rc;

  return cmp.run([&] {
    check(ramp_start <= ramp_end, "--ramp-start ", ramp_start, " is after --ramp-end ", ramp_end);
    check(cmp.total().unit != distill::budget_unit::seconds || ramp_visit_steps > 0, "curriculum_ablation: under a "
          "seconds budget the length of a visit is not known in advance; give --ramp-visit-steps (or a steps: budget)");
    const policies::segmentation::uniform<1> segmentation;
    auto run = [&](const std::string& name, auto c) {
      std::string ramp = "-";
      if constexpr (requires { requires std::is_same_v<decltype(c.inputs), cur::ramp>; }) {  // fractions of a visit
        const index_t visit = ramp_visit_steps > 0 ? ramp_visit_steps : cmp.steps_per_visit(c, segmentation);
        c.inputs = cur::ramp::over(visit, ramp_start, ramp_end);
        ramp = std::to_string(c.inputs.start) + "-" + std::to_string(c.inputs.end) + " of " + std::to_string(visit);
      }
      cmp.recover(name, cmp.recovery_options(), slot<key::curriculum>(c), slot<key::segmentation>(segmentation))
          .row.details["ramp"] = ramp;
    };
    run("two_stage", cur::two_stage<>{});
    run("two_stage_e2h", cur::two_stage<cur::easy_to_hard>{});
    run("no_curriculum", cur::curriculum<cur::front_to_back, cur::teacher_inputs>{});
    run("student_inputs", cur::curriculum<cur::front_to_back, cur::student_inputs>{});
    run("e2h_ramp", cur::curriculum<cur::easy_to_hard, cur::ramp, cur::as_segmented>{});
    run("ramp_doubling", cur::curriculum<cur::front_to_back, cur::ramp, cur::doubling>{});
    if (!core_only) {
      run("h2e_student", cur::curriculum<cur::hard_to_easy, cur::student_inputs>{});
      run("random_student", cur::curriculum<cur::random, cur::student_inputs>{.order = {.seed = seed}});
    }
    cmp.columns({"curriculum", "phases", "visits", "segment_steps=steps", "ramp", "phase0_order=order of phase 0"});
    cmp.note("(segmentation uniform<1>; ramp: student-input share 0 up to the first step, 1 from the second, of a "
             "visit of that many steps)");
  });
}
