// ablation: the paper's ablation of layer-wise curriculum learning, on one pruned student (Wanda-sp at 50%
// of the deep gpt2 teacher's heads and FFN channels) under one step budget, so that every variant does the
// same optimiser steps:
//   curriculum  the visiting order (front_to_back, easy_to_hard, hard_to_easy, random) x the input
//               schedule (teacher inputs, student inputs, a ramp from one to the other over the middle
//               half of each visit) x the growth of segments (as segmented, doubling), and the two-stage
//               default (teacher inputs, then student inputs, front to back);
//   segmentation  one-, two- and four-layer segments, two balancing the measured difficulty, the largest
//               that fit a byte budget, growing 1 -> 2 -> 4 (each under the two-stage default);
//   cache       every feature-cache tier (RAM, memory-mapped disk, exponent-coded and zstd-compressed)
//               with the prefetcher on (a ring of 3 staging buffers) and off (one: no overlap), with the
//               stall fraction (time waiting for features over time in segment steps).
// Each part is a comparison run directory <out>/<part>/; <out>/ gets table.md, table.csv and tables.json.
//   ablation [--quick] [--parts curriculum,segmentation,cache] [comparison options]
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

#include "host_instances.hpp"
#include "lwcl/codec/exponent_codec.hpp"
#include "lwcl/codec/zstd_codec.hpp"
#include "lwcl/policies/cache/compressed.hpp"
#include "lwcl/policies/cache/disk.hpp"
#include "lwcl/policies/cache/host.hpp"
#include "lwcl/policies/curriculum/curriculum.hpp"
#include "lwcl/policies/curriculum/doubling.hpp"
#include "lwcl/policies/curriculum/easy_to_hard.hpp"
#include "lwcl/policies/curriculum/hard_to_easy.hpp"
#include "lwcl/policies/curriculum/ramp.hpp"
#include "lwcl/policies/curriculum/random.hpp"
#include "lwcl/policies/curriculum/teacher_inputs.hpp"
#include "lwcl/policies/curriculum/two_stage.hpp"
#include "lwcl/policies/segmentation/balanced_difficulty.hpp"
#include "lwcl/policies/segmentation/growing.hpp"
#include "lwcl/policies/segmentation/memory_budget.hpp"
#include "lwcl/policies/segmentation/uniform.hpp"
#include "studies/repro.hpp"
#include "lwcl/core/program.hpp"
#include "studies/validators.hpp"

using namespace lwcl;
namespace cur = lwcl::policies::curriculum;
namespace seg = lwcl::policies::segmentation;
namespace tiers = lwcl::policies::cache;
namespace pr = lwcl::studies::repro;
namespace fs = std::filesystem;

