// End-to-end KD, the baseline of layer-wise recovery: transformer::backward_logits (with and without a
// hidden-state gradient) against finite differences, KD (with and without a hidden MSE term) bringing
// the student's logits closer to the teacher's on held-out tokens, its tracker-measured peak equal to the
// buffers it declares (frozen teacher or not), with activation checkpointing bitwise the same student in
// less memory, a frozen model's forward, budgets and bad input; the
// quality curve (a probe at fixed steps, its time and memory left out) and first_reaching.
// Layer-wise recovery is tested in test_pipeline.cpp.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/memory.hpp"
#include "lwcl/core/metrics.hpp"
#include "lwcl/core/rng.hpp"
#include "lwcl/distill/e2e_kd.hpp"
#include "lwcl/model/host_params.hpp"
#include "lwcl/prune/surgery.hpp"
#include "pruned_fixture.hpp"

using namespace lwcl;
namespace fs = std::filesystem;

namespace {

using net_t = model::transformer<backend::cpu>;

struct setup {
  backend::cpu be;
  model::model_config cfg = test::pruned_fixture_config(3);
  std::unique_ptr<net_t> teacher, student;
  fs::path dir;
  std::unique_ptr<data::shard> shard;

  setup() {
    teacher = std::make_unique<net_t>(be, cfg, dtype::f64);
    test::init_scaled_teacher(*teacher);
    student = prune::apply_plan(*teacher, test::half_plan(cfg));
    dir = fs::temp_directory_path() / "lwcl_test_recovery";
    fs::create_directories(dir);
    test::write_markov_shard(dir / "train.bin");
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

// Worst relative error between `grads` and central differences of `objective` over every stride-th
// parameter, with a floor for near-zero gradients, where differences of eps 1e-6 on an objective of
// order 1 carry about 1e-10 of absolute noise. `checked` counts the parameters compared.
template <class F>
double worst_fd_error(net_t& net, F&& objective, index_t stride, int& checked) {
  const double* g = static_cast<const double*>(net.grads().data);
  double* p = static_cast<double*>(net.params().data);
  double worst = 0;
  checked = 0;
  for (index_t i = 0; i < net.layout().numel(); i += stride) {
    const double keep = p[i], eps = 1e-6;
    p[i] = keep + eps;
    const double up = objective();
    p[i] = keep - eps;
    const double down = objective();
    p[i] = keep;
    const double fd = (up - down) / (2 * eps);
    if (std::abs(fd) < 1e-9 && std::abs(g[i]) < 1e-9) continue;
    ++checked;
    worst = std::max(worst, std::abs(fd - g[i]) / std::max(1e-3, std::abs(fd)));
  }
  return worst;
}

// Three steps of end-to-end KD (logit KL + 0.5 hidden MSE, frozen teacher, batches of 4 x 16) from the
// pruned student, and the same with options changed: the two students and results side by side.
struct side_by_side {
  using run_t = std::pair<std::unique_ptr<net_t>, distill::e2e_result>;
  setup su;
  const index_t B = 4, T = 16;
  data::batch_loader loader;
  distill::e2e_options eo;
  run_t first, other;

  explicit side_by_side(std::uint64_t seed) : loader(*su.shard, B, T, seed) {
    su.teacher->freeze();
    eo.steps = 3;
    eo.hidden_mse_weight = 0.5;
    eo.progress_bar = false;
    first = train(eo);
  }
  run_t train(const distill::e2e_options& o) {
    auto s = prune::apply_plan(*su.student, prune::keep_all(su.student->config()));
    auto r = distill::train_e2e_kd(*su.teacher, *s, loader, B, T, o);
    return {std::move(s), r};
  }
  template <class Change>
  run_t& second(Change&& change) {
    auto o = eo;
    change(o);
    other = train(o);
    return other;
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
  int checked = 0;
  const double worst = worst_fd_error(net, objective, 53, checked);
  CHECK(checked > 20);
  MESSAGE("backward_logits worst relative FD error ", worst);
  CHECK(worst < 1e-5);
}

TEST_CASE("end-to-end KD moves the pruned student towards the teacher; a hidden-state MSE term adds to it") {
  setup su;
  const index_t B = 4, T = 16;
  const data::batch_loader loader(*su.shard, B, T, 77);
  const double pruned_kl = su.held_out_kl(*su.student, loader, B, T);
  for (double w : {0.0, 0.5}) {
    CAPTURE(w);
    auto kd_student = prune::apply_plan(*su.student, prune::keep_all(su.student->config()));  // a copy
    distill::e2e_options eo;
    eo.steps = 80;
    eo.lr = 3e-3;
    eo.min_lr = 3e-4;
    eo.hidden_mse_weight = w;
    eo.progress_bar = false;
    const auto kr = distill::train_e2e_kd(*su.teacher, *kd_student, loader, B, T, eo);
    const double kd_kl = su.held_out_kl(*kd_student, loader, B, T);
    MESSAGE("held-out KL(teacher || student): pruned ", pruned_kl, ", end-to-end KD (hidden MSE weight ", w, ") ", kd_kl);
    CHECK(kd_kl < pruned_kl);
    CHECK(kr.steps == 80);
    CHECK(kr.tokens == 80 * B * T);
    CHECK(kr.loss_last < kr.loss_first);
    // Teacher and student both resident: at least both models' parameters, plus the student's gradients and moments.
    CHECK(kr.peak_compute_bytes > (su.teacher->params().bytes() + 4 * kd_student->params().bytes()));
  }
}

TEST_CASE("infer_logits gives forward_logits' logits and h_L bitwise, keeping nothing for backward; a frozen model "
          "runs forward only") {
  setup su;
  const index_t B = 2, T = 8, V = su.cfg.vocab, C = su.cfg.d_model;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(B * T));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 11 + 5) % 48);
  const tensor tok(ids.data(), {B, T});
  std::vector<double> want(static_cast<std::size_t>(B * T * V)), got(want.size()), hidden(static_cast<std::size_t>(B * T * C));
  const tensor l = su.teacher->forward_logits(tok);
  std::copy_n(static_cast<const double*>(l.data), want.size(), want.begin());
  const std::vector<double> want_h(static_cast<const double*>(su.teacher->last_hidden().data),
                                   static_cast<const double*>(su.teacher->last_hidden().data) + hidden.size());
  net_t fresh(su.be, su.cfg, dtype::f64);
  test::init_scaled_teacher(fresh);
  const std::size_t before = memory().current(tier::host);
  fresh.freeze();
  CHECK(fresh.frozen());
  CHECK(memory().current(tier::host) == before - fresh.params().bytes());  // the gradient buffer went
  CHECK(fresh.parameter_bytes() == fresh.params().bytes());
  fresh.infer_logits(tok, tensor(got.data(), {B, T, V}), tensor(hidden.data(), {B, T, C}));
  CHECK(got == want);
  CHECK(hidden == want_h);
  CHECK(fresh.activation_bytes() == 0);
  CHECK(fresh.inference_bytes() > 0);
  CHECK_THROWS_WITH_AS(fresh.forward_logits(tok), doctest::Contains("the model is frozen"), lwcl::error);
  CHECK_THROWS_WITH_AS(fresh.infer_logits(tok, tensor(got.data(), {B, T, V - 1})), doctest::Contains("logits"), lwcl::error);
}

TEST_CASE("end-to-end KD's peak is the memory tracker's, and equals the buffers it declares, frozen teacher or not") {
  for (const bool frozen : {false, true}) {
    CAPTURE(frozen);
    setup su;
    const index_t B = 4, T = 16;
    const data::batch_loader loader(*su.shard, B, T, 77);
    auto kd_student = prune::apply_plan(*su.student, prune::keep_all(su.student->config()));
    if (frozen) su.teacher->freeze();
    for (double w : {0.0, 0.5}) {
      CAPTURE(w);
      distill::e2e_options eo;
      eo.steps = 3;
      eo.hidden_mse_weight = w;
      eo.progress_bar = false;
      const auto kr = distill::train_e2e_kd(*su.teacher, *kd_student, loader, B, T, eo);
      MESSAGE("frozen ", frozen, ", hidden MSE ", w, ": tracker ", kr.peak_compute_bytes, " B, declared ",
              kr.declared_compute_bytes, " B");
      CHECK(kr.peak_compute_bytes == kr.declared_compute_bytes);
      // The other models held meanwhile (the pruned student) are not counted.
      CHECK(kr.peak_compute_bytes < memory().peak_compute(tier::host));
      const std::size_t floor = su.teacher->params().bytes() + 4 * kd_student->params().bytes();
      CHECK(kr.peak_compute_bytes > floor + (frozen ? 0 : su.teacher->params().bytes()));
    }
  }
}

TEST_CASE("end-to-end KD with activation checkpointing: bitwise the same student in less tracker memory, the buffers "
          "it declares") {
  side_by_side run(78);
  auto& [plain, rp] = run.first;
  auto& [ckpt, rc] = run.second([](distill::e2e_options& eo) { eo.checkpoint_activations = true; });
  const auto& loader = run.loader;
  const index_t B = run.B, T = run.T;
  MESSAGE("tracker peak: plain ", rp.peak_compute_bytes, " B, checkpointed ", rc.peak_compute_bytes, " B");
  CHECK(model::host_params(*ckpt) == model::host_params(*plain));
  CHECK(rc.loss_last == rp.loss_last);
  CHECK(rc.peak_compute_bytes < rp.peak_compute_bytes);
  CHECK(rc.peak_compute_bytes == rc.declared_compute_bytes);
  CHECK(rc.flops > rp.flops);  // one more forward of the student's blocks a step
  CHECK(!ckpt->activation_checkpointing());  // the student is left as it was given
  // So is it by a run that stops with an error (here the quality probe's, before the first step).
  distill::e2e_options stopped = run.eo;
  stopped.checkpoint_activations = true;
  stopped.probe = []() -> double { fail("the probe refuses"); };
  CHECK_THROWS_WITH_AS(distill::train_e2e_kd(*run.su.teacher, *ckpt, run.loader, run.B, run.T, stopped),
                       doctest::Contains("the probe refuses"), lwcl::error);
  CHECK(!ckpt->activation_checkpointing());
  // The stack alone: with equal-width layers one set of saved tensors serves all three blocks.
  std::vector<std::int32_t> ids, targets;
  loader.batch(0, ids, targets);
  const tensor tok(ids.data(), {B, T});
  plain->forward_logits(tok);
  const std::size_t saved = plain->activation_bytes();
  plain->set_activation_checkpointing(true);
  plain->forward_logits(tok);
  CHECK(plain->activation_bytes() < saved);
}

TEST_CASE("end-to-end KD with gradient accumulation: the same student within rounding, in a smaller batch's memory") {
  side_by_side run(79);
  auto& [whole, rw] = run.first;
  auto& [split, rs] = run.second([](distill::e2e_options& eo) { eo.micro_batches = 2; });
  auto& su = run.su;
  const auto& loader = run.loader;
  const index_t B = run.B, T = run.T;
  distill::e2e_options eo = run.eo;
  MESSAGE("tracker peak: one batch of 4 ", rw.peak_compute_bytes, " B, two micro-batches of 2 ", rs.peak_compute_bytes, " B");
  const auto a = model::host_params(*whole), c = model::host_params(*split);
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - c[i]));
  CHECK(worst < 1e-10);  // f64: the sums differ in their rounding only
  CHECK(rs.loss_last == doctest::Approx(rw.loss_last).epsilon(1e-10));
  CHECK(rs.peak_compute_bytes < rw.peak_compute_bytes);
  CHECK(rs.peak_compute_bytes == rs.declared_compute_bytes);
  CHECK(rs.tokens == rw.tokens);
  eo.micro_batches = 3;
  CHECK_THROWS_WITH_AS(distill::train_e2e_kd(*su.teacher, *split, loader, B, T, eo),
                       doctest::Contains("micro_batches is 3, expected a divisor of the batch of 4 sequences"), lwcl::error);
}

