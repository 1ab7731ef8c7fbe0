// curriculum_ablation: the curriculum axis of layer-wise recovery with everything else held fixed: one
// Wanda-sp 50% student of the tiny teacher, one-layer segments (uniform<1>), the host cache, nmse, and
// one step budget. Each curriculum is a composition of order x input schedule x growth, swept with
// lwcl::sweep; the table shows what each axis buys. A step budget gives every curriculum the same
// number of optimiser steps (not the same seconds: wider segments and student-feature refreshes cost
// more per step), and it fixes the length of a visit, which the ramp schedule is expressed in.
// Writes <out>/{config.json, report.json, cumulative_error.png} and one run directory per curriculum.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common.hpp"
#include "lwcl/policies/curriculum/curriculum.hpp"
#include "lwcl/policies/curriculum/doubling.hpp"
#include "lwcl/policies/curriculum/easy_to_hard.hpp"
#include "lwcl/policies/curriculum/hard_to_easy.hpp"
#include "lwcl/policies/curriculum/ramp.hpp"
#include "lwcl/policies/curriculum/random.hpp"
#include "lwcl/policies/curriculum/teacher_inputs.hpp"
#include "lwcl/policies/pruning/wanda_sp.hpp"
#include "lwcl/policies/segmentation/uniform.hpp"

using namespace lwcl;
using namespace lwcl::experiments;
namespace cur = lwcl::policies::curriculum;
namespace seg = lwcl::policies::segmentation;

namespace {

// Segment visits a curriculum makes on a model: one per segment of every phase.
template <class Curriculum, class Segmentation>
index_t visits_of(const Curriculum& c, const Segmentation& s, const model::model_config& cfg) {
  index_t n = 0;
  for (const auto& ph : policies::curriculum_phases(c, policies::segmentation_stages(s, cfg), cfg.n_layers()))
    n += static_cast<index_t>(ph.segments.size());
  return n;
}

// The visiting order of phase 0 as segment indices, e.g. "2 0 1 3".
std::string first_phase_order(const distill::pipeline_result& r) {
  std::string s;
  for (const auto& v : r.visits)
    if (v.phase == 0) s += (s.empty() ? "" : " ") + std::to_string(v.segment);
  return s;
}

bool same_bits(const distill::student_state& a, const distill::student_state& b) {
  return a.params.size() == b.params.size() &&
         std::memcmp(a.params.data(), b.params.data(), a.params.size() * sizeof(double)) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lwcl curriculum ablation: one pruned student, one step budget, eight curricula"};
  common_options opt;
  opt.budget = "steps:224";  // a whole number of steps per visit for the 8, 4 and 7 visits these curricula make
  opt.out = "runs/curriculum_ablation";
  double ramp_start = 0.25, ramp_end = 0.75;
  long ramp_visit_steps = 0;
  std::uint64_t seed = 1;
  bool core_only = false;
  add_common_options(app, opt,
                     "budget of every curriculum: steps:N or tokens:N (same optimiser steps each), or seconds:N / a "
                     "plain number (then --ramp-visit-steps is needed)");
  app.add_option("--ramp-start", ramp_start, "ramp: last step on teacher inputs alone, as a fraction of a visit")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--ramp-end", ramp_end, "ramp: first step on student inputs alone, as a fraction of a visit")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--ramp-visit-steps", ramp_visit_steps,
                 "steps of a visit the ramp fractions refer to; 0: the budget's steps divided by the visits")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", seed, "seed of the random visiting order");
  app.add_flag("--core-only", core_only, "leave out the hard_to_easy and random orders");
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  try {
    timer total;
    check(ramp_start <= ramp_end, "curriculum_ablation: --ramp-start ", ramp_start, " is after --ramp-end ", ramp_end);
    backend::cpu be;
    const distill::budget budget = budget_option(opt.budget);
    check(budget.unit != distill::budget_unit::seconds || ramp_visit_steps > 0, "curriculum_ablation: under a seconds "
          "budget the length of a visit is not known in advance; give --ramp-visit-steps (or a steps: budget)");
    fs::create_directories(opt.out);

    // 1. The teacher and its Wanda-sp student.
    const auto val = validation_ids(opt.data);
    auto start = start_pruned(be, opt, policies::pruning::wanda_sp{}, val, "curriculum_ablation");
    const auto& cfg = start.pruned.config;
    std::vector<method_row> rows = start.rows;

    // 2. The ramp in steps: its fractions of the visit length this budget gives a curriculum.
    const double budget_steps = budget.unit == distill::budget_unit::steps    ? budget.amount
                                : budget.unit == distill::budget_unit::tokens ? budget.amount / (opt.batch * opt.seq)
                                                                              : 0.0;
    const seg::uniform<1> segmentation;
    std::map<std::string, std::string> ramp_text;  // curriculum name -> "start-end of N"
    auto with_ramp = [&](auto c) {
      const index_t visits = visits_of(c, segmentation, cfg);
      const long visit = ramp_visit_steps > 0 ? ramp_visit_steps
                                              : static_cast<long>(std::floor(budget_steps)) / static_cast<long>(visits);
      c.inputs.start = static_cast<index_t>(std::lround(ramp_start * static_cast<double>(visit)));
      c.inputs.end = static_cast<index_t>(std::lround(ramp_end * static_cast<double>(visit)));
      ramp_text[std::string(decltype(c)::name)] =
          std::to_string(c.inputs.start) + "-" + std::to_string(c.inputs.end) + " of " + std::to_string(visit);
      return c;
    };

    // 3. The curricula, under one budget on one training stream.
    const auto st = make_study(be, opt, start, val);
    const auto po = recovery_options(opt, budget);

    // Row name of each curriculum (run directories are named after them).
    const std::map<std::string, std::string> short_name = {
        {std::string(cur::two_stage<>::name), "two_stage"},
        {std::string(cur::two_stage<cur::easy_to_hard>::name), "two_stage_e2h"},
        {std::string(cur::curriculum<cur::front_to_back, cur::teacher_inputs>::name), "no_curriculum"},
        {std::string(cur::curriculum<cur::front_to_back, cur::student_inputs>::name), "student_inputs"},
        {std::string(cur::curriculum<cur::easy_to_hard, cur::ramp, cur::as_segmented>::name), "e2h_ramp"},
        {std::string(cur::curriculum<cur::front_to_back, cur::ramp, cur::doubling>::name), "ramp_doubling"},
        {std::string(cur::curriculum<cur::hard_to_easy, cur::student_inputs>::name), "h2e_student"},
        {std::string(cur::curriculum<cur::random, cur::student_inputs>::name), "random_student"}};
    struct detail_row {
      std::string name, curriculum, ramp, order;
      std::size_t phases = 0, visits = 0;
      long steps = 0;
    };
    std::vector<detail_row> details;
    std::vector<std::pair<std::string, distill::student_state>> students;

    sweep(alternatives<key::curriculum>(
              cur::two_stage<>{}, cur::two_stage<cur::easy_to_hard>{},
              cur::curriculum<cur::front_to_back, cur::teacher_inputs>{},
              cur::curriculum<cur::front_to_back, cur::student_inputs>{},
              with_ramp(cur::curriculum<cur::easy_to_hard, cur::ramp, cur::as_segmented>{}),
              with_ramp(cur::curriculum<cur::front_to_back, cur::ramp, cur::doubling>{}),
              cur::curriculum<cur::hard_to_easy, cur::student_inputs>{},
              cur::curriculum<cur::random, cur::student_inputs>{.order = {.seed = seed}}),
          slot<key::segmentation>(segmentation), slot<key::pruning>(policies::pruning::wanda_sp{}),
          [&](const auto& bundle) {
            using curriculum_t = typename std::remove_cvref_t<decltype(bundle)>::curriculum_type;
            const std::string cname(curriculum_t::name);
            const std::string name = short_name.at(cname);
            if (core_only && (name == "h2e_student" || name == "random_student")) return;
            distill::pipeline_result res;
            distill::student_state student;
            rows.push_back(run_pipeline(st, name, bundle, start.pruned, po, &res, &student));
            rows.back().extra["ramp"] = ramp_text.count(cname) ? ramp_text.at(cname) : "-";
            rows.back().extra["phase0_order"] = first_phase_order(res);
            details.push_back({name, cname, ramp_text.count(cname) ? ramp_text.at(cname) : "-", first_phase_order(res),
                               res.phases, res.visits.size(), res.segment_steps});
            students.emplace_back(name, std::move(student));
          });

    // 4. Which curricula produced bitwise the same student.
    nlohmann::ordered_json identical = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < students.size(); ++i)
      for (std::size_t j = i + 1; j < students.size(); ++j)
        if (same_bits(students[i].second, students[j].second))
          identical.push_back({students[i].first, students[j].first});

