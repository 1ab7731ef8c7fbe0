// Recovery of a pruned student: transformer::backward_logits against finite differences, layer-wise
// recovery (both stages) and end-to-end KD each bring the student's logits closer to the teacher's on
// held-out tokens, the layer-wise run keeps one segment resident, and budgets and bad input behave.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/rng.hpp"
#include "lwcl/distill/e2e_kd.hpp"
#include "lwcl/distill/layerwise.hpp"
#include "lwcl/prune/surgery.hpp"

using namespace lwcl;
namespace fs = std::filesystem;

namespace {

using net_t = model::transformer<backend::cpu>;

struct setup {
  backend::cpu be;
  model::model_config cfg = model::model_config::uniform(model::family::llama, 48, 16, 32, 3, 4, 2, 48);
  std::unique_ptr<net_t> teacher, student;
  fs::path dir;
  std::unique_ptr<data::shard> shard;

  setup() {
    teacher = std::make_unique<net_t>(be, cfg, dtype::f64);
    teacher->init(5);
    auto p = prune::detail::host_params(*teacher);
    for (const auto& e : teacher->layout().entries())
      if (e.name.find("norm") == std::string::npos)
        for (index_t i = 0; i < e.shape.numel(); ++i) p[static_cast<std::size_t>(e.offset + i)] *= 8;
    prune::detail::set_host_params(*teacher, p);
    auto plan = prune::keep_all(cfg);
    for (auto& l : plan.layers) {
      l.ffn.clear();
      for (index_t j = 0; j < 48; j += 2) l.ffn.push_back(j);
      l.kv_heads = {1};
      l.heads = {2, 3};
    }
    student = prune::apply_plan(*teacher, plan);
    dir = fs::temp_directory_path() / "lwcl_test_recovery";
    fs::create_directories(dir);
    std::vector<std::int32_t> ids(6000);
    philox_stream s{9, 1};
    std::int32_t t = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = t = static_cast<std::int32_t>((t * 5 + 1 + s.bits(i) % 4) % 48);
    data::write_shard((dir / "train.bin").string(), ids, 48);
    shard = std::make_unique<data::shard>((dir / "train.bin").string());
  }
  ~setup() { fs::remove_all(dir); }

  // Mean KL(teacher || student) of the next-token distributions on held-out batches 1000..1003.
  double held_out_kl(net_t& s, const data::batch_loader& loader, index_t B, index_t T) {
    std::vector<std::int32_t> ids, targets;
    std::vector<double> tl(static_cast<std::size_t>(B * T * 48)), sc(static_cast<std::size_t>(2 * B * T));
    double total = 0;
    for (int k = 0; k < 4; ++k) {
      loader.batch(1000 + static_cast<std::uint64_t>(k), ids, targets);
      const tensor tok(ids.data(), {B, T});
      const tensor t = teacher->forward_logits(tok);
      std::copy_n(static_cast<const double*>(t.data), tl.size(), tl.begin());
      total += ops::logit_kl_loss(be, tensor(), tensor(sc.data(), {2 * B * T}), s.forward_logits(tok),
                                  tensor(tl.data(), {B, T, 48}));
    }
    return total / 4;
  }
};

}  // namespace

TEST_CASE("transformer::backward_logits: gradients of a logit-space loss equal finite differences (f64)") {
  setup su;
  auto& net = *su.student;
  const index_t B = 1, T = 6;
  std::vector<std::int32_t> ids = {1, 5, 9, 2, 7, 3};
  const tensor tok(ids.data(), {B, T});
  std::vector<double> w(static_cast<std::size_t>(B * T * 48));
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.37 * static_cast<double>(i));
  auto objective = [&]() {  // sum(logits * w)
    const tensor l = net.forward_logits(tok);
    double s = 0;
    for (std::size_t i = 0; i < w.size(); ++i) s += static_cast<const double*>(l.data)[i] * w[i];
    return s;
  };
  objective();
  net.zero_grad();
  net.backward_logits(tensor(w.data(), {B, T, 48}));
  const double* g = static_cast<const double*>(net.grads().data);
  double* p = static_cast<double*>(net.params().data);
  double worst = 0;
  for (index_t i = 0; i < net.layout().numel(); i += 53) {
    const double keep = p[i], eps = 1e-6;
    p[i] = keep + eps;
    const double up = objective();
    p[i] = keep - eps;
    const double down = objective();
    p[i] = keep;
    const double fd = (up - down) / (2 * eps);
    if (std::abs(fd) < 1e-9 && std::abs(g[i]) < 1e-9) continue;
    worst = std::max(worst, std::abs(fd - g[i]) / std::max(1e-6, std::abs(fd)));
  }
  MESSAGE("backward_logits worst relative FD error ", worst);
  CHECK(worst < 1e-5);
}

