// distill::pipeline: a student equal to its teacher has zero local losses and keeps its weights; the
// cached boundary features are the teacher's own hidden states and one whole-model segment's gradient
// equals the end-to-end hidden-MSE gradient; a run stopped at a random step resumes to bitwise the same
// student; the memory tracker's peak in a visit equals what the visit declares; the curriculum and
// cache policies steer the run; budgets and bad input fail clearly.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/rng.hpp"
#include "lwcl/cache/disk_store.hpp"
#include "lwcl/distill/pipeline.hpp"
#include "lwcl/policies/bundle.hpp"
#include "lwcl/ops/distill_loss.hpp"
#include "lwcl/optim/schedule.hpp"
#include "lwcl/policies/cache/compressed.hpp"
#include "lwcl/policies/cache/disk.hpp"
#include "lwcl/policies/cache/host.hpp"
#include "lwcl/policies/curriculum/curriculum.hpp"
#include "lwcl/policies/curriculum/doubling.hpp"
#include "lwcl/policies/curriculum/easy_to_hard.hpp"
#include "lwcl/policies/curriculum/ramp.hpp"
#include "lwcl/policies/curriculum/student_inputs.hpp"
#include "lwcl/policies/curriculum/teacher_inputs.hpp"
#include "lwcl/policies/curriculum/two_stage.hpp"
#include "lwcl/policies/loss/mse.hpp"
#include "lwcl/policies/pruning/magnitude.hpp"
#include "lwcl/policies/segmentation/balanced_difficulty.hpp"
#include "lwcl/policies/segmentation/explicit_boundaries.hpp"
#include "lwcl/policies/segmentation/memory_budget.hpp"
#include "lwcl/policies/segmentation/uniform.hpp"
#include "lwcl/prune/surgery.hpp"
#include "pruned_fixture.hpp"

using namespace lwcl;
namespace fs = std::filesystem;
namespace pol = lwcl::policies;

namespace {

using net_t = model::transformer<backend::cpu>;

struct setup {
  backend::cpu be;
  model::model_config cfg = test::pruned_fixture_config(4);
  dtype type;
  std::vector<double> teacher_params;
  std::unique_ptr<net_t> student;  // pruned: half the FFN channels, one of two KV groups
  fs::path dir;
  std::unique_ptr<data::shard> shard;

  explicit setup(dtype t, const char* name) : type(t) {
    net_t teacher(be, cfg, t);
    test::init_scaled_teacher(teacher);
    teacher_params = prune::detail::host_params(teacher);
    student = prune::apply_plan(teacher, test::half_plan(cfg));
    dir = fs::temp_directory_path() / name;
    fs::remove_all(dir);
    fs::create_directories(dir);
    test::write_markov_shard(dir / "train.bin");
    shard = std::make_unique<data::shard>((dir / "train.bin").string());
  }
  ~setup() { fs::remove_all(dir); }

  std::unique_ptr<net_t> teacher() {
    auto t = std::make_unique<net_t>(be, cfg, type);
    prune::detail::set_host_params(*t, teacher_params);
    return t;
  }
  // What the pipeline loads: the teacher built frozen, as the programs load it (no gradient buffer).
  auto source() {
    return [this] {
      auto t = std::make_unique<net_t>(be, cfg, type, model::frozen);
      prune::detail::set_host_params(*t, teacher_params);
      return t;
    };
  }
  distill::student_state pruned() const { return distill::student_state::of(*student); }

  // Mean KL(teacher || student) of the next-token distributions on held-out batches 1000..1003.
  double held_out_kl(const distill::student_state& s, const data::batch_loader& loader) {
    auto t = teacher();
    auto net = s.to_transformer(be);
    const index_t B = loader.batch_size(), T = loader.seq_len();
    std::vector<std::int32_t> ids, targets;
    std::vector<double> tl(static_cast<std::size_t>(B * T * 48)), sc(static_cast<std::size_t>(2 * B * T));
    double total = 0;
    for (int k = 0; k < 4; ++k) {
      loader.batch(1000 + static_cast<std::uint64_t>(k), ids, targets);
      const tensor tok(ids.data(), {B, T});
      const tensor tlog = t->forward_logits(tok);
      ops::dispatch_float("test", type, [&](auto z) {
        using E = decltype(z);
        for (std::size_t i = 0; i < tl.size(); ++i) tl[i] = static_cast<double>(static_cast<const E*>(tlog.data)[i]);
      });
      const tensor slog = net->forward_logits(tok);
      std::vector<double> sl(tl.size());
      ops::dispatch_float("test", type, [&](auto z) {
        using E = decltype(z);
        for (std::size_t i = 0; i < sl.size(); ++i) sl[i] = static_cast<double>(static_cast<const E*>(slog.data)[i]);
      });
      total += ops::logit_kl_loss(be, tensor(), tensor(sc.data(), {2 * B * T}), tensor(sl.data(), {B, T, 48}),
                                  tensor(tl.data(), {B, T, 48}));
    }
    return total / 4;
  }
};

distill::pipeline_options quiet(double steps) {
  distill::pipeline_options o;
  o.total = {distill::budget_unit::steps, steps};
  o.progress_bar = false;
  o.log = nullptr;
  o.feature_batches = 3;
  o.lr = 3e-3;
  o.min_lr = 3e-4;
  o.checkpoint_every = 0;
  o.save_student = false;
  return o;
}

const std::vector<index_t> identity4 = model::identity_boundaries(4);

// A segmentation policy that leaves layer 1 out.
struct gappy {
  static constexpr std::string_view name = "gappy";
  std::vector<pol::segment> segments(const model::model_config&) const { return {{0, 1}, {2, 4}}; }
};

}  // namespace

TEST_CASE("pipeline: a student equal to its teacher has zero local losses and keeps its weights, on every cache tier") {
  setup su(dtype::f32, "lwcl_test_pipeline_identity");
  const data::batch_loader loader(*su.shard, 2, 8, 3);
  auto run = [&](auto cache) {
    CAPTURE(decltype(cache)::name);
    auto bundle = make_policies(slot<key::pruning>(pol::pruning::magnitude_l2{}), slot<key::cache>(cache));
    auto student = distill::student_state::of(*su.teacher());
    const auto before = student.params;
    auto pipe = distill::make_pipeline(su.be, bundle, quiet(16));  // two_stage: 8 visits of 2 steps
    const auto r = pipe.run(su.source(), student, identity4, loader, su.dir / "run_identity");
    REQUIRE(r.visits.size() == 8);
    for (const auto& v : r.visits) {
      CAPTURE(v.phase);
      CAPTURE(v.first);
      CHECK(v.steps == 2);
      CHECK(v.loss_first == 0.0);
      CHECK(v.loss_last == 0.0);
    }
    CHECK(student.params == before);
    CHECK(r.cache.hit_rate() == 1.0);
    CHECK(r.cache.misses == 0);
    fs::remove_all(su.dir / "run_identity");
  };
  run(pol::cache::host{});
  run(pol::cache::disk{});
  run(pol::cache::compressed<pol::cache::host, codec::exponent_codec>{});
  run(pol::cache::compressed<pol::cache::disk, codec::zstd_codec>{});
}

