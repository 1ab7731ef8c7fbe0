// cache_tiers: the feature-cache axis with the default curriculum (two_stage<>, uniform<1>, nmse): the
// same Wanda-sp 50% student recovered once per cache tier (RAM, memory-mapped disk, and lossless
// compressed variants of both) under one step budget, so every tier does the same work. Reports per
// tier the stall fraction (time the trainer waited for the prefetcher over time in segment steps), peak
// cache bytes, compression ratio, codec time and wall seconds, and checks that every tier produced
// bitwise the same student: the cache is lossless and the pipeline deterministic under a step budget.
// Writes <out>/{config.json, report.json, table.md, cumulative_error.png} and one run directory per tier.
#include <cstdio>

#include "host_instances.hpp"
#include "lwcl/codec/exponent_codec.hpp"
#include "lwcl/codec/gauss_codec.hpp"
#include "lwcl/codec/zstd_codec.hpp"
#include "lwcl/policies/cache/compressed.hpp"
#include "lwcl/policies/cache/disk.hpp"
#include "lwcl/policies/cache/host.hpp"
#include "studies/validators.hpp"

using namespace lwcl;
namespace tiers = lwcl::policies::cache;

int main(int argc, char** argv) {
  experiments::comparison cmp("cache_tiers", "lwcl cache tiers: one pruned student, one step budget, six "
                              "feature-cache tiers", "steps:320",
                              "budget of every tier: steps:N or tokens:N (seconds would not do the same work)");
  int prefetch_threads = 1, ring = 3, zstd_level = 1;
  cmp.cli().add_option("--prefetch-threads", prefetch_threads, "prefetcher threads reading and decoding features")
      ->check(studies::positive);
  cmp.cli().add_option("--ring", ring, "staging buffers of the prefetcher (2 or more overlap reading with training)")
      ->check(studies::positive);
  cmp.cli().add_option("--zstd-level", zstd_level, "level of the compressed<host, zstd> tier")->check(studies::within(1, 19));
  if (const int rc = cmp.parse(argc, argv); rc >= 0) return rc;

  return cmp.run([&] {
    check(cmp.total().unit != distill::budget_unit::seconds, "cache_tiers: the budget is ", cmp.total().str(),
          "; give steps:N or tokens:N so that every tier trains the same steps (and the students can be compared)");
    auto po = cmp.recovery_options();
    po.prefetch = {prefetch_threads, ring};
    cmp.recover("host", po, slot<key::cache>(tiers::host{}));
    cmp.recover("disk", po, slot<key::cache>(tiers::disk{}));
    cmp.recover("host_exponent", po, slot<key::cache>(tiers::compressed<tiers::host, codec::exponent_codec>{}));
    cmp.recover("host_gauss", po, slot<key::cache>(tiers::compressed<tiers::host, codec::gauss_codec>{}));
    cmp.recover("host_zstd", po, slot<key::cache>(tiers::compressed<tiers::host, codec::zstd_codec>{
                                     .codec = codec::zstd_codec(zstd_level)}));
    cmp.recover("disk_exponent", po, slot<key::cache>(tiers::compressed<tiers::disk, codec::exponent_codec>{}));

    cmp.columns({"cache=cache policy", "tier", "stall_fraction=stall", "stall_seconds=stall s", "step_seconds=step s",
                 "peak_cache_bytes=peak cache", "peak_stored_bytes=peak stored", "cache_compression_ratio=ratio",
                 "encode_seconds=encode s", "decode_seconds=decode s", "wall_seconds=wall s"});
    const double staging = static_cast<double>(cmp.opt().batch) * cmp.opt().seq * cmp.pruned().config.d_model * 4;
    cmp.note(report::format("(stall: seconds waiting for the prefetcher / seconds in segment steps; peak cache: the "
                            "store's peak plus the staging ring of %d x %s; ratio: raw / stored bytes of the records "
                            "held at the end; prefetch threads %d)", ring, report::human_bytes(staging).c_str(),
                            prefetch_threads));
    // Every tier must have produced bitwise the first tier's student.
    const auto groups = cmp.identical_students();
    const bool all_same = groups.size() == 1 && groups.front().size() == cmp.recoveries().size();
    cmp.report()["students_bitwise_equal"] = all_same;
    if (all_same) return 0;
    std::fprintf(stderr, "error: cache_tiers: the tiers produced different students; a lossless cache under a step "
                         "budget must not change the result\n");
    return 3;
  });
}