TEST_CASE("layer-wise recovery (two stages) and end-to-end KD both move the pruned student towards the teacher") {
  setup su;
  const index_t B = 4, T = 16;
  const data::batch_loader loader(*su.shard, B, T, 77);
  const double pruned_kl = su.held_out_kl(*su.student, loader, B, T);

  auto lw_student = prune::apply_plan(*su.student, prune::keep_all(su.student->config()));  // a copy
  distill::layerwise_options lo;
  lo.stage1_steps = 40;
  lo.stage2_steps = 40;
  lo.lr = 3e-3;
  lo.min_lr = 3e-4;
  lo.feature_batches = 6;
  lo.progress_bar = false;
  const auto lr = distill::train_layerwise(*su.teacher, *lw_student, {0, 1, 2}, loader, B, T, lo);
  const double lw_kl = su.held_out_kl(*lw_student, loader, B, T);
  REQUIRE(lr.segments.size() == 6);  // 3 segments x 2 stages
  for (const auto& s : lr.segments) {
    CAPTURE(s.first);
    CAPTURE(s.stage);
    CHECK(s.steps == 40);
    CHECK(s.loss_last < s.loss_first);
  }
  CHECK(lr.tokens == 6 * 40 * B * T);
  // One segment (one layer) resident: far less than the student's parameters with gradients and moments.
  CHECK(lr.peak_compute_bytes < 4 * static_cast<std::size_t>(su.student->num_parameters()) * sizeof(double));
  CHECK(lr.cache_bytes == 6u * 4u * static_cast<std::size_t>(B * T * 32) * sizeof(double));

  auto kd_student = prune::apply_plan(*su.student, prune::keep_all(su.student->config()));
  distill::e2e_options eo;
  eo.steps = 80;
  eo.lr = 3e-3;
  eo.min_lr = 3e-4;
  eo.progress_bar = false;
  const auto kr = distill::train_e2e_kd(*su.teacher, *kd_student, loader, B, T, eo);
  const double kd_kl = su.held_out_kl(*kd_student, loader, B, T);
  MESSAGE("held-out KL(teacher || student): pruned ", pruned_kl, ", layer-wise ", lw_kl, ", end-to-end KD ", kd_kl,
          "; peak compute bytes layer-wise ", lr.peak_compute_bytes, ", KD ", kr.peak_compute_bytes);
  CHECK(lw_kl < pruned_kl);
  CHECK(kd_kl < pruned_kl);
  CHECK(kr.steps == 80);
  CHECK(kr.loss_last < kr.loss_first);
  CHECK(lr.peak_compute_bytes < kr.peak_compute_bytes);
}

TEST_CASE("recovery budgets and bad input") {
  setup su;
  const index_t B = 2, T = 8;
  const data::batch_loader loader(*su.shard, B, T, 1);
  distill::layerwise_options lo;
  lo.progress_bar = false;
  lo.time_budget_seconds = 1e-9;  // exhausted before the first step
  const auto r = distill::train_layerwise(*su.teacher, *su.student, {0, 1, 2}, loader, B, T, lo);
  CHECK(r.budget_exhausted);
  CHECK(r.tokens == 0);
  CHECK_THROWS_WITH_AS(distill::train_layerwise(*su.teacher, *su.student, {0, 1}, loader, B, T, lo),
                       doctest::Contains("teacher_layer_of has 2 entries for a student of 3 layers"), lwcl::error);
  CHECK_THROWS_WITH_AS(distill::train_layerwise(*su.teacher, *su.student, {0, 2, 1}, loader, B, T, lo),
                       doctest::Contains("must rise strictly"), lwcl::error);
  lo.segments = {{0, 1}, {2, 3}};
  CHECK_THROWS_WITH_AS(distill::train_layerwise(*su.teacher, *su.student, {0, 1, 2}, loader, B, T, lo),
                       doctest::Contains("segments must be contiguous"), lwcl::error);
  distill::e2e_options eo;
  eo.progress_bar = false;
  eo.steps = 5;
  static_cast<double*>(su.student->param("norm_f.weight").data)[0] = std::nan("");  // a poisoned student
  CHECK_THROWS_WITH_AS(distill::train_e2e_kd(*su.teacher, *su.student, loader, B, T, eo),
                       doctest::Contains("train_e2e_kd: stopped at step"), lwcl::error);
}
