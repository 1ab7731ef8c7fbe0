// quickstart: the README's main job, on the CPU. Uses the cached `tiny` teacher (or trains it: a gpt2
// on the King James Bible and Jane Austen), prunes 50% of its heads and FFN channels with Wanda-sp, and
// recovers the student under one budget with layer-wise curriculum learning (the default two-stage
// bundle), layer-wise training without curriculum (teacher inputs only) and end-to-end KD. Prints a
// table (teacher, pruned, each method: validation perplexity, peak compute bytes, peak cache bytes,
// wall seconds, tokens) and writes runs/quickstart/{config.json, report.json, table.md,
// cumulative_error.png} and one run directory per method. Zero-shot multiple choice (lm-eval's protocol)
// on the corpora's tasks is there with --mc data/mc/kjv_next_verse.validation.jsonl,... (tools/quickstart.sh
// writes them), and left out by default: at this scale the teachers themselves score at chance on them.
#include "host_instances.hpp"
#include "lwcl/policies/cache/host.hpp"
#include "lwcl/policies/curriculum/curriculum.hpp"
#include "lwcl/policies/curriculum/teacher_inputs.hpp"

using namespace lwcl;
namespace cur = lwcl::policies::curriculum;

int main(int argc, char** argv) {
  experiments::comparison cmp("quickstart", "lwcl quickstart: teacher -> Wanda-sp 50% -> layer-wise curriculum vs "
                              "baselines under one budget", "90",
                              "budget of each recovery method: seconds (a plain number), or steps:N, tokens:N, seconds:N");
  bool skip_no_curriculum = false, same_data = false;
  cmp.cli().add_flag("--skip-no-curriculum", skip_no_curriculum, "leave out the layer-wise baseline without curriculum");
  cmp.cli().add_flag("--same-data", same_data, "add end-to-end KD on the layer-wise cached batches, and LWCL on as many "
                     "distinct batches as end-to-end KD sees (a steps or tokens budget)");
  if (const int rc = cmp.parse(argc, argv); rc >= 0) return rc;

  return cmp.run([&] {
    // Each method under the same budget on the same training stream; two_stage<>, uniform<1>, nmse.
    cmp.recover("lwcl", cmp.recovery_options(), slot<key::cache>(policies::cache::host{}));
    if (!skip_no_curriculum)
      cmp.recover("layerwise_no_curriculum", cmp.recovery_options(),
                  slot<key::curriculum>(cur::curriculum<cur::front_to_back, cur::teacher_inputs>{}));
    cmp.e2e_kd("e2e_kd", cmp.total());
    if (!same_data) return;
    check(cmp.steps_of(cmp.total()) > 0, "quickstart: --same-data needs a steps: or tokens: budget (the batches "
          "end-to-end KD sees are its steps)");
    cmp.e2e_kd("e2e_kd_cached", cmp.total(), cmp.opt().feature_batches);
    auto distinct = cmp.recovery_options();
    distinct.feature_batches = static_cast<index_t>(cmp.steps_of(cmp.total()));
    distinct.running_batches = true;
    cmp.recover("lwcl_distinct", distinct, slot<key::cache>(policies::cache::host{}));
  });
}
