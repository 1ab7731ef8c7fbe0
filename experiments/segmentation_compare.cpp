// segmentation_compare: the segmentation axis with the default curriculum (two_stage<>), host cache and
// nmse: the same Wanda-sp 50% student recovered with one-, two- and four-layer segments, boundaries
// given by hand, two segments balancing the measured per-layer difficulty, the largest segments that fit
// a byte budget, and segments growing 1 -> 2 -> 4 layers (under two_stage<> like the rest, and under
// curriculum<front_to_back, student_inputs, as_segmented>, one pass per stage). Reports peak compute
// bytes next to quality. The default budget is optimiser steps, so runs are reproducible; a step of a
// wider segment trains more layers and takes longer (see wall s). `--budget seconds:N` gives every
// segmentation the same time instead, which on a machine shared with other jobs also measures its load.
// Writes <out>/{config.json, report.json, cumulative_error.png} and one run directory per segmentation.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "common.hpp"
#include "lwcl/policies/curriculum/as_segmented.hpp"
#include "lwcl/policies/curriculum/curriculum.hpp"
#include "lwcl/policies/pruning/wanda_sp.hpp"
#include "lwcl/policies/segmentation/balanced_difficulty.hpp"
#include "lwcl/policies/segmentation/explicit_boundaries.hpp"
#include "lwcl/policies/segmentation/growing.hpp"
#include "lwcl/policies/segmentation/memory_budget.hpp"
#include "lwcl/policies/segmentation/uniform.hpp"

using namespace lwcl;
using namespace lwcl::experiments;
namespace cur = lwcl::policies::curriculum;
namespace seg = lwcl::policies::segmentation;