namespace {

// The curriculum part: every order x input schedule x growth, then the two-stage default.
void curricula(experiments::comparison& cmp) {
  const seg::uniform<1> segmentation;
  auto run = [&](auto c) {
    std::string ramp = "-";
    if constexpr (std::is_same_v<decltype(c.inputs), cur::ramp>) {  // over the middle half of each visit
      const index_t visit = cmp.steps_per_visit(c, segmentation);
      c.inputs = cur::ramp::over(visit, 0.25, 0.75);
      ramp = std::to_string(c.inputs.start) + "-" + std::to_string(c.inputs.end) + " of " + std::to_string(visit);
    }
    const std::string name = std::string(decltype(c.order)::name) + "-" + std::string(decltype(c.inputs)::name) + "-" +
                             std::string(decltype(c.growth)::name);
    cmp.recover(name, cmp.recovery_options(), slot<key::curriculum>(c), slot<key::segmentation>(segmentation))
        .row.details["ramp"] = ramp;
  };
  auto orders = [&](auto inputs, auto growth) {
    using I = decltype(inputs);
    using G = decltype(growth);
    run(cur::curriculum<cur::front_to_back, I, G>{});
    run(cur::curriculum<cur::easy_to_hard, I, G>{});
    run(cur::curriculum<cur::hard_to_easy, I, G>{});
    run(cur::curriculum<cur::random, I, G>{});
  };
  for (int g = 0; g < 2; ++g) {
    const auto schedules = [&](auto growth) {
      orders(cur::teacher_inputs{}, growth);
      orders(cur::student_inputs{}, growth);
      orders(cur::ramp{}, growth);
    };
    if (g == 0) schedules(cur::as_segmented{});
    else schedules(cur::doubling{});
  }
  cmp.recover("front_to_back-two_stage-as_segmented", cmp.recovery_options(), slot<key::curriculum>(cur::two_stage<>{}),
              slot<key::segmentation>(segmentation)).row.details["ramp"] = "-";
}

// The segmentation part, each under the two-stage default.
void segmentations(experiments::comparison& cmp, std::size_t segment_bytes) {
  const auto po = cmp.recovery_options();
  if (segment_bytes == 0) {
    // What two layers of this student need at this batch shape (with the three feature tensors a host
    // visit holds), and a tenth more: segments of two layers where two fit.
    const seg::memory_budget probe{.budget_bytes = 1, .batch = cmp.opt().batch, .seq = cmp.opt().seq, .input_tensors = 3};
    const auto& cfg = cmp.pruned().config;
    segment_bytes = static_cast<std::size_t>(
        1.1 * static_cast<double>(probe.memory_of(cfg, {0, std::min<index_t>(2, cfg.n_layers())}).total()));
  }
  cmp.report()["segment_bytes"] = segment_bytes;
  auto run = [&](const char* name, auto segmentation) { cmp.recover(name, po, slot<key::segmentation>(segmentation)); };
  run("uniform1", seg::uniform<1>{});
  run("uniform2", seg::uniform<2>{});
  run("uniform4", seg::uniform<4>{});
  run("balanced2", seg::balanced_difficulty{.n_segments = 2});
  run("memory_budget", seg::memory_budget{.budget_bytes = segment_bytes});
  run("growing", seg::growing{.first_size = 1, .factor = 2});
}

// The cache part: every tier with the prefetcher on and off.
void caches(experiments::comparison& cmp) {
  for (const bool on : {true, false}) {
    auto po = cmp.recovery_options();
    po.prefetch = {1, on ? 3 : 1};
    const std::string p = on ? "-prefetch" : "-no_prefetch";
    auto run = [&](const std::string& tier, auto policy) { cmp.recover(tier + p, po, slot<key::cache>(policy)); };
    run("host", tiers::host{});
    run("disk", tiers::disk{});
    run("host_exponent", tiers::compressed<tiers::host, codec::exponent_codec>{});
    run("host_zstd", tiers::compressed<tiers::host, codec::zstd_codec>{});
    run("disk_exponent", tiers::compressed<tiers::disk, codec::exponent_codec>{});
  }
}


}  // namespace

