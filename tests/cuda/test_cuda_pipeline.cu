// The layer-wise pipeline on backend::cuda against backend::host: the same pruned student, bundle,
// batches and step budget give the same recovered student within f32 tolerance with every cache tier a
// GPU run can use (pinned host memory, disk records staged in pinned memory, device memory), with the
// copies of step s + 1 queued on the copy stream during step s or made in step; the device run keeps
// its compute memory on the device.
#include <doctest/doctest.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distill/pruned_fixture.hpp"
#include "lwcl/backend/cuda/cuda.cuh"
#include "lwcl/backend/host/host.hpp"
#include "lwcl/distill/pipeline.hpp"
#include "lwcl/policies/bundle.hpp"
#include "lwcl/policies/backend/cuda.hpp"
#include "lwcl/policies/backend/host.hpp"
#include "lwcl/backend/cuda/policies/cache.cuh"
#include "lwcl/policies/cache/host.hpp"
#include "lwcl/policies/pruning/magnitude.hpp"
#include "support/check.hpp"

using namespace lwcl;
namespace fs = std::filesystem;
using lwcl::test::rel_error;

namespace {

// Recovers `pruned` with the default two-stage bundle on backend Be with cache policy Cache, from a
// teacher with teacher_params.
template <class BackendPolicy, class Cache>
distill::pipeline_result recover_on(const distill::student_state& pruned, const std::vector<double>& teacher_params,
                                    const model::model_config& cfg, const data::batch_loader& loader, const fs::path& dir,
                                    distill::student_state& out, std::optional<bool> upload_ahead = std::nullopt) {
  using Be = typename BackendPolicy::type;
  Be be;
  auto bundle = make_policies(slot<key::pruning>(policies::pruning::magnitude_l2{}), slot<key::backend>(BackendPolicy{}),
                              slot<key::cache>(Cache{}));
  distill::pipeline_options o;
  o.total = {distill::budget_unit::steps, 48};
  o.feature_batches = 3;
  o.lr = 3e-3;
  o.min_lr = 3e-4;
  o.progress_bar = false;
  o.log = nullptr;
  o.save_student = false;
  o.plots = false;
  o.upload_ahead = upload_ahead;
  out = pruned;
  auto teacher = [&] {
    auto t = std::make_unique<model::transformer<Be>>(be, cfg, dtype::f32);
    distill::student_state s{cfg, t->layout(), teacher_params, dtype::f32};
    s.store_into(*t);
    return t;
  };
  return distill::make_pipeline(be, bundle, o).run(teacher, out, model::identity_boundaries(cfg.n_layers()), loader, dir);
}

}  // namespace

TEST_CASE("cuda: the layer-wise pipeline recovers the same student as on the host backend") {
  backend::cpu host;
  const auto cfg = test::pruned_fixture_config(4);
  model::transformer<backend::cpu> teacher(host, cfg, dtype::f32);
  test::init_scaled_teacher(teacher);
  const auto teacher_params = distill::student_state::of(teacher).params;
  const auto pruned = distill::student_state::of(*prune::apply_plan(teacher, test::half_plan(cfg)));
  const fs::path dir = fs::temp_directory_path() / "lwcl_test_cuda_pipeline";
  fs::remove_all(dir);
  fs::create_directories(dir);
  test::write_markov_shard(dir / "train.bin");
  const data::shard shard((dir / "train.bin").string());
  const data::batch_loader loader(shard, 4, 16, 3);

  distill::student_state on_host;
  const auto h = recover_on<policies::backend::host<>, policies::cache::host>(pruned, teacher_params, cfg, loader,
                                                                              dir / "host", on_host);
  const std::size_t feature = 4 * 16 * static_cast<std::size_t>(cfg.d_model) * sizeof(float);

  // Each tier a GPU run uses; the copies of the next step queued during this one (the default on a
  // device) or made in step. Every variant recovers the host's student.
  struct variant {
    const char* name;
    std::optional<bool> ahead;
  };
  std::vector<distill::student_state> students;
  for (const variant v : {variant{"pinned", std::nullopt}, variant{"pinned_in_step", false}, variant{"disk_pinned", std::nullopt},
                          variant{"device", std::nullopt}}) {
    CAPTURE(v.name);
    distill::student_state on_device;
    const std::string name = v.name;
    const auto d = name == "device" ? recover_on<policies::backend::cuda, policies::cache::device>(
                                          pruned, teacher_params, cfg, loader, dir / name, on_device, v.ahead)
                   : name == "disk_pinned" ? recover_on<policies::backend::cuda, policies::cache::disk_pinned>(
                                                 pruned, teacher_params, cfg, loader, dir / name, on_device, v.ahead)
                                           : recover_on<policies::backend::cuda, policies::cache::pinned>(
                                                 pruned, teacher_params, cfg, loader, dir / name, on_device, v.ahead);
    REQUIRE(h.visits.size() == d.visits.size());
    for (std::size_t i = 0; i < h.visits.size(); ++i) {
      CAPTURE(i);
      CHECK(d.visits[i].steps == h.visits[i].steps);
      CHECK(rel_error(std::vector<double>{d.visits[i].loss_last}, std::vector<double>{h.visits[i].loss_last}) < 1e-2);
    }
    const double err = rel_error(on_device.params, on_host.params);
    MESSAGE("pipeline student with the ", name, " cache, device vs host: relative error ", err, "; stall ",
            d.stall_seconds, " s of ", d.step_seconds, " s");
    CHECK(err < 1e-3);
    CHECK(on_device.params != pruned.params);
    CHECK(d.tracker_peak_bytes.at("device") > 0);
    CHECK(d.cache.hit_rate() == 1.0);
    // A second feature set on the device when copies run a step ahead (not for the device tier, read in place).
    const bool ahead = name != "device" && v.ahead.value_or(true);
    CHECK(d.peak_compute_bytes == h.peak_compute_bytes + (ahead ? 3 * feature : 0));
    if (name != "device") CHECK(d.tracker_peak_bytes.at("pinned") > 0);  // the staging ring (and the pinned store)
    students.push_back(on_device);
  }
  // Queued a step ahead or made in step, the same kernels run on the same bytes.
  CHECK(students[0].params == students[1].params);
  fs::remove_all(dir);
}
