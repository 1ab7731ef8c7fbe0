// efficiency_gpt2: the paper's efficiency table on the GPT-2 family. The deep gpt2 teacher (8 layers,
// trained once by train_teacher --preset deep and cached) pruned three ways (Wanda-sp on 50% and 70% of
// every layer's heads and FFN channels; block influence removing half the layers), and each student
// recovered by LWCL (the default bundle), layer-wise training without curriculum and end-to-end KD under
// one wall-clock budget, over 3 seeds, beside no recovery. Reports peak memory from the tracker (while
// training and over the whole run, with the host feature cache, and the resident set), wall and
// processor seconds, FLOPs, final quality on the test split, and the cost to reach end-to-end KD's final
// quality read off the held-out curves. Learning rates: the ones chosen on validation
// (experiments/evidence.md): the layer-wise methods 4e-3, end-to-end KD 2e-3 with the hidden-state MSE.
// Writes <out>/<setting>/ (each a comparison run directory, seed_*/ inside), and in <out>/ table.md,
// table.csv, tables.json and per setting cumulative_error_, quality_vs_time_ and memory_over_time_<setting>.png.
// --settings ratio0.7+depth0.5 is the teacher-heavy regime (run_all.sh's job teacher_heavy): half the layers
// removed, then 70% of the width of those kept.
//   efficiency_gpt2 [--quick] [--settings ratio0.5,ratio0.7,depth0.5] [comparison options]
#include <cstdio>
#include <string>
#include <vector>

#include "host_instances.hpp"
#include "studies/efficiency.hpp"
#include "lwcl/core/program.hpp"

using namespace lwcl;
namespace pr = lwcl::studies::repro;

int main(int argc, char** argv) {
  const bool quick = pr::quick_requested(argc, argv);
  experiments::comparison cmp("efficiency_gpt2", "paper_repro efficiency_gpt2: LWCL against end-to-end KD on the deep "
                              "gpt2 teacher at 50% and 70% width and half depth, over seeds", quick ? "steps:8" : "40",
                              "budget of every method: seconds (a plain number), steps:N or tokens:N");
  pr::efficiency_defaults(cmp.defaults(), "runs/teacher_deep_gpt2", quick);
  pr::efficiency_knobs k;
  bool quick_flag = false;
  std::string settings = "ratio0.5,ratio0.7,depth0.5";
  cmp.cli().add_flag("--quick", quick_flag, "a run of about a minute: small budgets, 2 seeds, short samples");
  pr::add_settings_option(cmp.cli(), settings);
  pr::add_efficiency_knobs(cmp.cli(), k);
  if (const int rc = cmp.parse(argc, argv); rc >= 0) return rc;

  return lwcl::guard_main([&] {
    const auto list = pr::parse_settings(settings);
    const std::string base = cmp.opt().out;
    pr::sweep_progress progress("efficiency_gpt2", std::vector<double>(list.size(), 1.0));
    for (std::size_t i = 0; i < list.size(); ++i) {
      progress.begin(i, list[i].name);
      const int rc = pr::run_setting(cmp, base, list[i], [&] { pr::efficiency_methods(cmp, k); });
      if (rc != 0) return rc;
    }
    pr::efficiency_report(base, "Efficiency, GPT-2 family (teacher " + cmp.opt().teacher + ")", list, cmp.opt(),
                          progress.seconds());
    return 0;
  });
}