int main(int argc, char** argv) {
  const bool quick = pr::quick_requested(argc, argv);
  experiments::comparison cmp("ablation", "paper_repro ablation: curriculum order x input schedule x growth, "
                              "segmentation, and cache tier x prefetch, on one pruned student under one step budget",
                              quick ? "steps:16" : "steps:224",
                              "budget of every variant: steps:N or tokens:N (the same optimiser steps each)");
  auto& d = cmp.defaults();
  d.teacher = "runs/teacher_deep_gpt2";
  d.lr = 4e-3;
  d.test_split = true;
  if (quick) d.eval_tokens = 4096;  // 32 windows of 128, the error batches' 2 x 16
  bool quick_flag = false;
  std::string parts = "curriculum,segmentation,cache";
  std::size_t segment_bytes = 0;  // 0: what two layers of the student need, and a tenth more
  cmp.cli().add_flag("--quick", quick_flag, "a run of about a minute: small budgets and samples");
  cmp.cli().add_option("--parts", parts, "the parts, comma-separated: curriculum, segmentation, cache");
  cmp.cli().add_option("--segment-bytes", segment_bytes, "memory_budget: bytes one segment may hold while it trains "
                       "(0: 1.1 x what two layers of the student need)")->check(studies::non_negative);
  if (const int rc = cmp.parse(argc, argv); rc >= 0) return rc;

  return lwcl::guard_main([&] {
    check(studies::budget_option(cmp.opt().budget).unit != distill::budget_unit::seconds, "ablation: the budget is ",
          cmp.opt().budget, "; give steps:N or tokens:N so that every variant trains the same steps");
    const auto list = pr::split_list(parts);
    for (const auto& p : list)
      check(p == "curriculum" || p == "segmentation" || p == "cache", "ablation: part '", p,
            "' is unknown (expected curriculum, segmentation or cache)");
    const std::string base = cmp.opt().out;
    std::vector<double> weights;
    for (const auto& p : list) weights.push_back(p == "curriculum" ? 25 : p == "segmentation" ? 6 : 10);
    pr::sweep_progress progress("ablation", weights);
    std::vector<pr::table> tables;
    pr::json sources = pr::json::array();
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string& part = list[i];
      progress.begin(i, part);
      const int rc = pr::run_setting(cmp, base, pr::setting{part, cmp.opt().ratio, cmp.opt().depth}, [&] {
        if (part == "curriculum") curricula(cmp);
        else if (part == "segmentation") segmentations(cmp, segment_bytes);
        else caches(cmp);
      });
      if (rc != 0) return rc;
      const fs::path dir = fs::path(base) / part;
      const pr::json rep = pr::read_json(dir / "report.json");
      sources.push_back((dir / "report.json").string());
      pr::table t;
      std::vector<pr::column> quality = {{"val_ppl", "val ppl", pr::unit::ppl},
                                         {"test_ppl", "test ppl", pr::unit::ppl},
                                         {"err_last", "err (last layer)", pr::unit::ratio}};
      if (part == "curriculum") {
        t.title = "curriculum: order x input schedule x growth (uniform<1> segments)";
        t.label_headers = {"order", "inputs", "growth"};
        t.columns = quality;
        t.columns.push_back({"segment_steps", "steps", pr::unit::count});
        t.columns.push_back({"wall_seconds", "wall s", pr::unit::seconds});
      } else if (part == "segmentation") {
        t.title = "segmentation (two_stage curriculum)";
        t.label_headers = {"segmentation"};
        t.columns = quality;
        t.columns.push_back({"peak_compute_bytes", "peak training MiB", pr::unit::mib});
        t.columns.push_back({"visits", "visits", pr::unit::count});
        t.columns.push_back({"wall_seconds", "wall s", pr::unit::seconds});
      } else {
        t.title = "cache tier x prefetch (stall: seconds waiting for features / seconds in segment steps)";
        t.label_headers = {"tier", "prefetch"};
        t.columns = {{"stall_fraction", "stall", pr::unit::ratio},
                     {"step_seconds", "step s", pr::unit::seconds},
                     {"peak_cache_bytes", "peak cache MiB", pr::unit::mib},
                     {"cache_compression_ratio", "ratio", pr::unit::ratio},
                     {"wall_seconds", "wall s", pr::unit::seconds},
                     {"val_ppl", "val ppl", pr::unit::ppl}};
      }
      for (const auto& m : rep.at("methods")) {
        const std::string name = m.at("name").get<std::string>();
        if (name == "teacher" || name == "pruned") continue;
        pr::json row = m;
        if (const auto* last = m.contains("cumulative_error") ? &m.at("cumulative_error") : nullptr;
            last && last->is_array() && !last->empty())
          row["err_last"] = last->back();
        // The labels from the run's name: order-inputs-growth, or tier-prefetch.
        auto labels = pr::split_list(name, '-');
        if (part == "segmentation") labels = {name};
        labels.resize(t.label_headers.size());
        t.add(labels, row);
      }
      tables.push_back(std::move(t));
    }
    const std::vector<std::string> notes = {
        report::format("(budget %s for every variant, %d seed%s: the same optimiser steps each, so wall seconds differ "
                       "with what a step costs; the ramp moves from teacher to student inputs over the middle half of "
                       "each visit; prefetch off: one staging buffer, so reading never overlaps training)",
                       cmp.opt().budget.c_str(), cmp.opt().seeds, cmp.opt().seeds == 1 ? "" : "s")};
    const pr::json extra = {{"machine", pr::machine()}, {"budget", cmp.opt().budget}, {"teacher", cmp.opt().teacher},
                            {"sources", sources}, {"wall_seconds", progress.seconds()}};
    std::printf("machine: %s\n", pr::machine().c_str());
    pr::write_tables(base, "Ablation (deep gpt2 teacher, Wanda-sp 50%)", tables, notes, extra);
    return 0;
  });
}
