// AdamW: a ten-step replay of torch.optim.AdamW (with the cosine schedule and global-norm clipping,
// two parameter groups), a hand-checked first step, save/load resuming bit for bit, and bad input.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/optim/adamw.hpp"
#include "lwcl/optim/clip.hpp"
#include "lwcl/optim/schedule.hpp"
#include "support/check.hpp"
#include "support/fixture.hpp"

using namespace lwcl;
using lwcl::test::rel_error;

namespace {

template <class T>
std::vector<T> row(const std::vector<double>& m, std::size_t r, std::size_t n) {
  return std::vector<T>(m.begin() + static_cast<std::ptrdiff_t>(r * n), m.begin() + static_cast<std::ptrdiff_t>((r + 1) * n));
}

}  // namespace

TEST_CASE_TEMPLATE("adamw replays torch.optim.AdamW with schedule and clipping", T, float, double) {
  test::fixture fx{"optim/adamw.lwfx"};
  const auto cfg = fx.f64("config");  // max_lr, min_lr, warmup, total, max_norm, beta1, beta2, eps, weight_decay
  const optim::cosine_schedule sched{cfg[0], cfg[1], static_cast<long>(cfg[2]), static_cast<long>(cfg[3])};
  const double max_norm = cfg[4];
  const optim::adamw_config decayed{cfg[0], cfg[5], cfg[6], cfg[7], cfg[8]};
  optim::adamw_config plain = decayed;
  plain.weight_decay = 0;

  const auto n = static_cast<index_t>(fx.dims("init").numel());
  const auto nd = static_cast<index_t>(fx.ints("n_decay").at(0));
  const auto steps = static_cast<std::size_t>(fx.dims("grads")[0]);
  REQUIRE(steps == 10);
  REQUIRE(nd < n);

  // Parameters and gradients each in one allocation; the two groups are views into it.
  backend::cpu be;
  std::vector<T> params = fx.as<T>("init"), grads(static_cast<std::size_t>(n));
  const tensor all_grads(grads.data(), {n});
  optim::adamw<backend::cpu> opt_decay(be, tensor(params.data(), {nd}), decayed);
  optim::adamw<backend::cpu> opt_plain(be, tensor(params.data() + nd, {n - nd}), plain);

  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
  const auto all_raw = fx.f64("grads"), all_after = fx.f64("params"), norms = fx.f64("norms");
  int clipped = 0;
  for (std::size_t s = 0; s < steps; ++s) {
    CAPTURE(s);
    const auto raw = row<T>(all_raw, s, static_cast<std::size_t>(n));
    std::copy(raw.begin(), raw.end(), grads.begin());  // in place: all_grads views this allocation
    const double norm = optim::clip_grad_norm(be, all_grads, max_norm);
    CHECK(norm == doctest::Approx(norms[s]).epsilon(tol));
    clipped += norm > max_norm;
    const double lr = sched.lr(static_cast<long>(s + 1));
    opt_decay.step(tensor(grads.data(), {nd}), lr);
    opt_plain.step(tensor(grads.data() + nd, {n - nd}), lr);
    CHECK(rel_error(params, row<double>(all_after, s, static_cast<std::size_t>(n))) < tol);
  }
  CHECK(clipped > 2);
  CHECK(clipped < static_cast<int>(steps));  // some steps clip, some do not
  CHECK(opt_decay.steps() == 10);

  const auto m = fx.f64("m"), v = fx.f64("v");
  const auto und = static_cast<std::size_t>(nd), un = static_cast<std::size_t>(n);
  const T* md = opt_decay.m().template ptr<T>();
  const T* mp = opt_plain.m().template ptr<T>();
  const T* vd = opt_decay.v().template ptr<T>();
  const T* vp = opt_plain.v().template ptr<T>();
  std::vector<T> m_all(md, md + und), v_all(vd, vd + und);
  m_all.insert(m_all.end(), mp, mp + (un - und));
  v_all.insert(v_all.end(), vp, vp + (un - und));
  CHECK(rel_error(m_all, m) < tol);
  CHECK(rel_error(v_all, v) < tol);
}