TEST_CASE("pipeline: end_exact_visits ends a teacher-input visit with nothing to learn after its first step") {
  setup su(dtype::f32, "lwcl_test_pipeline_exact");
  const data::batch_loader loader(*su.shard, 2, 8, 3);
  auto bundle = make_policies(slot<key::pruning>(pol::pruning::magnitude_l2{}), slot<key::cache>(pol::cache::host{}));
  // The teacher with layer 2 changed: on the teacher's inputs every other layer reproduces its target exactly.
  auto student = distill::student_state::of(*su.teacher());
  const auto w = static_cast<std::size_t>(student.layout.find("layers.2.norm1.weight").offset);
  for (index_t c = 0; c < student.config.d_model; ++c) student.params[w + static_cast<std::size_t>(c)] *= 1.5;
  auto o = quiet(16);  // two_stage: 8 visits of 2 steps planned
  o.end_exact_visits = true;
  auto pipe = distill::make_pipeline(su.be, bundle, o);
  const auto r = pipe.run(su.source(), student, identity4, loader, su.dir / "run_exact");
  REQUIRE(r.visits.size() == 8);
  int exact = 0;
  for (const auto& v : r.visits) {
    CAPTURE(v.phase);
    CAPTURE(v.first);
    const bool teacher_inputs = v.student_fraction_first <= 0;
    const bool changed = v.first <= 2 && 2 < v.last;
    CHECK(v.exact == (teacher_inputs && !changed));
    CHECK(v.steps == (v.exact ? 1 : 2));
    CHECK(v.planned_steps == 2);
    if (v.exact) CHECK(v.loss_first == 0.0);
    if (teacher_inputs && changed) CHECK(v.loss_first > 0.0);
    CHECK(distill::visit_report::from_json(v.to_json()).exact == v.exact);
    exact += v.exact ? 1 : 0;
  }
  CHECK(exact == 3);  // layers 0, 1 and 3 on the teacher's inputs
  CHECK(r.segment_steps == 13);
  CHECK_FALSE(r.budget_exhausted);
  fs::remove_all(su.dir / "run_exact");
}

TEST_CASE("pipeline: cached features are the teacher's hidden states; one whole-model segment's gradient is the "
          "end-to-end hidden-MSE gradient (f64)") {
  setup su(dtype::f64, "lwcl_test_pipeline_gradient");
  const index_t B = 2, T = 8, C = su.cfg.d_model;
  const data::batch_loader loader(*su.shard, B, T, 4);
  using whole = pol::curriculum::curriculum<pol::curriculum::front_to_back, pol::curriculum::teacher_inputs>;
  auto bundle = make_policies(slot<key::pruning>(pol::pruning::magnitude_l2{}),
                              slot<key::segmentation>(pol::segmentation::uniform<4>{}), slot<key::curriculum>(whole{}),
                              slot<key::cache>(pol::cache::disk{}), slot<key::loss>(pol::loss::mse{}));
  auto student = su.pruned();
  const auto pruned = student;
  auto pipe = distill::make_pipeline(su.be, bundle, quiet(1));
  const auto r = pipe.run(su.source(), student, identity4, loader, su.dir / "run");
  REQUIRE(r.visits.size() == 1);
  CHECK(r.visits[0].first == 0);
  CHECK(r.visits[0].last == 4);

  // The teacher's own h_0 (embedding output) and h_L (last block output) for batch 0.
  std::vector<std::int32_t> ids, targets;
  loader.batch(0, ids, targets);
  const tensor tok(ids.data(), {B, T});
  auto teacher = su.teacher();
  teacher->forward_logits(tok);
  const auto* hl = static_cast<const double*>(teacher->last_hidden().data);
  const std::vector<double> h_last(hl, hl + B * T * C);
  std::vector<double> h_first(static_cast<std::size_t>(B * T * C));
  ops::embedding_forward(su.be, tensor(h_first.data(), {B, T, C}), tok, teacher->param("wte"), tensor());

  lwcl::cache::disk_store disk(su.dir / "run" / "features");
  std::vector<double> c0(h_first.size()), cL(h_first.size());
  disk.read({0, lwcl::cache::source::teacher, 0}, std::as_writable_bytes(std::span<double>(c0)));
  disk.read({4, lwcl::cache::source::teacher, 0}, std::as_writable_bytes(std::span<double>(cL)));
  CHECK(c0 == h_first);
  CHECK(cL == h_last);

  // The layer-wise gradient: one segment over all layers, teacher input h_0, target h_L, MSE.
  distill::segment_trainer<backend::cpu, pol::loss::mse> seg(su.be, pruned.config, 0, 4, pruned.layout, pruned.params,
                                                            dtype::f64, {});
  seg.compute_gradients(tensor(c0.data(), {B, T, C}), tensor(cL.data(), {B, T, C}));
  // The end-to-end one: the pruned student from its tokens, MSE of its last hidden state against h_L.
  auto net = pruned.to_transformer(su.be);
  net->forward_logits(tok);
  std::vector<double> dh(h_last.size(), 0.0), scratch(static_cast<std::size_t>(2 * B * T));
  ops::mse_loss(su.be, tensor(dh.data(), {B, T, C}), tensor(scratch.data(), {2 * B * T}), net->last_hidden(),
                tensor(h_last.data(), {B, T, C}));
  net->zero_grad();
  net->backward_logits(tensor(), tensor(dh.data(), {B, T, C}));
  double worst = 0, largest = 0;
  for (const auto& e : seg.layout().entries()) {
    const auto& d = net->layout().find(e.name);
    for (index_t i = 0; i < e.shape.numel(); ++i) {
      const double a = static_cast<const double*>(seg.grads().data)[e.offset + i];
      const double b = static_cast<const double*>(net->grads().data)[d.offset + i];
      worst = std::max(worst, std::abs(a - b));
      largest = std::max(largest, std::abs(b));
    }
  }
  MESSAGE("layer-wise vs end-to-end hidden-MSE gradient: max abs difference ", worst, " (largest entry ", largest, ")");
  CHECK(largest > 1e-3);
  CHECK(worst <= 1e-13 * largest);
}

