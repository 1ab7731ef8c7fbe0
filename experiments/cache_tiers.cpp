// cache_tiers: the feature-cache axis with the default curriculum (two_stage<>, uniform<1>, nmse): the
// same Wanda-sp 50% student recovered once per cache tier (RAM, memory-mapped disk, and lossless
// compressed variants of both) under one step budget, so every tier does the same work. Reports per
// tier the stall fraction (time the trainer waited for the prefetcher over time in segment steps), peak
// cache bytes, compression ratio, codec time and wall seconds, and checks that every tier produced
// bitwise the same student: the cache is lossless and the pipeline deterministic under a step budget.
// Writes <out>/{config.json, report.json, cumulative_error.png} and one run directory per tier.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common.hpp"
#include "lwcl/codec/exponent_codec.hpp"
#include "lwcl/codec/zstd_codec.hpp"
#include "lwcl/policies/cache/compressed.hpp"
#include "lwcl/policies/cache/disk.hpp"
#include "lwcl/policies/cache/host.hpp"
#include "lwcl/policies/pruning/wanda_sp.hpp"

using namespace lwcl;
using namespace lwcl::experiments;
namespace tiers = lwcl::policies::cache;

int main(int argc, char** argv) {
  CLI::App app{"lwcl cache tiers: one pruned student, one step budget, five feature-cache tiers"};
  common_options opt;
  opt.budget = "steps:320";
  opt.out = "runs/cache_tiers";
  int prefetch_threads = 1, ring = 3, zstd_level = 1;
  add_common_options(app, opt, "budget of every tier: steps:N or tokens:N (seconds would not do the same work)");
  app.add_option("--prefetch-threads", prefetch_threads, "prefetcher threads reading and decoding features")
      ->check(CLI::PositiveNumber);
  app.add_option("--ring", ring, "staging buffers of the prefetcher (2 or more overlap reading with training)")
      ->check(CLI::PositiveNumber);
  app.add_option("--zstd-level", zstd_level, "level of the compressed<host, zstd> tier")->check(CLI::Range(1, 19));
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  try {
    timer total;
    backend::cpu be;
    const distill::budget budget = budget_option(opt.budget);
    check(budget.unit != distill::budget_unit::seconds, "cache_tiers: the budget is ", budget.str(),
          "; give steps:N or tokens:N so that every tier trains the same steps (and the students can be compared)");
    fs::create_directories(opt.out);

    // 1. The teacher and its Wanda-sp student.
    const auto val = validation_ids(opt.data);
    auto start = start_pruned(be, opt, policies::pruning::wanda_sp{}, val, "cache_tiers");
    std::vector<method_row> rows = start.rows;

    // 2. One recovery per tier, same bundle otherwise, same budget and training stream.
    const auto st = make_study(be, opt, start, val);
    auto po = recovery_options(opt, budget);
    po.prefetch = {prefetch_threads, ring};

    const std::map<std::string, std::string> short_name = {
        {std::string(tiers::host::name), "host"},
        {std::string(tiers::disk::name), "disk"},
        {std::string(tiers::compressed<tiers::host, codec::exponent_codec>::name), "host_exponent"},
        {std::string(tiers::compressed<tiers::host, codec::zstd_codec>::name), "host_zstd"},
        {std::string(tiers::compressed<tiers::disk, codec::exponent_codec>::name), "disk_exponent"}};
    struct tier_row {
      std::string name, policy, tier;
      double stall_fraction = 0, stall_seconds = 0, step_seconds = 0, wall_seconds = 0, teacher_pass_seconds = 0;
      double peak_cache_bytes = 0, peak_stored_bytes = 0, ratio = 1;
      double encode_seconds = 0, decode_seconds = 0;
    };
    std::vector<tier_row> tiers;
    std::vector<std::pair<std::string, distill::student_state>> students;

    sweep(alternatives<key::cache>(tiers::host{}, tiers::disk{}, tiers::compressed<tiers::host, codec::exponent_codec>{},
                                   tiers::compressed<tiers::host, codec::zstd_codec>{.codec = codec::zstd_codec(zstd_level)},
                                   tiers::compressed<tiers::disk, codec::exponent_codec>{}),
          slot<key::pruning>(policies::pruning::wanda_sp{}), [&](const auto& bundle) {
            using cache_t = typename std::remove_cvref_t<decltype(bundle)>::cache_type;
            const std::string name = short_name.at(std::string(cache_t::name));
            distill::pipeline_result res;
            distill::student_state student;
            rows.push_back(run_pipeline(st, name, bundle, start.pruned, po, &res, &student));
            const auto& u = res.cache.store;
            tier_row t;
            t.name = name;
            t.policy = std::string(cache_t::name);
            t.tier = std::string(tier_name(u.memory_tier));
            t.stall_seconds = res.stall_seconds;
            t.step_seconds = res.step_seconds;
            t.stall_fraction = res.step_seconds > 0 ? res.stall_seconds / res.step_seconds : 0.0;
            t.wall_seconds = res.seconds;
            t.teacher_pass_seconds = res.teacher_pass_seconds;
            t.peak_cache_bytes = static_cast<double>(res.peak_cache_bytes);
            t.peak_stored_bytes = static_cast<double>(u.peak_stored_bytes);
            t.ratio = res.cache.compression_ratio();
            t.encode_seconds = u.codec.encode_seconds;
            t.decode_seconds = u.codec.decode_seconds;
            rows.back().extra["tier"] = t.tier;
            rows.back().extra["stall_seconds"] = t.stall_seconds;
            rows.back().extra["step_seconds"] = t.step_seconds;
            rows.back().extra["peak_stored_bytes"] = u.peak_stored_bytes;
            rows.back().extra["encode_seconds"] = t.encode_seconds;
            rows.back().extra["decode_seconds"] = t.decode_seconds;
            rows.back().extra["cache_hit_rate"] = res.cache.hit_rate();
            tiers.push_back(t);
            students.emplace_back(name, std::move(student));
          });

    // 3. Every tier must have produced bitwise the first tier's student.
    std::vector<std::string> differing;
    for (const auto& [name, s] : students) {
      const auto& ref = students.front().second;
      const bool same = s.params.size() == ref.params.size() &&
                        std::memcmp(s.params.data(), ref.params.data(), s.params.size() * sizeof(double)) == 0;
      if (!same) differing.push_back(name);
    }

    // 4. The tables and the report.
    print_table(rows, start.protocol);
    std::printf("\n%-14s %-27s %-6s %8s %8s %8s %12s %12s %7s %8s %8s %8s\n", "tier", "cache policy", "tier", "stall",
                "stall s", "step s", "peak cache", "peak stored", "ratio", "encode s", "decode s", "wall s");
    for (const auto& t : tiers)
      std::printf("%-14s %-27s %-6s %8.4f %8.2f %8.1f %12s %12s %7.3f %8.2f %8.2f %8.1f\n", t.name.c_str(), t.policy.c_str(),
                  t.tier.c_str(), t.stall_fraction, t.stall_seconds, t.step_seconds, human_bytes(t.peak_cache_bytes).c_str(),
                  human_bytes(t.peak_stored_bytes).c_str(), t.ratio, t.encode_seconds, t.decode_seconds, t.wall_seconds);
    std::printf("(stall: seconds waiting for the prefetcher / seconds in segment steps; peak cache: the store's peak "
                "plus the staging ring of %d x %s; ratio: raw / stored bytes of the records held at the end; prefetch "
                "threads %d)\n",
                ring, human_bytes(static_cast<double>(opt.batch) * opt.seq * start.pruned.config.d_model * 4).c_str(),
                prefetch_threads);
    if (differing.empty())
      std::printf("students: all %zu tiers produced bitwise the same student\n", students.size());
    else
      for (const auto& n : differing)
        std::printf("students: %s differs from %s\n", n.c_str(), students.front().first.c_str());

    write_json(fs::path(opt.out) / "config.json",
               {{"program", "cache_tiers"}, {"teacher", start.teacher.dir.string()}, {"data", opt.data},
                {"criterion", "wanda_sp"}, {"ratio", opt.ratio},
                {"budget", {{"unit", distill::budget_unit_name(budget.unit)}, {"amount", budget.amount}}},
                {"batch", opt.batch}, {"seq", opt.seq}, {"lr", opt.lr}, {"feature_batches", opt.feature_batches},
                {"calibration_batches", opt.calib_batches}, {"prefetch_threads", prefetch_threads}, {"ring", ring},
                {"zstd_level", zstd_level}, {"backend", std::string(backend::cpu::name)}});
    write_report(opt.out, rows,
                 {{"val_protocol", start.protocol}, {"teacher_parameters", start.teacher_parameters},
                  {"student_parameters", start.pruned.layout.numel()}, {"students_bitwise_equal", differing.empty()},
                  {"students_differing", differing}, {"wall_seconds_total", total.seconds()}});
    std::printf("cache_tiers: wrote %s/ (report.json, cumulative_error.png, one folder per tier) in %.0f s\n",
                opt.out.c_str(), total.seconds());
    if (!differing.empty()) {
      std::fprintf(stderr, "error: cache_tiers: %zu tier(s) produced a different student; a lossless cache under a step "
                           "budget must not change the result\n", differing.size());
      return 3;
    }
    return 0;
  } catch (const lwcl::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