TEST_CASE("adamw first step: decoupled decay, then a step of lr in the gradient's direction") {
  backend::cpu be;
  std::vector<double> p = {1.0, -2.0, 3.0}, g = {0.5, -0.25, 0.0}, m(3), v(3);
  const optim::adamw_config cfg{0.1, 0.9, 0.999, 1e-8, 0.01};
  optim::adamw_step(be, tensor(p.data(), {3}), tensor(g.data(), {3}), tensor(m.data(), {3}), tensor(v.data(), {3}), cfg, 1, 0.1);
  // Step 1: m_hat = g, v_hat = g^2, so the update is lr * g / (|g| + eps) after p *= 1 - lr * wd.
  CHECK(p[0] == doctest::Approx(1.0 * 0.999 - 0.1 * 0.5 / (0.5 + 1e-8)).epsilon(1e-15));
  CHECK(p[1] == doctest::Approx(-2.0 * 0.999 + 0.1 * 0.25 / (0.25 + 1e-8)).epsilon(1e-15));
  CHECK(p[2] == 3.0 * 0.999);  // no gradient: only the decay acts
  CHECK(m[0] == doctest::Approx(0.05));
  CHECK(v[0] == doctest::Approx(0.00025));
  CHECK(m[2] == 0.0);
}

TEST_CASE("adamw decays toward zero with zero gradients, in proportion to the step's lr") {
  backend::cpu be;
  std::vector<float> p = {2.0f, -4.0f}, g = {0.0f, 0.0f};
  optim::adamw<backend::cpu> opt(be, tensor(p.data(), {2}), {.lr = 0.5, .weight_decay = 0.1});
  opt.step(tensor(g.data(), {2}));
  CHECK(p[0] == doctest::Approx(2.0 * 0.95));
  opt.step(tensor(g.data(), {2}), 0.1);
  CHECK(p[0] == doctest::Approx(2.0 * 0.95 * 0.99));
  CHECK(p[1] == doctest::Approx(-4.0 * 0.95 * 0.99));
}