namespace {

// Runs `bundle` uninterrupted, then stopped at `trials` random segment steps and resumed, each in its own
// directory; the resumed students, visit losses, steps and tokens must be bitwise the uninterrupted ones.
// metrics.jsonl without its timings: per record the event or step, where in the curriculum, and the
// loss. Teacher passes and student-feature refreshes are left out: they are work a process does for
// its own cache, so a resumed process makes them where its cache lacks current features.
std::vector<std::string> metrics_outline(const fs::path& run) {
  std::vector<std::string> out;
  std::istringstream in(read_text(run / "metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.value("event", "") == "teacher_pass" || j.value("event", "") == "refresh") continue;
    nlohmann::json o;
    for (const char* k : {"event", "global_step", "kd_step", "step", "phase", "position", "boundary", "loss"})
      if (j.contains(k)) o[k] = j[k];
    out.push_back(o.dump());
  }
  return out;
}

template <class Bundle>
distill::pipeline_result check_resume(setup& su, const Bundle& bundle, const distill::pipeline_options& opts,
                                      const data::batch_loader& loader, const std::string& tag, int trials,
                                      std::uint64_t seed) {
  auto full = su.pruned();
  const auto a = distill::make_pipeline(su.be, bundle, opts).run(su.source(), full, identity4, loader, su.dir / (tag + "a"));
  CHECK(full.params != su.pruned().params);
  philox_stream pick{seed, 0};
  for (int trial = 0; trial < trials; ++trial) {
    const long stop = 1 + static_cast<long>(pick.bits(static_cast<std::uint64_t>(trial)) % static_cast<std::uint64_t>(a.segment_steps - 1));
    CAPTURE(tag);
    CAPTURE(stop);
    const fs::path run = su.dir / (tag + "b" + std::to_string(trial));
    auto halted = opts;
    halted.halt_after_steps = stop;
    auto part = su.pruned();
    CHECK_THROWS_AS(distill::make_pipeline(su.be, bundle, halted).run(su.source(), part, identity4, loader, run),
                    distill::pipeline_halted);
    const bool had_checkpoint = fs::exists(run / "checkpoints" / "latest");  // none when stopped before the first
    auto resumed = su.pruned();
    const auto b = distill::make_pipeline(su.be, bundle, opts).run(su.source(), resumed, identity4, loader, run);
    CHECK(b.resumed == had_checkpoint);
    CHECK(resumed.params == full.params);
    REQUIRE(b.visits.size() == a.visits.size());
    for (std::size_t i = 0; i < a.visits.size(); ++i) {
      CHECK(b.visits[i].first == a.visits[i].first);
      CHECK(b.visits[i].last == a.visits[i].last);
      CHECK(b.visits[i].loss_first == a.visits[i].loss_first);
      CHECK(b.visits[i].loss_last == a.visits[i].loss_last);
    }
    CHECK(b.segment_steps == a.segment_steps);
    CHECK(b.kd_steps == a.kd_steps);
    CHECK(b.tokens == a.tokens);
    // Every record once, in order: steps, and events (difficulty, refresh, visit) written between the
    // last checkpoint and the stop, which the resumed run writes again.
    const auto got = metrics_outline(run), want = metrics_outline(su.dir / (tag + "a"));
    std::size_t same = 0;
    while (same < got.size() && same < want.size() && got[same] == want[same]) ++same;
    CAPTURE(same);
    CHECK(got.size() == want.size());
    if (same < std::min(got.size(), want.size())) CHECK(got[same] == want[same]);
  }
  return a;
}

}  // namespace

TEST_CASE("pipeline: a run stopped at a random step resumes to bitwise the same student") {
  setup su(dtype::f32, "lwcl_test_pipeline_resume");
  const data::batch_loader loader(*su.shard, 2, 8, 5);
  // All three curriculum axes, segments growing 1 -> 2 -> 4 layers, closed by logit KD; features on disk.
  using lwcl_curriculum = pol::curriculum::curriculum<pol::curriculum::easy_to_hard, pol::curriculum::ramp,
                                                      pol::curriculum::doubling>;
  lwcl_curriculum cur;
  cur.inputs = {1, 4};
  cur.growth.final_kd = true;
  auto bundle = make_policies(slot<key::pruning>(pol::pruning::magnitude_l2{}), slot<key::curriculum>(cur),
                              slot<key::cache>(pol::cache::compressed<pol::cache::disk, codec::exponent_codec>{}));
  auto opts = quiet(70);  // 7 visits of 8 steps, 14 KD steps
  opts.checkpoint_every = 3;
  opts.save_student = true;
  const auto a = check_resume(su, bundle, opts, loader, "lwcl_", 2, 77);
  REQUIRE(a.visits.size() == 7);
  CHECK(a.segment_steps == 56);
  CHECK(a.kd_steps == 14);
  CHECK(a.tokens == 70 * 16);
  CHECK(fs::exists(su.dir / "lwcl_a" / "student" / "model.safetensors"));

  // Segments from measured layer difficulties, visited easy to hard, host cache: the resumed run must
  // segment and order as the interrupted one did, not re-measure on weights trained since.
  auto balanced = make_policies(
      slot<key::pruning>(pol::pruning::magnitude_l2{}), slot<key::curriculum>(pol::curriculum::two_stage<pol::curriculum::easy_to_hard>{}),
      slot<key::segmentation>(pol::segmentation::balanced_difficulty{.n_segments = 2}));
  auto bopts = quiet(40);
  bopts.checkpoint_every = 4;
  check_resume(su, balanced, bopts, loader, "balanced_", 2, 78);

  // Resuming with other settings is refused; a fresh start in the same directory clears the old cache.
  auto other = opts;
  other.total = {distill::budget_unit::steps, 84};
  auto again = su.pruned();
  CHECK_THROWS_WITH_AS(distill::make_pipeline(su.be, bundle, other).run(su.source(), again, identity4, loader, su.dir / "lwcl_a"),
                       doctest::Contains("was made with budget = \"70 steps\", this run has \"84 steps\""), lwcl::error);
  const data::batch_loader shifted(*su.shard, 2, 8, 6);
  CHECK_THROWS_WITH_AS(distill::make_pipeline(su.be, bundle, opts).run(su.source(), again, identity4, shifted, su.dir / "lwcl_a"),
                       doctest::Contains("was made with feature_tokens_hash"), lwcl::error);
  auto fresh = opts;
  fresh.resume = false;
  const auto c = distill::make_pipeline(su.be, bundle, fresh).run(su.source(), again, identity4, shifted, su.dir / "lwcl_a");
  CHECK_FALSE(c.resumed);
  CHECK(c.teacher_loaded);  // the disk cache of the earlier run was cleared, not reused
}

TEST_CASE("pipeline: recovery lowers the held-out KL; the tracker's peak in every visit is what the visit declares") {
  setup su(dtype::f32, "lwcl_test_pipeline_recovery");
  const data::batch_loader loader(*su.shard, 4, 16, 77);
  auto student = su.pruned();
  const double pruned_kl = su.held_out_kl(student, loader);
  auto bundle = make_policies(slot<key::pruning>(pol::pruning::magnitude_l2{}));  // the default two-stage bundle
  auto opts = quiet(320);
  opts.feature_batches = 6;
  for (std::uint64_t i = 3000; i < 3000 + 2 * 4 * 16 + 1; ++i) opts.validation_ids.push_back((*su.shard)[i]);
  const auto r = distill::make_pipeline(su.be, bundle, opts).run(su.source(), student, identity4, loader, su.dir / "run");
  const double kl = su.held_out_kl(student, loader);
  MESSAGE("held-out KL(teacher || student): pruned ", pruned_kl, ", after the pipeline ", kl);
  CHECK(kl < 0.8 * pruned_kl);
  REQUIRE(r.visits.size() == 8);
  for (const auto& v : r.visits) {
    CAPTURE(v.phase);
    CAPTURE(v.first);
    CHECK(v.steps == 40);
    CHECK(v.loss_last < v.loss_first);
    CHECK(v.tracker_bytes == v.compute_bytes + v.staging_bytes);
    CHECK(v.staging_bytes > 0);
  }
  CHECK(r.visits[0].inputs == "teacher_inputs");
  CHECK(r.visits[4].inputs == "student_inputs");
  // One layer resident: far less than the student with gradients and AdamW moments.
  CHECK(r.peak_compute_bytes < 4 * student.params.size() * sizeof(float));

  // No teacher byte is resident while a segment trains: at every step the tracker's compute bytes
  // (cache and staging left out) are the visit's declared bytes plus what this test holds (the pruned
  // student), and nothing else.
  const std::size_t held = su.student->resident_bytes();
  std::ifstream metrics(su.dir / "run" / "metrics.jsonl");
  std::string line;
  long steps_seen = 0;
  while (std::getline(metrics, line)) {
    const auto j = nlohmann::json::parse(line);
    if (!j.contains("global_step")) continue;
    const auto& v = r.visits[static_cast<std::size_t>(steps_seen / 40)];
    CHECK(j.at("first").get<index_t>() == v.first);
    CHECK(j.at("memory").at("compute").get<std::size_t>() == v.compute_bytes + held);
    ++steps_seen;
  }
  CHECK(steps_seen == 320);
  // The whole run's compute peak includes the teacher pass: the teacher resident, frozen (no gradient
  // buffer); what the test held before the run (its student model) is left out, as end-to-end KD leaves it.
  const std::size_t teacher_bytes = su.teacher()->params().bytes();
  MESSAGE("compute peak: segments ", r.peak_compute_bytes, " B, whole run ", r.run_peak_compute_bytes, " B (teacher ",
          teacher_bytes, " B; held by the test, left out, ", held, " B); total with the cache ", r.run_peak_total_bytes,
          " B; peak resident set ", r.peak_resident_bytes, " B");
  CHECK(r.run_peak_compute_bytes >= teacher_bytes);
  CHECK(r.run_peak_compute_bytes < 2 * teacher_bytes);
  // The total peaks when compute and cache together do: at least each one's peak, at most their sum (the
  // cache's peak comes after the teacher pass's, once student features are stored beside the teacher's).
  CHECK(r.run_peak_total_bytes >= std::max<std::size_t>(r.run_peak_compute_bytes, r.cache.store.peak_stored_bytes));
  CHECK(r.run_peak_total_bytes <= r.run_peak_compute_bytes + r.peak_cache_bytes);
  CHECK(r.peak_resident_bytes > r.run_peak_total_bytes);
  CHECK(r.cache.store.peak_stored_bytes > 0);
  CHECK_FALSE(r.budget_exhausted);
  for (const char* f : {"config.json", "metrics.jsonl", "report.json", "loss_curves.png", "memory.png", "cumulative_error.png"}) {
    CAPTURE(f);
    CHECK(fs::exists(su.dir / "run" / f));
  }
  // Evaluation on held-out tokens: perplexity with its protocol, and the error curve before and after.
  CHECK(r.val_ppl > 1);
  CHECK(r.val_protocol.find("seq_len=16") != std::string::npos);
  REQUIRE(r.cumulative_error.size() == 4);
  REQUIRE(r.cumulative_error_before.size() == 4);
  for (std::size_t l = 0; l < 4; ++l) CHECK(r.cumulative_error[l] < r.cumulative_error_before[l]);
  const auto rep = nlohmann::json::parse(read_text(su.dir / "run" / "report.json"));
  CHECK(rep.at("val_ppl").get<double>() == r.val_ppl);
  CHECK(rep.at("visits").size() == 8);
}

TEST_CASE("pipeline: the quality curve, before the first visit, after every visit and through the final KD stage, "
          "changes nothing and counts in no figure") {
  setup su(dtype::f32, "lwcl_test_pipeline_curve");
  const data::batch_loader loader(*su.shard, 2, 8, 5);
  using grown = pol::curriculum::curriculum<pol::curriculum::easy_to_hard, pol::curriculum::ramp, pol::curriculum::doubling>;
  grown cur;
  cur.inputs = {1, 4};
  cur.growth.final_kd = true;
  auto bundle = make_policies(slot<key::pruning>(pol::pruning::magnitude_l2{}), slot<key::curriculum>(cur));
  auto plain_opts = quiet(70);  // 7 visits of 8 steps, 14 KD steps
  auto plain = su.pruned();
  const auto r0 = distill::make_pipeline(su.be, bundle, plain_opts).run(su.source(), plain, identity4, loader, su.dir / "plain");

  auto opts = quiet(70);
  opts.eval_every = 5;
  std::vector<double> seen;
  opts.probe = [&](const distill::student_state& s) {
    buffer<backend::cpu> scratch(su.be, std::size_t(64) << 20);  // an evaluation's buffers: in no peak
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    double sum = 0;
    for (const double w : s.params) sum += w * w;
    seen.push_back(sum);
    return 100.0 - static_cast<double>(seen.size());
  };
  auto probed = su.pruned();
  const auto r = distill::make_pipeline(su.be, bundle, opts).run(su.source(), probed, identity4, loader, su.dir / "probed");
  CHECK(probed.params == plain.params);  // bitwise: the probe only looks
  CHECK(r.flops == r0.flops);
  CHECK(r.run_peak_compute_bytes == r0.run_peak_compute_bytes);
  CHECK(r.run_peak_total_bytes == r0.run_peak_total_bytes);
  CHECK(r.kd_peak_compute_bytes == r0.kd_peak_compute_bytes);
  REQUIRE(r.visits.size() == 7);
  REQUIRE(r.kd_steps == 14);
  // The pruned student, after each visit, after KD steps 5 and 10 and at the stage's end.
  const std::vector<long> steps = {0, 8, 16, 24, 32, 40, 48, 56, 61, 66, 70};
  REQUIRE(r.curve.size() == steps.size());
  for (std::size_t i = 0; i < steps.size(); ++i) {
    CAPTURE(i);
    CHECK(r.curve[i].step == steps[i]);
    CHECK(r.curve[i].ppl == 99.0 - static_cast<double>(i));
    if (i > 0) CHECK(r.curve[i].flops > r.curve[i - 1].flops);
    if (i > 0) CHECK(r.curve[i].seconds >= r.curve[i - 1].seconds);
  }
  CHECK(seen.front() != seen.back());
  CHECK(r.curve.back().flops == r.flops);
  // Eleven evaluations of at least 50 ms each: in eval_seconds, not in the run's seconds.
  CHECK(r.eval_seconds >= 0.55);
  CHECK(r.curve.back().seconds <= r.seconds);
  const auto rep = nlohmann::json::parse(read_text(su.dir / "probed" / "report.json"));
  CHECK(rep.at("curve").size() == steps.size());
  long eval_records = 0;
  std::ifstream metrics(su.dir / "probed" / "metrics.jsonl");
  std::string line;
  while (std::getline(metrics, line)) eval_records += nlohmann::json::parse(line).value("event", "") == "eval";
  CHECK(eval_records == static_cast<long>(steps.size()));
}

TEST_CASE("pipeline: the final KD stage in micro-batches: the same student within rounding, a smaller KD peak (f64)") {
  setup su(dtype::f64, "lwcl_test_pipeline_kd_micro");
  const data::batch_loader loader(*su.shard, 4, 8, 5);
  pol::curriculum::two_stage<> cur;
  cur.final_kd = true;
  auto bundle = make_policies(slot<key::pruning>(pol::pruning::magnitude_l2{}), slot<key::curriculum>(cur));
  const auto run = [&](index_t micro, const char* name) {
    auto opts = quiet(40);
    opts.final_kd_share = 0.25;
    opts.kd_micro_batches = micro;
    auto student = su.pruned();
    const auto r = distill::make_pipeline(su.be, bundle, opts).run(su.source(), student, identity4, loader, su.dir / name);
    return std::pair{student, r};
  };
  const auto [whole, rw] = run(1, "whole");
  const auto [split, rs] = run(4, "split");
  MESSAGE("KD peak: one batch of 4 ", rw.kd_peak_compute_bytes, " B, four micro-batches of 1 ", rs.kd_peak_compute_bytes, " B");
  REQUIRE(rw.kd_steps == 10);
  CHECK(rs.kd_steps == rw.kd_steps);
  CHECK(rs.segment_steps == rw.segment_steps);
  REQUIRE(whole.params.size() == split.params.size());
  double worst = 0, moved = 0;
  const auto pruned = su.pruned();
  for (std::size_t i = 0; i < whole.params.size(); ++i) {
    worst = std::max(worst, std::abs(whole.params[i] - split.params[i]));
    moved = std::max(moved, std::abs(whole.params[i] - pruned.params[i]));
  }
  CHECK(moved > 1e-3);    // the runs trained
  CHECK(worst < 1e-10);   // f64: the accumulated gradients differ in their rounding only
  CHECK(rs.kd_peak_compute_bytes < rw.kd_peak_compute_bytes);
  CHECK(rs.peak_compute_bytes == rw.peak_compute_bytes);  // the visits as they were
  const auto config = nlohmann::json::parse(read_text(su.dir / "split" / "config.json"));
  CHECK(config.at("options").at("kd_micro_batches") == 4);

  auto bad = quiet(40);
  bad.kd_micro_batches = 3;
  auto student = su.pruned();
  CHECK_THROWS_WITH_AS(distill::make_pipeline(su.be, bundle, bad).run(su.source(), student, identity4, loader, su.dir / "bad"),
                       doctest::Contains("kd_micro_batches is 3, expected a divisor of the batch of 4 sequences"), lwcl::error);
}

TEST_CASE("pipeline: the final KD stage with a hidden-state MSE term and a warm-up: the same visits, a larger first loss; the feature cache released before it (f64)") {
  setup su(dtype::f64, "lwcl_test_pipeline_kd_hidden");
  const data::batch_loader loader(*su.shard, 4, 8, 5);
  pol::curriculum::two_stage<> cur;
  cur.final_kd = true;
  auto bundle = make_policies(slot<key::pruning>(pol::pruning::magnitude_l2{}), slot<key::curriculum>(cur));
  const auto run = [&](double hidden, long warmup, const char* name) {
    auto opts = quiet(40);
    opts.final_kd_share = 0.25;
    opts.kd_hidden_mse = hidden;
    opts.kd_warmup_steps = warmup;
    auto student = su.pruned();
    const auto r = distill::make_pipeline(su.be, bundle, opts).run(su.source(), student, identity4, loader, su.dir / name);
    nlohmann::json kd, last_visit_step;
    std::vector<nlohmann::json> closing;  // the closing stage's step records
    std::ifstream metrics(su.dir / name / "metrics.jsonl");
    std::string line;
    while (std::getline(metrics, line)) {
      auto rec = nlohmann::json::parse(line);
      if (rec.value("event", "") == "final_kd") kd = rec;
      if (!rec.contains("global_step")) continue;
      if (rec.contains("stage"))
        closing.push_back(rec);
      else
        last_visit_step = rec;
    }
    // One step record a closing step, after the visits' on the run's step count and clock, each with
    // the tracker's bytes and the resident set; the stage's first loss is its summary's.
    REQUIRE(closing.size() == static_cast<std::size_t>(r.kd_steps));
    REQUIRE_FALSE(last_visit_step.is_null());
    double seconds = last_visit_step.at("seconds").get<double>();
    for (std::size_t i = 0; i < closing.size(); ++i) {
      const auto& c = closing[i];
      CHECK(c.at("stage") == "final_kd");
      CHECK(c.at("global_step").get<long>() == r.segment_steps + static_cast<long>(i) + 1);
      CHECK(c.at("seconds").get<double>() >= seconds);
      seconds = c.at("seconds").get<double>();
      CHECK(c.at("resident").get<double>() > 0);
      CHECK(c.at("memory").at("compute").get<double>() > 0);
    }
    if (!kd.is_null() && !closing.empty()) CHECK(closing.front().at("loss") == kd.at("loss_first"));
    CHECK(fs::exists(su.dir / name / "memory.png"));
    CHECK(fs::exists(su.dir / name / "loss_curves.png"));
    return std::tuple{student, r, kd};
  };
  const auto [plain, rp, kp] = run(0, 0, "plain");
  const auto [hidden, rh, kh] = run(0.5, 0, "hidden");
  const auto [warm, rw, kw] = run(0.5, 4, "warm");
  REQUIRE(rp.kd_steps == 10);
  REQUIRE_FALSE(kp.is_null());
  CHECK(rh.kd_steps == rp.kd_steps);
  CHECK(rh.segment_steps == rp.segment_steps);
  // The visits are the same, so the closing stage starts from the same student on the same batch: its
  // first loss is the logit KL plus half the hidden states' MSE, which is positive for a pruned student.
  const double kl = kp.at("loss_first").get<double>(), with_mse = kh.at("loss_first").get<double>();
  MESSAGE("closing stage's first loss: KL ", kl, ", KL + 0.5 MSE ", with_mse);
  CHECK(with_mse > kl + 1e-6);
  CHECK(kw.at("loss_first").get<double>() == doctest::Approx(with_mse).epsilon(1e-12));  // the warm-up changes the updates, not the first loss
  CHECK(kh.at("hidden_mse") == 0.5);
  // Nothing reads the cached features once the visits are done: the host cache is emptied before the
  // closing stage, and the tracker's host bytes fall by exactly what it held.
  REQUIRE(kp.contains("released"));
  const auto cache_released = kp.at("released").at("cache_bytes").get<std::size_t>();
  MESSAGE("feature cache released before the closing stage: ", cache_released, " B");
  CHECK(cache_released > 0);
  CHECK(kp.at("released").at("tracker_bytes").get<std::size_t>() == cache_released);
  CHECK(kw.at("warmup_steps") == 4);
  double moved_hidden = 0, moved_warm = 0;
  for (std::size_t i = 0; i < plain.params.size(); ++i) {
    moved_hidden = std::max(moved_hidden, std::abs(hidden.params[i] - plain.params[i]));
    moved_warm = std::max(moved_warm, std::abs(warm.params[i] - hidden.params[i]));
  }
  CHECK(moved_hidden > 1e-6);  // the MSE term's gradient changed the closing updates
  CHECK(moved_warm > 1e-6);    // and so did the warm-up's smaller first rates
  const auto config = nlohmann::json::parse(read_text(su.dir / "warm" / "config.json"));
  CHECK(config.at("options").at("kd_hidden_mse") == 0.5);
  CHECK(config.at("options").at("kd_warmup_steps") == 4);

  auto bad = quiet(40);
  bad.kd_hidden_mse = -1;
  auto student = su.pruned();
  CHECK_THROWS_WITH_AS(distill::make_pipeline(su.be, bundle, bad).run(su.source(), student, identity4, loader, su.dir / "bad"),
                       doctest::Contains("kd_hidden_mse is -1, expected >= 0"), lwcl::error);
}

TEST_CASE("pipeline: each visit restarts at cached batch 0, or, with running_batches, every step reads a batch of its own") {
  setup su(dtype::f32, "lwcl_test_pipeline_batches");
  const data::batch_loader loader(*su.shard, 2, 8, 77);
  auto bundle = make_policies(slot<key::pruning>(pol::pruning::magnitude_l2{}));  // two_stage: 8 visits
  for (const bool running : {false, true}) {
    CAPTURE(running);
    auto opts = quiet(32);  // 4 steps a visit
    opts.feature_batches = 32;
    opts.running_batches = running;
    auto student = su.pruned();
    const auto dir = su.dir / (running ? "running" : "per_visit");
    const auto r = distill::make_pipeline(su.be, bundle, opts).run(su.source(), student, identity4, loader, dir);
    std::ifstream metrics(dir / "metrics.jsonl");
    std::string line;
    std::vector<index_t> batches;
    // The model FLOPs the run reports, counted again from what it recorded: the teacher pass (every
    // cached batch through the teacher's 4 blocks), each refresh (every cached batch through the
    // student's blocks between the boundaries), each segment step (three forwards of its blocks).
    const double bt = 2 * 8, F = 32;
    double flops = F * bt * prune::layers_flops_per_token(su.cfg, 0, 4, 8);
    int refreshes = 0;
    while (std::getline(metrics, line)) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("global_step")) {
        batches.push_back(j.at("batch").get<index_t>());
        flops += 3 * bt * prune::layers_flops_per_token(student.config, j.at("first").get<index_t>(), j.at("last").get<index_t>(), 8);
      } else if (j.value("event", "") == "refresh") {
        flops += F * bt * prune::layers_flops_per_token(student.config, j.at("from").get<index_t>(), j.at("boundary").get<index_t>(), 8);
        ++refreshes;
      }
    }
    REQUIRE(batches.size() == 32);
    for (std::size_t i = 0; i < batches.size(); ++i) CHECK(batches[i] == static_cast<index_t>(running ? i : i % 4));
    CHECK(refreshes > 0);
    CHECK(r.flops == flops);
    CHECK(r.cpu_seconds > 0);
  }
}