TEST_CASE("end-to-end KD reads a fresh batch every step, or cycles over cycle_batches of them") {
  setup su;
  const index_t B = 2, T = 8;
  const data::batch_loader loader(*su.shard, B, T, 77);
  for (const long cycle : {0L, 3L}) {
    CAPTURE(cycle);
    auto kd_student = prune::apply_plan(*su.student, prune::keep_all(su.student->config()));
    distill::e2e_options eo;
    eo.steps = 7;
    eo.first_batch = 10;
    eo.cycle_batches = cycle;
    eo.progress_bar = false;
    const auto path = su.dir / ("cycle_" + std::to_string(cycle) + ".jsonl");
    distill::e2e_result res;
    {
      metrics_writer m(path.string());
      res = distill::train_e2e_kd(*su.teacher, *kd_student, loader, B, T, eo, &m);
    }
    // Model FLOPs: per step the teacher's forward and the student's forward and backward (three forwards).
    CHECK(res.flops == 7 * static_cast<double>(B * T) *
                           (prune::flops_per_token(su.cfg, T) + 3 * prune::flops_per_token(kd_student->config(), T)));
    CHECK(res.cpu_seconds > 0);
    std::ifstream in(path);
    std::string line;
    std::vector<long> batches;
    while (std::getline(in, line)) batches.push_back(nlohmann::json::parse(line).at("batch").get<long>());
    CHECK(batches == (cycle ? std::vector<long>{10, 11, 12, 10, 11, 12, 10} : std::vector<long>{10, 11, 12, 13, 14, 15, 16}));
  }
  auto kd_student = prune::apply_plan(*su.student, prune::keep_all(su.student->config()));
  distill::e2e_options bad;
  bad.cycle_batches = -1;
  CHECK_THROWS_WITH_AS(distill::train_e2e_kd(*su.teacher, *kd_student, loader, B, T, bad), doctest::Contains("cycle_batches"),
                       lwcl::error);
}

