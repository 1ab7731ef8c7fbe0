// The layer-wise pipeline on backend::cuda against backend::host: the same pruned student, bundle,
// batches and step budget give the same recovered student within f32 tolerance, and the device run
// keeps its compute memory on the device.
#include <doctest/doctest.h>

#include <filesystem>
#include <memory>
#include <vector>

#include "distill/pruned_fixture.hpp"
#include "lwcl/backend/cuda/cuda.cuh"
#include "lwcl/backend/host/host.hpp"
#include "lwcl/distill/pipeline.hpp"
#include "lwcl/policies/backend/cuda.hpp"
#include "lwcl/policies/backend/host.hpp"
#include "lwcl/policies/pruning/magnitude.hpp"
#include "support/check.hpp"

using namespace lwcl;
namespace fs = std::filesystem;
using lwcl::test::rel_error;

namespace {

// Recovers `pruned` with the default two-stage bundle on backend Be, from a teacher with host_params.
template <class BackendPolicy>
distill::pipeline_result recover_on(const distill::student_state& pruned, const std::vector<double>& teacher_params,
                                    const model::model_config& cfg, const data::batch_loader& loader, const fs::path& dir,
                                    distill::student_state& out) {
  using Be = typename BackendPolicy::type;
  Be be;
  auto bundle = make_policies(slot<key::pruning>(policies::pruning::magnitude_l2{}), slot<key::backend>(BackendPolicy{}));
  distill::pipeline_options o;
  o.total = {distill::budget_unit::steps, 48};
  o.feature_batches = 3;
  o.lr = 3e-3;
  o.min_lr = 3e-4;
  o.progress_bar = false;
  o.log = nullptr;
  o.save_student = false;
  o.plots = false;
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

  distill::student_state on_host, on_device;
  const auto h = recover_on<policies::backend::host<>>(pruned, teacher_params, cfg, loader, dir / "host", on_host);
  const auto d = recover_on<policies::backend::cuda>(pruned, teacher_params, cfg, loader, dir / "cuda", on_device);
  REQUIRE(h.visits.size() == d.visits.size());
  for (std::size_t i = 0; i < h.visits.size(); ++i) {
    CAPTURE(i);
    CHECK(d.visits[i].steps == h.visits[i].steps);
    CHECK(rel_error(std::vector<double>{d.visits[i].loss_last}, std::vector<double>{h.visits[i].loss_last}) < 1e-2);
  }
  const double err = rel_error(on_device.params, on_host.params);
  MESSAGE("pipeline student, device vs host: relative error ", err);
  CHECK(err < 1e-3);
  CHECK(on_device.params != pruned.params);
  CHECK(d.tracker_peak_bytes.at("device") > 0);
  CHECK(d.peak_compute_bytes == h.peak_compute_bytes);
  fs::remove_all(dir);
}
