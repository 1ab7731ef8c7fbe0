// Memory tracking: current and peak bytes per tier (also under concurrent updates), and the backend
// allocations made by buffer and owned_tensor reporting and releasing their bytes.
#include <doctest/doctest.h>

#include <barrier>
#include <cstdint>
#include <initializer_list>
#include <thread>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/memory.hpp"
#include "lwcl/tensor/tensor.hpp"

using namespace lwcl;

TEST_CASE("memory_tracker keeps current and peak bytes per tier") {
  memory_tracker t;
  t.on_alloc(tier::host, 100);
  t.on_alloc(tier::device, 40);
  t.on_alloc(tier::host, 50);
  CHECK(t.current(tier::host) == 150);
  CHECK(t.peak(tier::host) == 150);
  CHECK(t.current(tier::device) == 40);
  CHECK(t.peak(tier::device) == 40);
  CHECK(t.current(tier::pinned) == 0);
  CHECK(t.peak(tier::disk) == 0);

  t.on_free(tier::host, 100);
  CHECK(t.current(tier::host) == 50);
  CHECK(t.peak(tier::host) == 150);
  t.on_alloc(tier::host, 30);
  CHECK(t.peak(tier::host) == 150);

  t.reset_peak(tier::host);
  CHECK(t.peak(tier::host) == 80);
  CHECK(t.peak(tier::device) == 40);
  t.on_free(tier::device, 40);
  t.reset_peaks();
  CHECK(t.peak(tier::device) == 0);
  CHECK(t.peak(tier::host) == 80);

  CHECK(tier_name(tier::device) == "device");
  CHECK(tier_name(tier::host) == "host");
  CHECK(tier_name(tier::pinned) == "pinned");
  CHECK(tier_name(tier::disk) == "disk");
}

TEST_CASE("memory_tracker stays exact under concurrent updates from several threads") {
  memory_tracker t;
  constexpr int threads = 8;
  constexpr int rounds = 20000;
  constexpr std::size_t churn = 64;
  std::barrier all_holding(threads);
  std::size_t held_total = 0;
  for (int k = 0; k < threads; ++k) held_total += 1000 * static_cast<std::size_t>(k + 1);

  std::vector<std::thread> pool;
  for (int k = 0; k < threads; ++k) {
    pool.emplace_back([&, k] {
      const tier churn_tier = k % 2 ? tier::host : tier::device;
      for (int r = 0; r < rounds; ++r) {
        t.on_alloc(churn_tier, churn);
        t.on_alloc(churn_tier, churn);
        t.on_free(churn_tier, churn);
        t.on_free(churn_tier, churn);
      }
      // Every thread holds its block at the barrier, so the pinned peak is exactly their sum.
      const std::size_t held = 1000 * static_cast<std::size_t>(k + 1);
      t.on_alloc(tier::pinned, held);
      all_holding.arrive_and_wait();
      t.on_free(tier::pinned, held);
    });
  }
  for (auto& th : pool) th.join();

  for (tier x : {tier::device, tier::host, tier::pinned, tier::disk}) CHECK(t.current(x) == 0);
  CHECK(t.peak(tier::pinned) == held_total);
  for (tier x : {tier::device, tier::host}) {
    CHECK(t.peak(x) >= 2 * churn);
    CHECK(t.peak(x) <= 2 * churn * threads / 2);
  }
  CHECK(t.peak(tier::disk) == 0);
}

TEST_CASE("buffer reports its bytes to the tracker and releases them once") {
  backend::cpu be;
  auto& mem = memory();
  const std::size_t before = mem.current(tier::host);
  {
    buffer<backend::cpu> a(be, 1000);
    CHECK(a.data() != nullptr);
    CHECK(a.bytes() == 1000);
    CHECK(a.backend() == &be);
    CHECK(reinterpret_cast<std::uintptr_t>(a.data()) % 64 == 0);
    CHECK(mem.current(tier::host) == before + 1000);

    buffer<backend::cpu> b(std::move(a));
    CHECK(a.data() == nullptr);
    CHECK(a.bytes() == 0);
    CHECK(mem.current(tier::host) == before + 1000);

    buffer<backend::cpu> c(be, 24);
    CHECK(mem.current(tier::host) == before + 1024);
    c = std::move(b);  // c's own 24 bytes are released
    CHECK(c.bytes() == 1000);
    CHECK(mem.current(tier::host) == before + 1000);

    buffer<backend::cpu> empty(be, 0);
    CHECK(empty.data() == nullptr);
    CHECK(mem.current(tier::host) == before + 1000);
  }
  CHECK(mem.current(tier::host) == before);

  mem.reset_peak(tier::host);
  { buffer<backend::cpu> big(be, 1 << 20); }
  CHECK(mem.peak(tier::host) == before + (1 << 20));
  CHECK(mem.current(tier::host) == before);
}

TEST_CASE("owned_tensor is zero-filled, tracked, and typed") {
  backend::cpu be;
  const std::size_t before = memory().current(tier::host);
  {
    owned_tensor<backend::cpu> t(be, dtype::f64, shape{3, 5});
    CHECK(memory().current(tier::host) == before + 3 * 5 * sizeof(double));
    CHECK(t.numel() == 15);
    CHECK(t.shape() == shape{3, 5});
    CHECK(t.view().type == dtype::f64);
    const double* p = t.ptr<double>();
    for (int i = 0; i < 15; ++i) CHECK(p[i] == 0.0);
    CHECK_THROWS_WITH_AS(t.ptr<float>("owned"), doctest::Contains("owned: dtype is f64, expected f32"), lwcl::error);
    const tensor& view = t;
    CHECK(view.data == p);

    owned_tensor<backend::cpu> moved = std::move(t);
    CHECK(memory().current(tier::host) == before + 3 * 5 * sizeof(double));
    CHECK(moved.view().data == p);
  }
  CHECK(memory().current(tier::host) == before);
}