TEST_CASE("end-to-end KD's warm-up: each step's rate in its record, rising linearly to lr, then the cosine down to "
          "min_lr; a seconds budget keeps the warm-up") {
  setup su;
  const index_t B = 2, T = 8;
  const data::batch_loader loader(*su.shard, B, T, 5);
  auto rates = [&](const distill::e2e_options& eo, const std::string& name) {
    auto kd_student = prune::apply_plan(*su.student, prune::keep_all(su.student->config()));
    const auto path = su.dir / (name + ".jsonl");
    {
      metrics_writer m(path.string());
      distill::train_e2e_kd(*su.teacher, *kd_student, loader, B, T, eo, &m);
    }
    std::ifstream in(path);
    std::string line;
    std::vector<double> lr;
    while (std::getline(in, line)) lr.push_back(nlohmann::json::parse(line).at("lr").get<double>());
    return lr;
  };
  distill::e2e_options eo;
  eo.progress_bar = false;
  eo.steps = 8;
  eo.lr = 2e-3;
  eo.min_lr = 2e-4;
  eo.warmup_steps = 4;
  const auto lr = rates(eo, "warmup");
  REQUIRE(lr.size() == 8);
  for (int s = 1; s <= 4; ++s) CHECK(lr[static_cast<std::size_t>(s - 1)] == doctest::Approx(2e-3 * s / 4.0).epsilon(1e-12));
  // Past the warm-up, cosine from lr at step 4 to min_lr at step 8: step 6 is half way.
  CHECK(lr[5] == doctest::Approx(2e-4 + 0.5 * (2e-3 - 2e-4)).epsilon(1e-12));
  CHECK(lr[7] == doctest::Approx(2e-4).epsilon(1e-12));
  eo.warmup_steps = 0;
  const auto plain = rates(eo, "plain");
  REQUIRE(plain.size() == 8);
  CHECK(plain[0] < 2e-3);  // no warm-up: the cosine's first step, just below the peak
  CHECK(plain[0] > 1.9e-3);
  // Under a seconds budget the schedule is refitted at step 4; the warm-up is kept whatever the fit says.
  eo.steps = 1000000;
  eo.time_budget_seconds = 0.5;
  eo.warmup_steps = 6;
  const auto timed = rates(eo, "timed");
  REQUIRE(timed.size() >= 6);
  for (int s = 1; s <= 6; ++s) CHECK(timed[static_cast<std::size_t>(s - 1)] == doctest::Approx(2e-3 * s / 6.0).epsilon(1e-12));
  eo.warmup_steps = -1;
  auto kd_student = prune::apply_plan(*su.student, prune::keep_all(su.student->config()));
  CHECK_THROWS_WITH_AS(distill::train_e2e_kd(*su.teacher, *kd_student, loader, B, T, eo),
                       doctest::Contains("warmup_steps is -1, expected >= 0"), lwcl::error);
}