TEST_CASE("pipeline: features uploaded a step ahead into a second set give bitwise the same student") {
  setup su(dtype::f32, "lwcl_test_pipeline_ahead");
  const data::batch_loader loader(*su.shard, 2, 8, 9);
  // A ramp, so steps read two features (teacher or student input, and the output) or three (both
  // inputs, mixed): the plan's items per step vary, and staged buffers are held across steps.
  using ramped = pol::curriculum::curriculum<pol::curriculum::front_to_back, pol::curriculum::ramp, pol::curriculum::doubling>;
  ramped cur;
  cur.inputs = {1, 3};
  auto bundle = make_policies(slot<key::pruning>(pol::pruning::magnitude_l2{}), slot<key::curriculum>(cur));
  auto opts = quiet(42);
  std::vector<distill::pipeline_result> runs;
  std::vector<distill::student_state> students;
  for (const bool ahead : {false, true}) {
    CAPTURE(ahead);
    opts.upload_ahead = ahead;
    students.push_back(su.pruned());
    runs.push_back(distill::make_pipeline(su.be, bundle, opts)
                       .run(su.source(), students.back(), identity4, loader, su.dir / (ahead ? "ahead" : "in_step")));
  }
  CHECK(students[1].params == students[0].params);
  CHECK(students[1].params != su.pruned().params);
  REQUIRE(runs[0].visits.size() == runs[1].visits.size());
  const std::size_t feature = 2 * 8 * su.cfg.d_model * sizeof(float);
  for (std::size_t i = 0; i < runs[0].visits.size(); ++i) {
    CAPTURE(i);
    const auto &a = runs[0].visits[i], &b = runs[1].visits[i];
    CHECK(b.loss_last == a.loss_last);
    CHECK(b.steps == a.steps);
    CHECK(b.compute_bytes == a.compute_bytes + 3 * feature);  // the second set
    CHECK(b.tracker_bytes == b.compute_bytes + b.staging_bytes);
  }
  CHECK(runs[1].cache.hits == runs[0].cache.hits);
}