    // 5. The tables and the report.
    print_table(rows, start.protocol);
    std::printf("\n%-16s %-54s %6s %6s %6s %-12s %s\n", "method", "curriculum (segmentation uniform<1>)", "phases",
                "visits", "steps", "ramp", "order of phase 0");
    for (const auto& d : details)
      std::printf("%-16s %-54s %6zu %6zu %6ld %-12s %s\n", d.name.c_str(), d.curriculum.c_str(), d.phases, d.visits,
                  d.steps, d.ramp.c_str(), d.order.c_str());
    std::printf("(ramp: student-input share 0 up to the first step, 1 from the second, of a visit of that many steps)\n");
    for (const auto& p : identical)
      std::printf("bitwise the same student: %s and %s\n", p[0].get<std::string>().c_str(),
                  p[1].get<std::string>().c_str());
    write_json(fs::path(opt.out) / "config.json",
               {{"program", "curriculum_ablation"}, {"teacher", start.teacher.dir.string()}, {"data", opt.data},
                {"criterion", "wanda_sp"}, {"ratio", opt.ratio}, {"segmentation", std::string(seg::uniform<1>::name)},
                {"budget", {{"unit", distill::budget_unit_name(budget.unit)}, {"amount", budget.amount}}},
                {"batch", opt.batch}, {"seq", opt.seq}, {"lr", opt.lr}, {"feature_batches", opt.feature_batches},
                {"calibration_batches", opt.calib_batches}, {"ramp_start", ramp_start}, {"ramp_end", ramp_end},
                {"ramp_visit_steps", ramp_visit_steps}, {"seed", seed}, {"backend", std::string(backend::cpu::name)}});
    write_report(opt.out, rows,
                 {{"val_protocol", start.protocol}, {"teacher_parameters", start.teacher_parameters},
                  {"student_parameters", start.pruned.layout.numel()}, {"identical_students", identical},
                  {"wall_seconds_total", total.seconds()}});
    std::printf("curriculum_ablation: wrote %s/ (report.json, cumulative_error.png, one folder per curriculum) in %.0f s\n",
                opt.out.c_str(), total.seconds());
    return 0;
  } catch (const lwcl::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