TEST_CASE("backward_logits with a hidden-state gradient equals finite differences of sum(h_L * w) (f64)") {
  setup su;
  auto& net = *su.student;
  const index_t B = 1, T = 6, C = net.config().d_model;
  std::vector<std::int32_t> ids = {1, 5, 9, 2, 7, 3};
  const tensor tok(ids.data(), {B, T});
  std::vector<double> w(static_cast<std::size_t>(B * T * C));
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = std::cos(0.53 * static_cast<double>(i));
  auto objective = [&]() {
    net.forward_logits(tok);
    const tensor h = net.last_hidden();
    double s = 0;
    for (std::size_t i = 0; i < w.size(); ++i) s += static_cast<const double*>(h.data)[i] * w[i];
    return s;
  };
  objective();
  net.zero_grad();
  net.backward_logits(tensor(), tensor(w.data(), {B, T, C}));
  int checked = 0;
  const double worst = worst_fd_error(net, objective, 41, checked);
  MESSAGE("backward_logits(dhidden) worst relative FD error ", worst, " over ", checked, " parameters");
  CHECK(checked > 20);
  CHECK(worst < 1e-5);
  CHECK_THROWS_WITH_AS(net.backward_logits(tensor(), tensor()), doctest::Contains("neither dlogits nor dhidden given"),
                       lwcl::error);
}

