// segmentation_compare: the segmentation axis with the default curriculum (two_stage<>), host cache and
// nmse: the same Wanda-sp 50% student recovered with one-, two- and four-layer segments, boundaries
// given by hand, two segments balancing the measured per-layer difficulty, the largest segments that fit
// a byte budget, and segments growing 1 -> 2 -> 4 layers (under two_stage<> like the rest, and under
// curriculum<front_to_back, student_inputs, as_segmented>, one pass per stage). Reports peak compute
// bytes next to quality. The default budget is optimiser steps, so runs are reproducible; a step of a
// wider segment trains more layers and takes longer (see wall s). `--budget seconds:N` gives every
// segmentation the same time instead, which on a machine shared with other jobs also measures its load.
// Writes <out>/{config.json, report.json, table.md, cumulative_error.png} and one run directory per
// segmentation.
#include <cstddef>
#include <vector>

#include "host_instances.hpp"
#include "lwcl/policies/curriculum/as_segmented.hpp"
#include "lwcl/policies/curriculum/curriculum.hpp"
#include "lwcl/policies/segmentation/balanced_difficulty.hpp"
#include "lwcl/policies/segmentation/explicit_boundaries.hpp"
#include "lwcl/policies/segmentation/growing.hpp"
#include "lwcl/policies/segmentation/memory_budget.hpp"
#include "lwcl/policies/segmentation/uniform.hpp"
#include "studies/validators.hpp"

using namespace lwcl;
namespace cur = lwcl::policies::curriculum;
namespace seg = lwcl::policies::segmentation;

int main(int argc, char** argv) {
  experiments::comparison cmp("segmentation_compare", "lwcl segmentation comparison: one pruned student, one budget, "
                              "eight segmentations", "steps:112",
                              "budget of every segmentation: steps:N, tokens:N, or seconds (a plain number or seconds:N)");
  std::vector<index_t> boundaries = {1, 3};
  // 48 MiB: on the tiny teacher's 50% student at batch 16 x 128, one layer needs 31.0 MB, two 45.2 MB
  // and three 59.4 MB (memory_budget::memory_of), so the budget cuts two-layer segments.
  std::size_t segment_bytes = std::size_t{48} << 20;
  cmp.cli().add_option("--boundaries", boundaries, "explicit_boundaries: first layer of every segment after the first")
      ->delimiter(',');
  cmp.cli().add_option("--segment-bytes", segment_bytes, "memory_budget: bytes one segment may hold while it trains")
      ->check(studies::positive);
  if (const int rc = cmp.parse(argc, argv); rc >= 0) return rc;

  return cmp.run([&] {
    const auto po = cmp.recovery_options();
    auto run = [&](const char* name, auto segmentation) { cmp.recover(name, po, slot<key::segmentation>(segmentation)); };
    run("uniform1", seg::uniform<1>{});
    run("uniform2", seg::uniform<2>{});
    run("uniform4", seg::uniform<4>{});
    run("explicit", seg::explicit_boundaries{.boundaries = boundaries});
    // balanced_difficulty with an empty layer_difficulty, and memory_budget without batch, seq and type:
    // the pipeline measures each layer's initial loss and fills in the loader's batch shape and its
    // feature buffers.
    run("balanced2", seg::balanced_difficulty{.n_segments = 2});
    run("memory_budget", seg::memory_budget{.budget_bytes = segment_bytes});
    run("growing", seg::growing{.first_size = 1, .factor = 2});
    // growing once more, one phase per stage on student inputs: the progressive reading of growth.
    cmp.recover("growing_student", po, slot<key::segmentation>(seg::growing{.first_size = 1, .factor = 2}),
                slot<key::curriculum>(cur::curriculum<cur::front_to_back, cur::student_inputs, cur::as_segmented>{}));

    cmp.columns({"segmentation", "curriculum", "phases", "visits", "segment_steps=steps",
                 "peak_compute_bytes=peak compute", "val_ppl=val ppl", "segments=segments per stage"});
    std::string given;
    for (index_t b : boundaries) given += " " + std::to_string(b);
    cmp.note("(memory_budget: " + report::human_bytes(static_cast<double>(segment_bytes)) + " per segment; "
             "explicit_boundaries:" + given + "; segments: per stage, by layer; peak compute: the largest visit's "
             "parameters, gradients, AdamW moments, activations and the three feature buffers it holds)");
  });
}