TEST_CASE("pipeline: memory_budget's segments hold, in every visit, the compute bytes it counted for them") {
  setup su(dtype::f32, "lwcl_test_pipeline_memory_budget");
  const data::batch_loader loader(*su.shard, 2, 8, 13);
  const auto student0 = su.pruned();
  for (const bool ahead : {false, true}) {
    CAPTURE(ahead);
    const index_t sets = ahead ? 2 : 1;
    // A budget that fits the first two layers with the pipeline's feature buffers, and not three.
    const pol::segmentation::memory_budget probe{.budget_bytes = 1, .batch = 2, .seq = 8, .input_tensors = 3 * sets};
    const std::size_t budget = probe.memory_of(student0.config, {0, 2}).total();
    REQUIRE(probe.memory_of(student0.config, {0, 3}).total() > budget);
    auto bundle = make_policies(slot<key::pruning>(pol::pruning::magnitude_l2{}),
                                slot<key::segmentation>(pol::segmentation::memory_budget{.budget_bytes = budget}));
    auto opts = quiet(24);
    opts.upload_ahead = ahead;
    auto student = student0;
    const auto r = distill::make_pipeline(su.be, bundle, opts).run(su.source(), student, identity4, loader,
                                                                   su.dir / (ahead ? "ahead" : "in_step"));
    REQUIRE_FALSE(r.visits.empty());
    CHECK(r.visits[0].first == 0);
    CHECK(r.visits[0].last == 2);
    for (const auto& v : r.visits) {
      CAPTURE(v.first);
      CAPTURE(v.last);
      CHECK(v.compute_bytes <= budget);
      CHECK(v.compute_bytes == probe.memory_of(student0.config, {v.first, v.last}).total());
      CHECK(v.tracker_bytes == v.compute_bytes + v.staging_bytes);
    }
  }
}