TEST_CASE("end-to-end KD budgets and bad input") {
  setup su;
  const index_t B = 2, T = 8;
  const data::batch_loader loader(*su.shard, B, T, 1);
  distill::e2e_options eo;
  eo.progress_bar = false;
  eo.time_budget_seconds = 1e-9;  // exhausted before the first step
  const auto r = distill::train_e2e_kd(*su.teacher, *su.student, loader, B, T, eo);
  CHECK(r.budget_exhausted);
  CHECK(r.tokens == 0);
  eo.time_budget_seconds = 0;
  eo.hidden_mse_weight = -1;
  CHECK_THROWS_WITH_AS(distill::train_e2e_kd(*su.teacher, *su.student, loader, B, T, eo),
                       doctest::Contains("hidden_mse_weight is -1, expected >= 0"), lwcl::error);
  eo.hidden_mse_weight = 0;
  eo.steps = 5;
  static_cast<double*>(su.student->param("norm_f.weight").data)[0] = std::nan("");  // a poisoned student
  CHECK_THROWS_WITH_AS(distill::train_e2e_kd(*su.teacher, *su.student, loader, B, T, eo),
                       doctest::Contains("train_e2e_kd: stopped at step"), lwcl::error);
}

TEST_CASE("first_reaching: the first point at or below the target, its cost interpolated from the point before") {
  using distill::curve_point;
  const std::vector<curve_point> c = {{0, 0.0, 0.0, 0.0, 50.0}, {10, 2.0, 4.0, 100.0, 40.0}, {20, 4.0, 8.0, 200.0, 30.0},
                                      {30, 6.0, 12.0, 300.0, 32.0}};
  const auto at35 = distill::first_reaching(c, 35.0);  // halfway from 40 to 30
  REQUIRE(at35.has_value());
  CHECK(at35->seconds == doctest::Approx(3.0));
  CHECK(at35->cpu_seconds == doctest::Approx(6.0));
  CHECK(at35->flops == doctest::Approx(150.0));
  CHECK(at35->step == 15);
  CHECK(at35->ppl == 35.0);
  CHECK(distill::first_reaching(c, 40.0)->seconds == 2.0);  // a point on the target: that point
  CHECK(distill::first_reaching(c, 60.0)->flops == 0.0);    // reached before any training
  CHECK_FALSE(distill::first_reaching(c, 29.0).has_value());
  CHECK_FALSE(distill::first_reaching({}, 29.0).has_value());
  // After a rise, the first point back at the target is the one that counts, interpolated from the rise.
  const std::vector<curve_point> r = {{0, 0.0, 0.0, 0.0, 50.0}, {10, 1.0, 1.0, 10.0, 60.0}, {20, 2.0, 2.0, 20.0, 40.0}};
  CHECK(distill::first_reaching(r, 45.0)->seconds == doctest::Approx(1.75));
}