TEST_CASE("adamw save and load resume a run bit for bit") {
  backend::cpu be;
  const index_t n = 1000;
  const optim::adamw_config cfg{3e-3, 0.9, 0.95, 1e-8, 0.1};
  const optim::cosine_schedule sched{3e-3, 3e-4, 2, 6};
  auto grad_at = [&](long step) { return test::random_normal<float>(static_cast<std::size_t>(n), 100 + static_cast<std::uint64_t>(step)); };
  const auto init = test::random_normal<float>(static_cast<std::size_t>(n), 1);

  // Reference: six uninterrupted steps.
  std::vector<float> p_ref = init;
  optim::adamw<backend::cpu> ref(be, tensor(p_ref.data(), {n}), cfg);
  std::vector<char> state_at_3;
  std::vector<float> p_at_3;
  std::stringstream stream;
  for (long s = 1; s <= 6; ++s) {
    auto g = grad_at(s);
    ref.step(tensor(g.data(), {n}), sched.lr(s));
    if (s == 3) {
      state_at_3 = ref.save_state();
      ref.save(stream);
      stream << "next-record";
      p_at_3 = p_ref;
    }
  }

  auto resume = [&](auto&& load) {
    std::vector<float> p = p_at_3;
    optim::adamw<backend::cpu> opt(be, tensor(p.data(), {n}), cfg);
    load(opt);
    CHECK(opt.steps() == 3);
    for (long s = 4; s <= 6; ++s) {
      auto g = grad_at(s);
      opt.step(tensor(g.data(), {n}), sched.lr(s));
    }
    CHECK(std::memcmp(p.data(), p_ref.data(), p.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(opt.m().data, ref.m().data, ref.m().bytes()) == 0);
    CHECK(std::memcmp(opt.v().data, ref.v().data, ref.v().bytes()) == 0);
    return p;
  };
  SUBCASE("from a byte vector") { resume([&](auto& opt) { opt.load_state(state_at_3); }); }
  SUBCASE("from a stream, which is left at the next record") {
    resume([&](auto& opt) { opt.load(stream); });
    std::string rest;
    stream >> rest;
    CHECK(rest == "next-record");
  }
  SUBCASE("without the saved state the run differs (the check above can fail)") {
    std::vector<float> p = p_at_3;
    optim::adamw<backend::cpu> fresh(be, tensor(p.data(), {n}), cfg);
    for (long s = 4; s <= 6; ++s) {
      auto g = grad_at(s);
      fresh.step(tensor(g.data(), {n}), sched.lr(s));
    }
    CHECK(std::memcmp(p.data(), p_ref.data(), p.size() * sizeof(float)) != 0);
  }
}

TEST_CASE("adamw keeps its moments in tracked backend memory") {
  backend::cpu be;
  std::vector<double> p(100);
  const auto before = memory().current(tier::host);
  {
    optim::adamw<backend::cpu> opt(be, tensor(p.data(), {10, 10}), {});
    CHECK(memory().current(tier::host) == before + 2 * 100 * sizeof(double));
    CHECK(opt.m().shape == shape{10, 10});
    CHECK(opt.v().type == dtype::f64);
  }
  CHECK(memory().current(tier::host) == before);
}

TEST_CASE("adamw rejects bad input") {
  backend::cpu be;
  std::vector<float> p(10), g(10), m(10), v(10), g9(9);
  std::vector<double> gd(10);
  const tensor P(p.data(), {10}), G(g.data(), {10}), M(m.data(), {10}), V(v.data(), {10});
  const optim::adamw_config cfg{};
  CHECK_THROWS_WITH_AS(optim::adamw_step(be, P, tensor(g9.data(), {9}), M, V, cfg, 1, 1e-3),
                       doctest::Contains("adamw_step: grad has shape [9] (9 elements), expected 10 elements"), lwcl::error);
  CHECK_THROWS_WITH_AS(optim::adamw_step(be, P, tensor(gd.data(), {10}), M, V, cfg, 1, 1e-3),
                       doctest::Contains("adamw_step: grad has dtype f64, expected f32"), lwcl::error);
  CHECK_THROWS_WITH_AS(optim::adamw_step(be, P, G, M, V, cfg, 0, 1e-3),
                       doctest::Contains("adamw_step: step is 0, expected >= 1"), lwcl::error);
  CHECK_THROWS_WITH_AS(optim::adamw_step(be, P, G, M, V, cfg, 1, -1e-3), doctest::Contains("adamw_step: lr is -0.001"),
                       lwcl::error);
  CHECK_THROWS_WITH_AS(optim::adamw_step(be, P, G, M, V, {.beta1 = 1.0}, 1, 1e-3),
                       doctest::Contains("adamw_step: beta1 is 1, expected a value in [0, 1)"), lwcl::error);
  CHECK_THROWS_WITH_AS(optim::adamw_step(be, P, G, M, V, {.weight_decay = -0.1}, 1, 1e-3),
                       doctest::Contains("adamw_step: weight_decay is -0.1"), lwcl::error);
  CHECK_THROWS_WITH_AS(optim::adamw_step(be, tensor(), G, M, V, cfg, 1, 1e-3), doctest::Contains("adamw_step: param is empty"),
                       lwcl::error);
  std::vector<std::int32_t> pi(10);
  CHECK_THROWS_WITH_AS(optim::adamw<backend::cpu>(be, tensor(pi.data(), {10}), cfg),
                       doctest::Contains("adamw: dtype i32 is not supported"), lwcl::error);

  optim::adamw<backend::cpu> opt(be, P, cfg);
  CHECK_THROWS_WITH_AS(opt.step(tensor(g9.data(), {9}), 1e-3), doctest::Contains("adamw_step: grad has shape [9]"), lwcl::error);
  CHECK(opt.steps() == 0);  // a rejected step does not count

  std::vector<float> p12(12);
  optim::adamw<backend::cpu> other(be, tensor(p12.data(), {12}), cfg);
  CHECK_THROWS_WITH_AS(opt.load_state(other.save_state()),
                       doctest::Contains("adamw::load: state holds 12 elements, this optimiser has 10"), lwcl::error);
  std::vector<double> pd(10);
  optim::adamw<backend::cpu> wide(be, tensor(pd.data(), {10}), cfg);
  CHECK_THROWS_WITH_AS(opt.load_state(wide.save_state()),
                       doctest::Contains("adamw::load: state holds dtype f64, this optimiser has f32"), lwcl::error);
  auto state = opt.save_state();
  state.pop_back();
  CHECK_THROWS_WITH_AS(opt.load_state(state), doctest::Contains("adamw::load: state has 111 bytes, expected 112"), lwcl::error);
  state[0] = 'X';
  CHECK_THROWS_WITH_AS(opt.load_state(state), doctest::Contains("adamw::load: not an adamw state"), lwcl::error);
  std::stringstream truncated(std::string(20, 'L'));
  CHECK_THROWS_WITH_AS(opt.load(truncated), doctest::Contains("adamw::load: stream ended inside the optimiser state header"),
                       lwcl::error);
}