TEST_CASE("pipeline: easy-to-hard orders visits by measured difficulty; balanced_difficulty gets measured layers") {
  setup su(dtype::f32, "lwcl_test_pipeline_order");
  const data::batch_loader loader(*su.shard, 2, 8, 6);
  using cur_t = pol::curriculum::two_stage<pol::curriculum::easy_to_hard>;
  auto bundle = make_policies(slot<key::pruning>(pol::pruning::magnitude_l2{}), slot<key::curriculum>(cur_t{}),
                              slot<key::segmentation>(pol::segmentation::balanced_difficulty{.n_segments = 2}));
  auto student = su.pruned();
  const auto r = distill::make_pipeline(su.be, bundle, quiet(8)).run(su.source(), student, identity4, loader, su.dir / "run");
  REQUIRE(r.visits.size() == 4);  // 2 segments x 2 phases
  CHECK(std::isfinite(r.visits[0].difficulty));
  CHECK(r.visits[0].difficulty <= r.visits[1].difficulty);
  CHECK(r.visits[2].first == 0);  // phase 2 is front to back
  // The segments are the ones balanced_difficulty makes of the layer difficulties the run measured.
  std::vector<double> layer_difficulty;
  std::istringstream metrics(read_text(su.dir / "run" / "metrics.jsonl"));
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.value("event", "") == "layer_difficulty") layer_difficulty = j.at("difficulty").get<std::vector<double>>();
  }
  REQUIRE(layer_difficulty.size() == 4);
  for (double d : layer_difficulty) CHECK(d > 0);
  const auto expected = pol::segmentation::balanced_difficulty{.n_segments = 2, .layer_difficulty = layer_difficulty}.segments(su.cfg);
  REQUIRE(expected.size() == 2);
  CHECK(r.visits[2].first == expected[0].first);
  CHECK(r.visits[2].last == expected[0].last);
  CHECK(r.visits[3].first == expected[1].first);
  CHECK(r.visits[3].last == expected[1].last);
}

TEST_CASE("pipeline: token and seconds budgets, and bad input") {
  setup su(dtype::f32, "lwcl_test_pipeline_bad");
  const data::batch_loader loader(*su.shard, 2, 8, 7);
  auto bundle = make_policies(slot<key::pruning>(pol::pruning::magnitude_l2{}));
  {
    auto opts = quiet(0);
    opts.total = distill::parse_budget("tokens:256");  // 16 tokens a step: 16 steps, 2 per visit
    auto student = su.pruned();
    const auto r = distill::make_pipeline(su.be, bundle, opts).run(su.source(), student, identity4, loader, su.dir / "tokens");
    CHECK(r.segment_steps == 16);
    CHECK(r.tokens == 256);
  }
  {
    auto opts = quiet(0);
    opts.total = distill::parse_budget("seconds:1e-6");  // spent by the teacher pass
    std::FILE* log = std::tmpfile();
    REQUIRE(log != nullptr);
    opts.log = log;
    auto student = su.pruned();
    const auto before = student.params;
    const auto r = distill::make_pipeline(su.be, bundle, opts).run(su.source(), student, identity4, loader, su.dir / "secs");
    CHECK(r.budget_exhausted);
    CHECK(r.segment_steps == 0);
    CHECK(student.params == before);
    std::rewind(log);
    std::string said;
    for (int c = std::fgetc(log); c != EOF; c = std::fgetc(log)) said.push_back(static_cast<char>(c));
    std::fclose(log);
    CHECK(said.find("was used up before any segment trained") != std::string::npos);
    CHECK(said.find("raise the budget") != std::string::npos);
  }
  {
    // A seconds budget with a closing KD stage: the visits share 80% of the time, KD gets the rest.
    pol::curriculum::curriculum<pol::curriculum::front_to_back, pol::curriculum::student_inputs> cur;
    cur.growth.final_kd = true;
    auto kd_bundle = make_policies(slot<key::pruning>(pol::pruning::magnitude_l2{}), slot<key::curriculum>(cur));
    auto opts = quiet(0);
    opts.total = distill::parse_budget("seconds:1.5");
    auto student = su.pruned();
    const auto r = distill::make_pipeline(su.be, kd_bundle, opts).run(su.source(), student, identity4, loader, su.dir / "kd");
    MESSAGE("seconds:1.5 with final KD: ", r.segment_steps, " segment steps, ", r.kd_steps, " KD steps in ", r.seconds, " s");
    CHECK(r.visits.size() == 4);
    CHECK(r.segment_steps > 8);
    CHECK(r.kd_steps > 0);
    CHECK(r.seconds < 3.0);
  }
  CHECK_THROWS_WITH_AS(distill::parse_budget("minutes:3"), doctest::Contains("unknown unit 'minutes'"), lwcl::error);
  CHECK_THROWS_WITH_AS(distill::parse_budget("steps:-1"), doctest::Contains("expected a positive number"), lwcl::error);

  auto student = su.pruned();
  CHECK_THROWS_WITH_AS(distill::make_pipeline(su.be, bundle, quiet(7)).run(su.source(), student, identity4, loader, su.dir / "small"),
                       doctest::Contains("gives 7 segment steps for 8 segment visits"), lwcl::error);
  CHECK_THROWS_WITH_AS(distill::make_pipeline(su.be, bundle, quiet(8)).run(su.source(), student, {0, 1, 2, 3}, loader, su.dir / "tlo"),
                       doctest::Contains("the layer map has 4 boundaries for a student of 4 layers, expected 5"), lwcl::error);
  CHECK_THROWS_WITH_AS(distill::make_pipeline(su.be, bundle, quiet(8)).run(su.source(), student, {0, 1, 2, 3, 7}, loader, su.dir / "tlo"),
                       doctest::Contains("ends at teacher boundary 7, expected 4"), lwcl::error);

  auto gap = make_policies(slot<key::pruning>(pol::pruning::magnitude_l2{}), slot<key::segmentation>(gappy{}));
  CHECK_THROWS_WITH_AS(distill::make_pipeline(su.be, gap, quiet(8)).run(su.source(), student, identity4, loader, su.dir / "gap"),
                       doctest::Contains("gappy: segment 1 is [2, 4), expected it to start at layer 1"), lwcl::error);
  auto overlap = make_policies(slot<key::pruning>(pol::pruning::magnitude_l2{}),
                               slot<key::segmentation>(pol::segmentation::explicit_boundaries{{2, 2}}));
  CHECK_THROWS_WITH_AS(distill::make_pipeline(su.be, overlap, quiet(8)).run(su.source(), student, identity4, loader, su.dir / "ov"),
                       doctest::Contains("explicit_boundaries: boundary 1 is layer 2"), lwcl::error);
  auto unwritable = make_policies(slot<key::pruning>(pol::pruning::magnitude_l2{}),
                                  slot<key::cache>(pol::cache::disk{.folder = "/proc/lwcl_features"}));
  CHECK_THROWS_WITH_AS(
      distill::make_pipeline(su.be, unwritable, quiet(8)).run(su.source(), student, identity4, loader, su.dir / "unw"),
      doctest::Contains("cannot create the feature cache directory '/proc/lwcl_features'"), lwcl::error);
  // A poisoned student stops with the step, the segment, the tensor and the features it read named.
  auto poisoned = su.pruned();
  poisoned.params[static_cast<std::size_t>(poisoned.layout.find("layers.0.norm1.weight").offset)] = std::nan("");
  std::string message;
  try {
    distill::make_pipeline(su.be, bundle, quiet(8)).run(su.source(), poisoned, identity4, loader, su.dir / "nan");
  } catch (const lwcl::error& e) {
    message = e.what();
  }
  CAPTURE(message);
  CHECK(message.find("pipeline: phase 0, segment [0, 1), step 1 (global step 1)") != std::string::npos);
  CHECK(message.find("parameter 'layers.0.norm1.weight'") != std::string::npos);
  CHECK(message.find("holds nan at element 0") != std::string::npos);
  CHECK(message.find("target: the teacher's at boundary 1, batch ") != std::string::npos);
}