TEST_CASE("end-to-end KD's quality curve: the probe before the first step, every eval_every steps and at the end, its "
          "time and memory in no figure") {
  setup su;
  const index_t B = 2, T = 8;
  const data::batch_loader loader(*su.shard, B, T, 5);
  auto kd_student = prune::apply_plan(*su.student, prune::keep_all(su.student->config()));
  distill::e2e_options eo;
  eo.steps = 7;
  eo.eval_every = 3;
  eo.progress_bar = false;
  std::vector<double> probed;
  eo.probe = [&] {
    // What an evaluation holds (a model copy, its activations) must not count in the trainer's peak.
    buffer<backend::cpu> scratch(su.be, std::size_t(8) << 20);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const auto* w = static_cast<const double*>(kd_student->params().data);
    double sum = 0;
    for (index_t i = 0; i < kd_student->params().numel(); ++i) sum += w[i] * w[i];
    probed.push_back(sum);
    return 10.0 + static_cast<double>(probed.size());
  };
  const auto r = distill::train_e2e_kd(*su.teacher, *kd_student, loader, B, T, eo);
  REQUIRE(r.curve.size() == 4);
  const std::vector<long> steps = {0, 3, 6, 7};
  const double step_flops = static_cast<double>(B * T) * (prune::flops_per_token(su.cfg, T) +
                                                          3 * prune::flops_per_token(kd_student->config(), T));
  for (std::size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(r.curve[i].step == steps[i]);
    CHECK(r.curve[i].flops == static_cast<double>(steps[i]) * step_flops);
    CHECK(r.curve[i].ppl == 11.0 + static_cast<double>(i));
  }
  CHECK(probed[0] != probed[1]);  // the probe saw the student as it trained
  CHECK(probed[2] != probed[3]);
  // Four evaluations of at least 100 ms each are in eval_seconds and not in the training's seconds.
  CHECK(r.eval_seconds >= 0.4);
  CHECK(r.curve.back().seconds <= r.seconds);
  CHECK(r.seconds + r.eval_seconds >= 0.4);
  CHECK(r.peak_compute_bytes == r.declared_compute_bytes);
  eo.eval_every = -1;
  CHECK_THROWS_WITH_AS(distill::train_e2e_kd(*su.teacher, *kd_student, loader, B, T, eo), doctest::Contains("eval_every is -1"),
                       lwcl::error);
}