namespace {

// The segmentations a run trained, one per stage: the segments of each phase by first layer, a stage
// that repeats the previous phase's segments (two_stage trains each stage twice) written once. A phase
// the budget ended in is marked partial, and phases it never reached are counted.
std::string stages_text(const distill::pipeline_result& r, index_t n_layers) {
  std::map<std::size_t, std::map<index_t, index_t>> phase_segments;  // phase -> first -> last
  for (const auto& v : r.visits) phase_segments[v.phase][v.first] = v.last;
  std::string out, previous;
  for (const auto& [phase, segs] : phase_segments) {
    std::string s;
    index_t covered = 0;
    for (const auto& [first, last] : segs) {
      if (!s.empty()) s += ' ';
      s.append("[").append(std::to_string(first)).append(",").append(std::to_string(last)).append(")");
      covered += last - first;
    }
    if (covered < n_layers) s += " (partial)";
    if (s == previous) continue;
    if (!out.empty()) out += " > ";
    out += s;
    previous = s;
  }
  if (phase_segments.size() < r.phases)
    out.append(" (").append(std::to_string(r.phases - phase_segments.size())).append(" phases not reached)");
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lwcl segmentation comparison: one pruned student, one budget, eight segmentations"};
  common_options opt;
  opt.budget = "steps:112";
  opt.out = "runs/segmentation_compare";
  std::vector<index_t> boundaries = {1, 3};
  // 48 MiB: on the tiny teacher's 50% student at batch 16 x 128, one layer needs 31.0 MB, two 45.2 MB
  // and three 59.4 MB (memory_budget::memory_of), so the budget cuts two-layer segments.
  std::size_t segment_bytes = std::size_t{48} << 20;
  add_common_options(app, opt,
                     "budget of every segmentation: steps:N, tokens:N, or seconds (a plain number or seconds:N)");
  app.add_option("--boundaries", boundaries, "explicit_boundaries: first layer of every segment after the first")
      ->delimiter(',');
  app.add_option("--segment-bytes", segment_bytes, "memory_budget: bytes one segment may hold while it trains")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  try {
    timer total;
    backend::cpu be;
    const distill::budget budget = budget_option(opt.budget);
    fs::create_directories(opt.out);

    // 1. The teacher and its Wanda-sp student.
    const auto val = validation_ids(opt.data);
    auto start = start_pruned(be, opt, policies::pruning::wanda_sp{}, val, "segmentation_compare");
    std::vector<method_row> rows = start.rows;

    // 2. One recovery per segmentation, same budget and training stream.
    const auto st = make_study(be, opt, start, val);
    const auto po = recovery_options(opt, budget);

    struct detail_row {
      std::string name, segmentation, curriculum, stages;
      std::size_t phases = 0, visits = 0;
      long steps = 0;
      double peak_compute = 0, ppl = 0;
    };
    std::vector<detail_row> details;
    auto run = [&](const std::string& name, const auto& bundle) {
      distill::pipeline_result res;
      rows.push_back(run_pipeline(st, name, bundle, start.pruned, po, &res));
      const auto names = describe(bundle);
      const std::string stages = stages_text(res, start.pruned.config.n_layers());
      rows.back().extra["segments"] = stages;
      details.push_back({name, names.at("segmentation"), names.at("curriculum"), stages, res.phases,
                         res.visits.size(), res.segment_steps, rows.back().peak_compute_bytes, rows.back().val_ppl});
    };

    const std::map<std::string, std::string> short_name = {{std::string(seg::uniform<1>::name), "uniform1"},
                                                           {std::string(seg::uniform<2>::name), "uniform2"},
                                                           {std::string(seg::uniform<4>::name), "uniform4"},
                                                           {std::string(seg::explicit_boundaries::name), "explicit"},
                                                           {std::string(seg::balanced_difficulty::name), "balanced2"},
                                                           {std::string(seg::memory_budget::name), "memory_budget"},
                                                           {std::string(seg::growing::name), "growing"}};
    // balanced_difficulty with an empty layer_difficulty, and memory_budget without batch, seq and type:
    // the pipeline measures each layer's initial loss and fills in the loader's batch shape and its
    // feature buffers.
    sweep(alternatives<key::segmentation>(seg::uniform<1>{}, seg::uniform<2>{}, seg::uniform<4>{},
                                          seg::explicit_boundaries{.boundaries = boundaries},
                                          seg::balanced_difficulty{.n_segments = 2},
                                          seg::memory_budget{.budget_bytes = segment_bytes},
                                          seg::growing{.first_size = 1, .factor = 2}),
          slot<key::pruning>(policies::pruning::wanda_sp{}), [&](const auto& bundle) {
            using seg_t = typename std::remove_cvref_t<decltype(bundle)>::segmentation_type;
            run(short_name.at(std::string(seg_t::name)), bundle);
          });
    // growing once more, one phase per stage on student inputs: the progressive reading of growth.
    run("growing_student",
        make_policies(slot<key::pruning>(policies::pruning::wanda_sp{}),
                      slot<key::segmentation>(seg::growing{.first_size = 1, .factor = 2}),
                      slot<key::curriculum>(cur::curriculum<cur::front_to_back, cur::student_inputs, cur::as_segmented>{})));

    // 3. The tables and the report.
    print_table(rows, start.protocol);
    std::printf("\n%-16s %-20s %-48s %6s %6s %6s %13s %8s  %s\n", "method", "segmentation", "curriculum", "phases",
                "visits", "steps", "peak compute", "val ppl", "segments per stage");
    for (const auto& d : details)
      std::printf("%-16s %-20s %-48s %6zu %6zu %6ld %13s %8.3f  %s\n", d.name.c_str(), d.segmentation.c_str(),
                  d.curriculum.c_str(), d.phases, d.visits, d.steps, human_bytes(d.peak_compute).c_str(), d.ppl,
                  d.stages.c_str());
    std::printf("(memory_budget: %s per segment; explicit_boundaries:", human_bytes(static_cast<double>(segment_bytes)).c_str());
    for (index_t b : boundaries) std::printf(" %lld", static_cast<long long>(b));
    std::printf("; peak compute: the largest visit's parameters, gradients, AdamW moments, activations and the three "
                "feature buffers it holds)\n");

    write_json(fs::path(opt.out) / "config.json",
               {{"program", "segmentation_compare"}, {"teacher", start.teacher.dir.string()}, {"data", opt.data},
                {"criterion", "wanda_sp"}, {"ratio", opt.ratio},
                {"budget", {{"unit", distill::budget_unit_name(budget.unit)}, {"amount", budget.amount}}},
                {"batch", opt.batch}, {"seq", opt.seq}, {"lr", opt.lr}, {"feature_batches", opt.feature_batches},
                {"calibration_batches", opt.calib_batches}, {"boundaries", boundaries},
                {"segment_bytes", segment_bytes}, {"backend", std::string(backend::cpu::name)}});
    write_report(opt.out, rows,
                 {{"val_protocol", start.protocol}, {"teacher_parameters", start.teacher_parameters},
                  {"student_parameters", start.pruned.layout.numel()}, {"wall_seconds_total", total.seconds()}});
    std::printf("segmentation_compare: wrote %s/ (report.json, cumulative_error.png, one folder per segmentation) in "
                "%.0f s\n",
                opt.out.c_str(), total.seconds());
    return 0;
  } catch (const lwcl::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