namespace {

// Every step record of a run's metrics.jsonl: (visit's first layer, step in the visit, lr), in order.
struct step_record {
  index_t first;
  long step;
  double lr;
};
std::vector<step_record> step_records(const fs::path& run) {
  std::vector<step_record> out;
  std::istringstream metrics(read_text(run / "metrics.jsonl"));
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("global_step") && j.contains("lr"))
      out.push_back({j.at("first").get<index_t>(), j.at("step").get<long>(), j.at("lr").get<double>()});
  }
  return out;
}

}  // namespace

TEST_CASE("pipeline: the visit schedule: a warm-up, a minimum a visit, steps shared by difficulty, and under seconds "
          "a schedule planned from the first step") {
  setup su(dtype::f32, "lwcl_test_pipeline_schedule");
  const data::batch_loader loader(*su.shard, 2, 8, 9);
  auto bundle = make_policies(slot<key::pruning>(pol::pruning::magnitude_l2{}));
  SUBCASE("warm-up: every visit's first steps rise linearly to the peak, then the cosine decays to min_lr") {
    auto opts = quiet(48);  // 8 visits of 6 steps
    opts.warmup_steps = 2;
    auto student = su.pruned();
    const auto r = distill::make_pipeline(su.be, bundle, opts).run(su.source(), student, identity4, loader, su.dir / "warm");
    REQUIRE(r.visits.size() == 8);
    const auto recs = step_records(su.dir / "warm");
    REQUIRE(recs.size() == 48);
    const optim::cosine_schedule expected{opts.lr, opts.min_lr, 2, 6};
    for (const auto& x : recs) {
      CAPTURE(x.step);
      CHECK(x.lr == doctest::Approx(expected.lr(x.step)).epsilon(1e-12));
    }
    CHECK(recs[0].lr == doctest::Approx(opts.lr / 2));
    CHECK(recs[1].lr == doctest::Approx(opts.lr));
    CHECK(recs[5].lr == doctest::Approx(opts.min_lr));
    // The same run without a warm-up starts every visit near the peak.
    auto plain = quiet(48);
    plain.warmup_steps = 0;
    auto s2 = su.pruned();
    distill::make_pipeline(su.be, bundle, plain).run(su.source(), s2, identity4, loader, su.dir / "plain");
    CHECK(step_records(su.dir / "plain")[0].lr > 0.9 * opts.lr);
  }
  SUBCASE("a steps budget too small for the minimum is refused, naming it") {
    auto opts = quiet(20);
    opts.min_visit_steps = 3;
    auto student = su.pruned();
    CHECK_THROWS_WITH_AS(distill::make_pipeline(su.be, bundle, opts).run(su.source(), student, identity4, loader, su.dir / "min"),
                         doctest::Contains("20 segment steps for 8 segment visits of at least 3 steps"), lwcl::error);
  }
  SUBCASE("by difficulty: each phase's steps follow its segments' measured losses, each at least the minimum") {
    auto opts = quiet(64);  // 32 steps a phase
    opts.share = distill::budget_share::difficulty;
    opts.min_visit_steps = 2;
    auto student = su.pruned();
    const auto r = distill::make_pipeline(su.be, bundle, opts).run(su.source(), student, identity4, loader, su.dir / "diff");
    REQUIRE(r.visits.size() == 8);
    CHECK(r.segment_steps == 64);
    for (std::size_t p = 0; p < 2; ++p) {
      std::vector<double> d;
      long sum = 0;
      for (std::size_t i = 4 * p; i < 4 * p + 4; ++i) {
        d.push_back(r.visits[i].difficulty);
        sum += r.visits[i].steps;
        CHECK(r.visits[i].steps >= 2);
      }
      CHECK(sum == 32);
      const auto want = distill::share_steps(32, distill::share_weights(distill::budget_share::difficulty, d), 2);
      for (std::size_t i = 0; i < 4; ++i) CHECK(r.visits[4 * p + i].steps == want[i]);
    }
  }
  SUBCASE("under seconds: the schedule is planned from the pace measured, and no visit stops under the minimum") {
    auto opts = quiet(0);
    opts.total = distill::parse_budget("seconds:0.6");
    opts.min_visit_steps = 12;
    auto student = su.pruned();
    const auto r = distill::make_pipeline(su.be, bundle, opts).run(su.source(), student, identity4, loader, su.dir / "secs");
    MESSAGE("seconds:0.6, at least 12 steps a visit: ", r.visits.size(), " visits, ", r.segment_steps, " steps in ", r.seconds, " s");
    REQUIRE(!r.visits.empty());
    for (const auto& v : r.visits)
      if (v.steps > 0) CHECK(v.steps >= 12);
    // The first step of each visit: a schedule planned for the steps the visit's time holds, not for the
    // cap of 20000 steps, is already visibly below the peak.
    const optim::cosine_schedule capped{opts.lr, opts.min_lr, 0, opts.max_visit_steps};
    for (const auto& x : step_records(su.dir / "secs"))
      if (x.step == 1) CHECK(x.lr < capped.lr(1));
  }
}

TEST_CASE("pipeline: student features nothing will read again are released: front to back on student inputs, the "
          "cache holds the teacher's features and one student boundary's") {
  setup su(dtype::f32, "lwcl_test_pipeline_release");
  const data::batch_loader loader(*su.shard, 2, 8, 10);
  auto bundle = make_policies(slot<key::pruning>(pol::pruning::magnitude_l2{}));  // two_stage: phase 1 on student inputs
  auto student = su.pruned();
  const auto r = distill::make_pipeline(su.be, bundle, quiet(16)).run(su.source(), student, identity4, loader, su.dir / "run");
  REQUIRE(r.visits.size() == 8);
  double teacher_bytes = 0;
  std::vector<std::pair<long, double>> phase1;  // (position, cache bytes) of every step on student inputs
  std::istringstream metrics(read_text(su.dir / "run" / "metrics.jsonl"));
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.value("event", "") == "teacher_pass") teacher_bytes = j.at("cache_stored_bytes").get<double>();
    if (j.contains("global_step") && j.at("phase").get<int>() == 1)
      phase1.emplace_back(j.at("position").get<long>(), j.at("memory").at("cache").get<double>());
  }
  REQUIRE(teacher_bytes > 0);
  REQUIRE(phase1.size() == 8);
  // Five teacher boundaries (0..4) of three batches; the student features of one boundary are a fifth of them.
  for (const auto& step : phase1) {
    const long pos = step.first;
    const double cache = step.second;
    CAPTURE(pos);
    if (pos == 0) CHECK(cache == teacher_bytes);  // segment [0, 1) reads boundary 0, the teacher's embedding output
    else CHECK(cache == doctest::Approx(teacher_bytes * 6 / 5));
  }
}

TEST_CASE("kept_optimizer: a segment's AdamW state kept by its layers, in the tracker's host bytes, dropped by an "
          "overlapping segment, written and read back, a damaged file refused") {
  setup su(dtype::f32, "lwcl_test_pipeline_kept_unit");
  const auto st = su.pruned();
  using seg_t = distill::segment_trainer<backend::cpu>;
  const optim::adamw_config oc;
  const index_t B = 2, T = 8, C = su.cfg.d_model;
  std::vector<float> x(static_cast<std::size_t>(B * T * C)), y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
    y[i] = static_cast<float>(std::cos(0.11 * static_cast<double>(i)));
  }
  seg_t a(su.be, st.config, 0, 1, st.layout, st.params, st.type, oc);
  for (int k = 0; k < 3; ++k) a.step(tensor(x.data(), {B, T, C}), tensor(y.data(), {B, T, C}), 1e-3);
  const std::size_t host_before = memory().current(tier::host);
  {
    distill::kept_optimizer kept;
    kept.keep(a);
    CHECK(kept.size() == 1);
    CHECK(kept.bytes() == a.optimizer_state().size());
    CHECK(memory().current(tier::host) == host_before + kept.bytes());
    // A fresh segment of the same layers takes it up: the step count and the moments go on.
    seg_t b(su.be, st.config, 0, 1, st.layout, st.params, st.type, oc);
    kept.restore(b);
    CHECK(b.steps() == 3);
    CHECK(b.optimizer_state() == a.optimizer_state());
    // One of other layers starts afresh.
    seg_t other(su.be, st.config, 1, 2, st.layout, st.params, st.type, oc);
    kept.restore(other);
    CHECK(other.steps() == 0);
    // Written and read back whole.
    kept.keep(other);
    CHECK(kept.size() == 2);
    const auto file = su.dir / "optimizers.bin";
    kept.save(file);
    distill::kept_optimizer back;
    back.load(file);
    CHECK(back.size() == 2);
    REQUIRE(back.find(0, 1) != nullptr);
    CHECK(*back.find(0, 1) == *kept.find(0, 1));
    // A segment over layers [0, 2) changes both: their states go, its own stays.
    seg_t wide(su.be, st.config, 0, 2, st.layout, st.params, st.type, oc);
    kept.keep(wide);
    CHECK(kept.size() == 1);
    CHECK(kept.find(0, 1) == nullptr);
    CHECK(kept.find(1, 2) == nullptr);
    CHECK(kept.find(0, 2) != nullptr);
    // A damaged file changes nothing.
    std::string bytes = read_text(file);
    write_file_atomic(su.dir / "short.bin", std::string_view(bytes).substr(0, bytes.size() - 5));
    CHECK_THROWS_WITH_AS(back.load(su.dir / "short.bin"), doctest::Contains("ends inside entry 1"), lwcl::error);
    CHECK(back.size() == 2);
    write_file_atomic(su.dir / "bad.bin", "not a state file at all");
    CHECK_THROWS_WITH_AS(back.load(su.dir / "bad.bin"), doctest::Contains("is not a file of kept optimiser states"),
                         lwcl::error);
    // A state for other layers' sizes is refused by the segment (adamw's own check).
    seg_t mismatch(su.be, st.config, 1, 2, st.layout, st.params, st.type, oc);
    CHECK_THROWS_WITH_AS(mismatch.load_optimizer_state(*kept.find(0, 2)), doctest::Contains("elements"), lwcl::error);
  }
  CHECK(memory().current(tier::host) == host_before);  // released with it
}

TEST_CASE("pipeline: keep_optimizer_state: the first phase as without it, the second phase's visits go on from its "
          "optimisers, a checkpoint holds them, a stopped run resumes bitwise") {
  setup su(dtype::f32, "lwcl_test_pipeline_kept");
  const data::batch_loader loader(*su.shard, 2, 8, 12);
  auto bundle = make_policies(slot<key::pruning>(pol::pruning::magnitude_l2{}));  // two_stage: 4 segments, twice
  auto fresh_opts = quiet(32), kept_opts = quiet(32);
  kept_opts.keep_optimizer_state = true;
  auto fresh = su.pruned(), kept = su.pruned();
  const auto rf = distill::make_pipeline(su.be, bundle, fresh_opts).run(su.source(), fresh, identity4, loader, su.dir / "fresh");
  const auto rk = distill::make_pipeline(su.be, bundle, kept_opts).run(su.source(), kept, identity4, loader, su.dir / "kept");
  REQUIRE(rf.visits.size() == 8);
  REQUIRE(rk.visits.size() == 8);
  for (std::size_t i = 0; i < 8; ++i) {
    CAPTURE(i);
    // The same weights and inputs up to phase 1's first step; phase 0's optimisers all fresh.
    if (i <= 4) CHECK(rk.visits[i].loss_first == rf.visits[i].loss_first);
    if (i < 4) CHECK(rk.visits[i].loss_last == rf.visits[i].loss_last);
  }
  CHECK(rk.visits[4].loss_last != rf.visits[4].loss_last);  // phase 1's first visit goes on from phase 0's optimiser
  CHECK(kept.params != fresh.params);
  const auto config = nlohmann::json::parse(read_text(su.dir / "kept" / "config.json"));
  CHECK(config.at("options").at("keep_optimizer_state") == true);
  bool in_checkpoint = false;
  for (const auto& e : fs::recursive_directory_iterator(su.dir / "kept" / "checkpoints"))
    in_checkpoint = in_checkpoint || e.path().filename() == "optimizers.bin";
  CHECK(in_checkpoint);
  // Stopped anywhere (in phase 1 too, where the states are read back) and resumed: bitwise the same.
  kept_opts.checkpoint_every = 3;
  check_resume(su, bundle, kept_opts, loader, "kept_", 3, 83);
  // A checkpoint made with the states kept is not resumed without them.
  auto part = su.pruned();
  CHECK_THROWS_WITH_AS(distill::make_pipeline(su.be, bundle, fresh_opts).run(su.source(), part, identity4, loader,
                                                                            su.dir / "kept"),
                       doctest::Contains("was made with keep_optimizer_state = true"), lwcl::error);
}
