// backend::cuda against backend::host: the backend primitives (memory, copies, for_each, GEMMs, sums,
// the memory tracker, error reporting) and every op under include/lwcl/ops/, forward and backward, run
// on both backends from the same random f32 inputs and compared. A new op gets its case here too.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "lwcl/backend/cuda/cuda.cuh"
#include "lwcl/backend/cuda/cache/feature_stores.cuh"
#include "lwcl/backend/host/gemm_naive.hpp"
#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/memory.hpp"
#include "lwcl/core/rng.hpp"
#include "lwcl/ops/activation.hpp"
#include "lwcl/ops/attention.hpp"
#include "lwcl/ops/attention_cached.hpp"
#include "lwcl/ops/cross_entropy.hpp"
#include "lwcl/ops/distill_loss.hpp"
#include "lwcl/ops/elementwise.hpp"
#include "lwcl/ops/embedding.hpp"
#include "lwcl/ops/flash_attention.hpp"
#include "lwcl/ops/fused.hpp"
#include "lwcl/ops/layernorm.hpp"
#include "lwcl/ops/linear.hpp"
#include "lwcl/ops/rmsnorm.hpp"
#include "lwcl/ops/rope.hpp"
#include "lwcl/tensor/tensor.hpp"
#include "support/arena.hpp"
#include "support/check.hpp"

using namespace lwcl;

// backend::cuda declares every fused kernel it implements, so the ops call them (ops/fused.hpp).
static_assert(ops::offers_fused_layernorm<backend::cuda> && ops::offers_fused_rmsnorm<backend::cuda> &&
              ops::offers_fused_flash_attention<backend::cuda> && ops::offers_fused_cross_entropy<backend::cuda> &&
              ops::offers_fused_linear_epilogue<backend::cuda> && ops::offers_device_ranking<backend::cuda>);
using lwcl::test::rel_error;

namespace {

// Tolerances for f32 parity, in test::rel_error (largest absolute difference over the host result's
// largest magnitude). Both backends run the same functors in f32; they differ only by FMA contraction
// and by CUDA's math functions against glibc's (a few ulp: ~1e-7 relative), and, in GEMMs, by cuBLAS's
// summation order against OpenBLAS's (grows like sqrt(K) ulp). Backward passes sum over rows or
// tokens, where cancellation magnifies the same rounding differences, hence the looser bound.
constexpr double fwd_tol = 1e-5;
constexpr double bwd_tol = 1e-4;
// f64 GEMMs and double-accumulated sums differ only in summation order.
constexpr double f64_tol = 1e-12;
// For results that must be bitwise equal (rel_error is then 0).
constexpr double exact = 1e-300;

using host_be = backend::host<gemm::openblas>;
using device_be = backend::cuda;

// Named results of one run, each with the tolerance it is held to.
struct results {
  struct entry {
    std::string name;
    std::vector<double> data;
    double tol;
  };
  std::vector<entry> entries;

  void add(std::string name, std::vector<double> data, double tol) { entries.push_back({std::move(name), std::move(data), tol}); }
  void add_scalar(std::string name, double v, double tol) { add(std::move(name), {v}, tol); }
};

// Compares a device run with the host run of the same computation, entry by entry.
void check_parity(const results& host, const results& dev) {
  REQUIRE(host.entries.size() == dev.entries.size());
  for (std::size_t i = 0; i < host.entries.size(); ++i) {
    const auto& h = host.entries[i];
    const auto& d = dev.entries[i];
    INFO("result '", h.name, "'");
    REQUIRE(d.name == h.name);
    REQUIRE(d.data.size() == h.data.size());
    CHECK(rel_error(d.data, h.data) < h.tol);
  }
}

using test::arena;

std::vector<float> randn(index_t n, std::uint64_t seed, double scale = 1.0) {
  return test::random_normal<float>(static_cast<std::size_t>(n), seed, scale);
}

// Runs `run(backend)` on the host and on the device and compares what the two runs return.
template <class Run>
void host_vs_device(Run&& run) {
  host_be host;
  device_be dev;
  const results h = run(host);
  const results d = run(dev);
  check_parity(h, d);
}

// ---- functors for the backend tests ----------------------------------------------------------------

// Adds a value that depends on i to out[i]; a missed or repeated index shows up in the result.
struct mark_each {
  std::int32_t* out;
  LWCL_HD void operator()(index_t i) const { out[i] += 1 + static_cast<std::int32_t>(i % 7); }
};

struct times_two {
  float* x;
  LWCL_HD void operator()(index_t i) const { x[i] *= 2.0f; }
};

// Row-major reference GEMM over host vectors.
template <class T>
void reference_gemm(bool ta, bool tb, index_t M, index_t N, index_t K, T alpha, const std::vector<T>& A, index_t lda,
                    const std::vector<T>& B, index_t ldb, T beta, std::vector<T>& C, index_t ldc) {
  gemm::naive::run(ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
}

template <class T>
std::vector<T> random_vec(index_t n, std::uint64_t seed) {
  return test::random_normal<T>(static_cast<std::size_t>(n), seed);
}

template <class T>
std::vector<T> device_round_trip(device_be& dev, const std::vector<T>& v, auto&& work) {
  buffer<device_be> b(dev, v.size() * sizeof(T));
  dev.from_host(b.data(), v.data(), v.size() * sizeof(T));
  work(static_cast<T*>(b.data()));
  std::vector<T> out(v.size());
  dev.to_host(out.data(), b.data(), v.size() * sizeof(T));
  return out;
}

}  // namespace

// =====================================================================================================
// Backend primitives
// =====================================================================================================

TEST_CASE("cuda: a device is present and the backend reports its shape") {
  CHECK(backend::cuda_device_count() >= 1);
  device_be dev;
  CHECK(dev.device() == 0);
  CHECK(dev.sm_count() >= 1);
  CHECK(device_be::is_device);
  CHECK(device_be::memory_tier == tier::device);
  CHECK(device_be::name == "cuda");
  CHECK_THROWS_WITH_AS(device_be(backend::cuda_device_count()), doctest::Contains("backend::cuda: device"), lwcl::error);
}

TEST_CASE("cuda: from_host, copy, to_host and fill_zero move the right bytes") {
  device_be dev;
  std::vector<float> ramp(1000);
  for (std::size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<float>(i) + 0.5f;
  buffer<device_be> a(dev, ramp.size() * sizeof(float)), b(dev, ramp.size() * sizeof(float));
  dev.from_host(a.data(), ramp.data(), a.bytes());
  dev.fill_zero(b.data(), b.bytes());
  // Copy elements [100, 700) of a to [200, 800) of b, then zero [300, 400) of b.
  dev.copy(static_cast<float*>(b.data()) + 200, static_cast<const float*>(a.data()) + 100, 600 * sizeof(float));
  dev.fill_zero(static_cast<float*>(b.data()) + 300, 100 * sizeof(float));
  std::vector<float> got(ramp.size(), -1.0f);
  dev.to_host(got.data(), b.data(), b.bytes());
  int wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float want = (i >= 200 && i < 800 && !(i >= 300 && i < 400)) ? ramp[i - 100] : 0.0f;
    wrong += got[i] != want;
  }
  CHECK(wrong == 0);

  // owned_tensor zero-fills through the backend.
  owned_tensor<device_be> t(dev, dtype::f32, shape{7, 9});
  std::vector<float> z(63, 1.0f);
  dev.to_host(z.data(), t.view().data, t.view().bytes());
  for (float v : z) CHECK(v == 0.0f);
}

TEST_CASE("cuda: for_each visits every index exactly once") {
  device_be dev;
  // Larger than one full grid (8 waves of 256-thread blocks per SM) so the grid-stride loop turns.
  for (index_t n : {index_t{1}, index_t{1000}, index_t{5'000'003}}) {
    for (index_t cost : {index_t{1}, index_t{1000}}) {
      INFO("n = ", n, ", cost = ", cost);
      std::vector<std::int32_t> zero(static_cast<std::size_t>(n), 0);
      const auto got = device_round_trip(dev, zero, [&](std::int32_t* p) { dev.for_each(n, mark_each{p}, cost); });
      index_t wrong = 0;
      for (index_t i = 0; i < n; ++i) wrong += got[static_cast<std::size_t>(i)] != 1 + static_cast<std::int32_t>(i % 7);
      CHECK(wrong == 0);
    }
  }
  // n <= 0 launches nothing.
  dev.for_each(0, mark_each{nullptr});
  dev.synchronize();
}

TEST_CASE("cuda: launch shapes spread expensive rows over the SMs and cap cheap grids") {
  using backend::cuda_detail::for_each_shape;
  const auto rows = for_each_shape(1024, 8 * 768, 132);
  CHECK(rows.threads == 32);
  CHECK(rows.blocks == 32);
  const auto cheap = for_each_shape(100'000'000, 1, 132);
  CHECK(cheap.threads == 256);
  CHECK(cheap.blocks == 8 * 132);
  const auto tiny = for_each_shape(5, 1, 132);
  CHECK(tiny.blocks == 1);
  const auto many_rows = for_each_shape(1'000'000, 1000, 132);
  CHECK(many_rows.threads == 256);
}

TEST_CASE_TEMPLATE("cuda: gemm matches the reference for every transpose, with padded leading dimensions", T, float,
                   double) {
  device_be dev;
  const double tol = std::is_same_v<T, float> ? fwd_tol : f64_tol;
  const index_t M = 37, N = 53, K = 29;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      INFO("ta = ", ta, ", tb = ", tb);
      const index_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
      const auto A = random_vec<T>((ta ? K : M) * lda, 11);
      const auto B = random_vec<T>((tb ? N : K) * ldb, 12);
      const auto C0 = random_vec<T>(M * ldc, 13);
      const T alpha = T(0.75), beta = T(-0.5);
      auto want = C0;
      reference_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, want, ldc);

      buffer<device_be> dA(dev, A.size() * sizeof(T)), dB(dev, B.size() * sizeof(T));
      dev.from_host(dA.data(), A.data(), dA.bytes());
      dev.from_host(dB.data(), B.data(), dB.bytes());
      const auto got = device_round_trip(dev, C0, [&](T* C) {
        dev.gemm(ta, tb, M, N, K, alpha, static_cast<const T*>(dA.data()), lda, static_cast<const T*>(dB.data()), ldb,
                 beta, C, ldc);
      });
      CHECK(rel_error(got, want) < tol);
      // The padding columns of C are left alone.
      index_t touched = 0;
      for (index_t i = 0; i < M; ++i)
        for (index_t j = N; j < ldc; ++j) touched += got[static_cast<std::size_t>(i * ldc + j)] != C0[static_cast<std::size_t>(i * ldc + j)];
      CHECK(touched == 0);
    }
  }
}

TEST_CASE("cuda: gemm_batched matches per-batch reference GEMMs for every transpose") {
  device_be dev;
  const index_t M = 19, N = 24, K = 33, batch = 3;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      INFO("ta = ", ta, ", tb = ", tb);
      const index_t lda = (ta ? M : K) + 1, ldb = (tb ? K : N) + 2, ldc = N + 3;
      // Strides larger than one matrix, so a wrong stride reads the gaps.
      const index_t sA = (ta ? K : M) * lda + 7, sB = (tb ? N : K) * ldb + 5, sC = M * ldc + 4;
      const auto A = random_vec<float>(batch * sA, 21);
      const auto B = random_vec<float>(batch * sB, 22);
      const auto C0 = random_vec<float>(batch * sC, 23);
      auto want = C0;
      for (index_t b = 0; b < batch; ++b)
        gemm::naive::run(ta, tb, M, N, K, 1.25f, A.data() + b * sA, lda, B.data() + b * sB, ldb, 0.5f, want.data() + b * sC,
                         ldc);
      buffer<device_be> dA(dev, A.size() * sizeof(float)), dB(dev, B.size() * sizeof(float));
      dev.from_host(dA.data(), A.data(), dA.bytes());
      dev.from_host(dB.data(), B.data(), dB.bytes());
      const auto got = device_round_trip(dev, C0, [&](float* C) {
        dev.gemm_batched(ta, tb, M, N, K, 1.25f, static_cast<const float*>(dA.data()), lda, sA,
                         static_cast<const float*>(dB.data()), ldb, sB, 0.5f, C, ldc, sC, batch);
      });
      CHECK(rel_error(got, want) < fwd_tol);
    }
  }
}

TEST_CASE_TEMPLATE("cuda: sum and sum_squares accumulate in double like the host", T, float, double) {
  device_be dev;
  host_be host;
  for (index_t n : {index_t{1}, index_t{1000}, index_t{(1 << 20) + 3}}) {
    INFO("n = ", n);
    auto x = random_vec<T>(n, 31);
    for (auto& v : x) v += T(0.25);  // a non-zero mean, so the sum is not just noise
    double abs_sum = 0;
    for (auto v : x) abs_sum += std::abs(static_cast<double>(v));
    buffer<device_be> d(dev, x.size() * sizeof(T));
    dev.from_host(d.data(), x.data(), d.bytes());
    const double s = dev.sum(static_cast<const T*>(d.data()), n);
    const double s2 = dev.sum_squares(static_cast<const T*>(d.data()), n);
    const double hs = host.sum(x.data(), n), hs2 = host.sum_squares(x.data(), n);
    // Only the order of the double additions differs.
    CHECK(std::abs(s - hs) <= f64_tol * abs_sum);
    CHECK(std::abs(s2 - hs2) <= f64_tol * hs2);
  }
  CHECK(dev.sum(static_cast<const T*>(nullptr), 0) == 0.0);
}

TEST_CASE("cuda: device allocations are reported to the memory tracker as tier::device") {
  device_be dev;
  const std::size_t before = memory().current(tier::device);
  memory().reset_peak(tier::device);
  {
    buffer<device_be> a(dev, 1 << 20);
    CHECK(memory().current(tier::device) == before + (1 << 20));
    {
      owned_tensor<device_be> t(dev, dtype::f32, shape{256, 4});
      CHECK(memory().current(tier::device) == before + (1 << 20) + 4096);
    }
    CHECK(memory().current(tier::device) == before + (1 << 20));
    CHECK(memory().peak(tier::device) == before + (1 << 20) + 4096);
    // The reduction's scratch is tracked too, and returned.
    dev.fill_zero(a.data(), a.bytes());
    memory().reset_peak(tier::device);
    CHECK(dev.sum(static_cast<const float*>(a.data()), 1 << 18) == 0.0);
    CHECK(memory().current(tier::device) == before + (1 << 20));
    CHECK(memory().peak(tier::device) > before + (1 << 20));
  }
  CHECK(memory().current(tier::device) == before);
  // A backend's cuBLAS workspace (4 or 32 MiB) is tracked for as long as the backend lives.
  {
    device_be second;
    CHECK(memory().current(tier::device) >= before + (std::size_t{4} << 20));
  }
  CHECK(memory().current(tier::device) == before);
  // Device bytes are not host bytes.
  const std::size_t host_before = memory().current(tier::host);
  buffer<device_be> c(dev, 4096);
  CHECK(memory().current(tier::host) == host_before);
}

TEST_CASE("cuda: pinned host memory is reported as tier::pinned and feeds the copy stream") {
  device_be dev;
  const std::size_t before = memory().current(tier::pinned);
  const index_t n = 1 << 16;
  {
    backend::pinned_buffer in(n * sizeof(float)), out(n * sizeof(float));
    CHECK(memory().current(tier::pinned) == before + 2 * n * sizeof(float));
    for (index_t i = 0; i < n; ++i) in.as<float>()[i] = static_cast<float>(i % 1013);
    buffer<device_be> d(dev, n * sizeof(float));
    // The allocation is ordered on the compute stream; then pinned -> device on the copy stream, doubled
    // on the compute stream, device -> pinned on the copy stream again. The waits make this correct.
    dev.copies_wait_for_compute();
    dev.copy_async(d.data(), in.data(), in.bytes());
    dev.compute_wait_for_copies();
    dev.for_each(n, times_two{static_cast<float*>(d.data())});
    dev.copies_wait_for_compute();
    dev.copy_async(out.data(), d.data(), out.bytes());
    dev.synchronize_copies();
    index_t wrong = 0;
    for (index_t i = 0; i < n; ++i) wrong += out.as<float>()[i] != 2.0f * static_cast<float>(i % 1013);
    CHECK(wrong == 0);
    void* raw = dev.allocate_pinned_bytes(100);
    CHECK(memory().current(tier::pinned) == before + 2 * n * sizeof(float) + 100);
    dev.deallocate_pinned_bytes(raw, 100);
  }
  CHECK(memory().current(tier::pinned) == before);
}

TEST_CASE("cuda: CUDA and cuBLAS failures become lwcl::error naming the call, file and line") {
  device_be dev;
  const std::size_t before = memory().current(tier::device);
  // 1 PiB: refused by the pool; nothing is counted.
  CHECK_THROWS_WITH_AS(dev.allocate_bytes(std::size_t{1} << 50), doctest::Contains("cuda: cudaMallocFromPoolAsync"),
                       lwcl::error);
  CHECK(memory().current(tier::device) == before);
  CHECK_THROWS_WITH_AS(dev.allocate_bytes(std::size_t{1} << 50), doctest::Contains("lwcl/backend/cuda/cuda.cuh:"),
                       lwcl::error);
  // lda smaller than a row of A: cuBLAS rejects the arguments.
  buffer<device_be> d(dev, 64 * 64 * sizeof(float));
  const float* p = static_cast<const float*>(d.data());
  CHECK_THROWS_WITH_AS(dev.gemm(false, false, 8, 8, 8, 1.0f, p, 1, p, 8, 0.0f, static_cast<float*>(d.data()), 8),
                       doctest::Contains("cublas: cublasSgemm_64"), lwcl::error);
  // The backend still works afterwards: these errors are not sticky.
  std::vector<float> ones(64, 1.0f);
  dev.from_host(d.data(), ones.data(), 64 * sizeof(float));
  CHECK(dev.sum(p, 64) == 64.0);
}

// =====================================================================================================
// Ops: the same computation on backend::host and backend::cuda
// =====================================================================================================

TEST_CASE("cuda: layernorm forward and backward match the host backend") {
  const index_t B = 3, T = 37, C = 96;
  const shape xs{B, T, C};
  const auto x = randn(B * T * C, 101, 2.0), w = randn(C, 102), b = randn(C, 103), dout = randn(B * T * C, 104);
  // Gradients start non-zero: the backward pass must add to them on both backends.
  const auto dx0 = randn(B * T * C, 105), dw0 = randn(C, 106), db0 = randn(C, 107);
  for (bool with_bias : {true, false}) {
    INFO("bias: ", with_bias);
    host_vs_device([&](auto& be) {
      arena a(be);
      const tensor tx = a.upload(x, xs), tw = a.upload(w, {C}), tb = with_bias ? a.upload(b, {C}) : tensor();
      const tensor out = a.template zeros<float>(xs), mean = a.template zeros<float>({B, T}),
                   rstd = a.template zeros<float>({B, T});
      ops::layernorm_forward(be, out, mean, rstd, tx, tw, tb);
      const tensor dx = a.upload(dx0, xs), dw = a.upload(dw0, {C}), db = with_bias ? a.upload(db0, {C}) : tensor();
      ops::layernorm_backward(be, dx, dw, db, a.upload(dout, xs), tx, tw, mean, rstd);
      results r;
      r.add("out", a.get(out), fwd_tol);
      r.add("mean", a.get(mean), fwd_tol);
      r.add("rstd", a.get(rstd), fwd_tol);
      r.add("dx", a.get(dx), bwd_tol);
      r.add("dweight", a.get(dw), bwd_tol);
      if (with_bias) r.add("dbias", a.get(db), bwd_tol);
      return r;
    });
  }
}

TEST_CASE("cuda: rmsnorm forward and backward match the host backend") {
  const index_t B = 2, T = 41, C = 128;
  const shape xs{B, T, C};
  const auto x = randn(B * T * C, 111, 1.5), w = randn(C, 112), dout = randn(B * T * C, 113);
  const auto dx0 = randn(B * T * C, 114), dw0 = randn(C, 115);
  host_vs_device([&](auto& be) {
    arena a(be);
    const tensor tx = a.upload(x, xs), tw = a.upload(w, {C});
    const tensor out = a.template zeros<float>(xs), rstd = a.template zeros<float>({B, T});
    ops::rmsnorm_forward(be, out, rstd, tx, tw, 1e-6);
    const tensor dx = a.upload(dx0, xs), dw = a.upload(dw0, {C});
    ops::rmsnorm_backward(be, dx, dw, a.upload(dout, xs), tx, tw, rstd);
    results r;
    r.add("out", a.get(out), fwd_tol);
    r.add("rstd", a.get(rstd), fwd_tol);
    r.add("dx", a.get(dx), bwd_tol);
    r.add("dweight", a.get(dw), bwd_tol);
    return r;
  });
}

// The fused kernels of norms.cuh against the host row functors at model widths: C = 768 and 1000 (128
// threads per row, an odd tail) and 4096 (256 threads), plus C = 13000, whose row no longer fits the
// shared-memory cache (the kernels then re-read global memory; f64 backward at C = 4096 does too). Only
// the summation order of the row sums differs (block reduction against left to right), so f32 is held
// to fwd_tol / bwd_tol and f64 to f64_tol. The inputs have mean 1, not 0, so that the two-pass
// statistics matter; the one-pass variant (the benchmark's) is held to the same bounds on these rows.
TEST_CASE_TEMPLATE("cuda: fused layernorm and rmsnorm kernels match the host ops at C = 768, 1000, 4096, 13000", T, float,
                   double) {
  const double ftol = std::is_same_v<T, float> ? fwd_tol : f64_tol, btol = std::is_same_v<T, float> ? bwd_tol : f64_tol;
  for (const index_t C : {index_t{768}, index_t{1000}, index_t{4096}, index_t{13000}}) {
    INFO("C = ", C);
    const index_t N = C > 4096 ? 6 : 45;
    const shape xs{N, C};
    auto x = random_vec<T>(N * C, 201);
    for (T& v : x) v = T(2) * v + T(1);
    const auto w = random_vec<T>(C, 202), b = random_vec<T>(C, 203), dout = random_vec<T>(N * C, 204);
    const auto dx0 = random_vec<T>(N * C, 205), dw0 = random_vec<T>(C, 206), db0 = random_vec<T>(C, 207);
    host_vs_device([&](auto& be) {
      arena a(be);
      const tensor tx = a.upload(x, xs), tw = a.upload(w, {C}), tb = a.upload(b, {C}), tdy = a.upload(dout, xs);
      results r;
      {
        const tensor out = a.template zeros<T>(xs), mean = a.template zeros<T>({N}), rstd = a.template zeros<T>({N});
        ops::layernorm_forward(be, out, mean, rstd, tx, tw, tb);
        const tensor dx = a.upload(dx0, xs), dw = a.upload(dw0, {C}), db = a.upload(db0, {C});
        ops::layernorm_backward(be, dx, dw, db, tdy, tx, tw, mean, rstd);
        r.add("layernorm out", a.get(out), ftol);
        r.add("layernorm mean", a.get(mean), ftol);
        r.add("layernorm rstd", a.get(rstd), ftol);
        r.add("layernorm dx", a.get(dx), btol);
        r.add("layernorm dweight", a.get(dw), btol);
        r.add("layernorm dbias", a.get(db), btol);
      }
      {
        // The host has one layernorm; the device runs the one-pass statistics here.
        const tensor out = a.template zeros<T>(xs), mean = a.template zeros<T>({N}), rstd = a.template zeros<T>({N});
        if constexpr (std::remove_cvref_t<decltype(be)>::is_device)
          backend::cuda_layernorm_forward<backend::norm_stats::one_pass>(be, out, mean, rstd, tx, tw, tb, 1e-5);
        else
          ops::layernorm_forward(be, out, mean, rstd, tx, tw, tb);
        r.add("layernorm one-pass out", a.get(out), ftol);
        r.add("layernorm one-pass rstd", a.get(rstd), ftol);
      }
      {
        const tensor out = a.template zeros<T>(xs), rstd = a.template zeros<T>({N});
        ops::rmsnorm_forward(be, out, rstd, tx, tw, 1e-6);
        const tensor dx = a.upload(dx0, xs), dw = a.upload(dw0, {C});
        ops::rmsnorm_backward(be, dx, dw, tdy, tx, tw, rstd);
        r.add("rmsnorm out", a.get(out), ftol);
        r.add("rmsnorm rstd", a.get(rstd), ftol);
        r.add("rmsnorm dx", a.get(dx), btol);
        r.add("rmsnorm dweight", a.get(dw), btol);
      }
      return r;
    });
  }
}

TEST_CASE("cuda: gelu (tanh and erf), silu and swiglu match the host backend") {
  const index_t N = 17, C = 301;
  const shape s{N, C};
  const auto x = randn(N * C, 121, 3.0), up = randn(N * C, 122), dout = randn(N * C, 123);
  const auto d0 = randn(N * C, 124), d1 = randn(N * C, 125);
  for (auto kind : {ops::gelu_kind::tanh, ops::gelu_kind::erf}) {
    INFO("gelu kind ", kind == ops::gelu_kind::tanh ? "tanh" : "erf");
    host_vs_device([&](auto& be) {
      arena a(be);
      const tensor tx = a.upload(x, s), out = a.template zeros<float>(s), dx = a.upload(d0, s);
      ops::gelu_forward(be, out, tx, kind);
      ops::gelu_backward(be, dx, a.upload(dout, s), tx, kind);
      results r;
      r.add("out", a.get(out), fwd_tol);
      r.add("dinp", a.get(dx), bwd_tol);
      return r;
    });
  }
  host_vs_device([&](auto& be) {
    arena a(be);
    const tensor tx = a.upload(x, s), out = a.template zeros<float>(s), dx = a.upload(d0, s);
    ops::silu_forward(be, out, tx);
    ops::silu_backward(be, dx, a.upload(dout, s), tx);
    results r;
    r.add("silu out", a.get(out), fwd_tol);
    r.add("silu dinp", a.get(dx), bwd_tol);
    return r;
  });
  host_vs_device([&](auto& be) {
    arena a(be);
    const tensor gate = a.upload(x, s), tu = a.upload(up, s), out = a.template zeros<float>(s);
    const tensor dgate = a.upload(d0, s), dup = a.upload(d1, s);
    ops::swiglu_forward(be, out, gate, tu);
    ops::swiglu_backward(be, dgate, dup, a.upload(dout, s), gate, tu);
    results r;
    r.add("swiglu out", a.get(out), fwd_tol);
    r.add("swiglu dgate", a.get(dgate), bwd_tol);
    r.add("swiglu dup", a.get(dup), bwd_tol);
    return r;
  });
}

TEST_CASE("cuda: embedding forward and backward match the host backend, with and without positions") {
  const index_t B = 3, T = 29, C = 64, V = 97, P = 40;
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(B * T));
  const philox_stream pick{131, 3};
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::int32_t>(pick.bits(i) % V);
  tokens[1] = tokens[5] = tokens[40] = 7;  // repeated ids: their gradients must add up
  const auto wte = randn(V * C, 132), wpe = randn(P * C, 133), dout = randn(B * T * C, 134);
  const auto dwte0 = randn(V * C, 135), dwpe0 = randn(P * C, 136);
  for (bool with_pos : {true, false}) {
    INFO("positions: ", with_pos);
    host_vs_device([&](auto& be) {
      arena a(be);
      const tensor tt = a.upload(tokens, {B, T}), twte = a.upload(wte, {V, C}),
                   twpe = with_pos ? a.upload(wpe, {P, C}) : tensor();
      const tensor out = a.template zeros<float>({B, T, C});
      ops::embedding_forward(be, out, tt, twte, twpe);
      const tensor dwte = a.upload(dwte0, {V, C}), dwpe = with_pos ? a.upload(dwpe0, {P, C}) : tensor();
      ops::embedding_backward(be, dwte, dwpe, a.upload(dout, {B, T, C}), tt);
      results r;
      r.add("out", a.get(out), fwd_tol);
      r.add("dwte", a.get(dwte), bwd_tol);
      if (with_pos) r.add("dwpe", a.get(dwpe), bwd_tol);
      return r;
    });
  }
}

TEST_CASE("cuda: add, accumulate, scale, mix and copy match the host backend") {
  const index_t n = 12345;
  const shape s{5, n / 5};
  const auto x = randn(n, 141), y = randn(n, 142), z = randn(n, 143);
  host_vs_device([&](auto& be) {
    arena a(be);
    const tensor ta = a.upload(x, s), tb = a.upload(y, s), out = a.template zeros<float>(s);
    ops::add(be, out, ta, tb);
    const tensor in_place = a.upload(x, s);
    ops::add(be, in_place, in_place, tb);  // out aliasing an input
    const tensor acc = a.upload(z, s);
    ops::accumulate(be, acc, ta);
    const tensor scaled = a.upload(z, s);
    ops::scale(be, scaled, -0.375);
    const tensor copied = a.template zeros<float>(s);
    ops::copy(be, copied, tb);
    const tensor mixed = a.template zeros<float>(s);
    ops::mix(be, mixed, ta, tb, 0.3);
    results r;
    r.add("add", a.get(out), fwd_tol);
    r.add("add in place", a.get(in_place), fwd_tol);
    r.add("accumulate", a.get(acc), fwd_tol);
    r.add("scale", a.get(scaled), fwd_tol);
    r.add("copy", a.get(copied), exact);
    r.add("mix", a.get(mixed), fwd_tol);
    return r;
  });
}

TEST_CASE("cuda: cross_entropy loss and gradient match the host backend, ignored targets included") {
  const index_t N = 45, V = 301;
  const auto logits = randn(N * V, 151, 4.0), dlogits0 = randn(N * V, 152, 0.01);
  std::vector<std::int32_t> targets(static_cast<std::size_t>(N));
  const philox_stream pick{153, 3};
  for (std::size_t i = 0; i < targets.size(); ++i) targets[i] = static_cast<std::int32_t>(pick.bits(i) % V);
  targets[3] = targets[17] = targets[44] = -1;
  host_vs_device([&](auto& be) {
    arena a(be);
    const tensor tl = a.upload(logits, {N, V}), tt = a.upload(targets, {N});
    const tensor row_loss = a.template zeros<float>({N}), dl = a.upload(dlogits0, {N, V});
    const double loss = ops::cross_entropy(be, dl, row_loss, tl, tt, 0.5);
    // Loss only, no gradient.
    const tensor row_loss2 = a.template zeros<float>({N});
    const double loss_only = ops::cross_entropy(be, tensor(), row_loss2, tl, tt);
    results r;
    r.add_scalar("loss", loss, fwd_tol);
    r.add_scalar("loss without gradient", loss_only, fwd_tol);
    r.add("row_loss", a.get(row_loss), fwd_tol);
    r.add("dlogits", a.get(dl), bwd_tol);
    return r;
  });
}

// The fused kernel of cross_entropy.cuh against the host row functor at a GPT-2 vocabulary (V = 50257,
// odd, so no row is aligned) and a short one (V = 1000, fewer than 4 logits per thread), N = 64 rows
// with some ignored. The host sums each row left to right after finding its maximum; the kernel merges
// (max, normaliser) pairs across the block, so only the summation order differs: f32 within fwd_tol /
// bwd_tol, f64 within f64_tol. The gradient is scaled to order 1 so that it, not the non-zero starting
// dlogits, dominates the comparison; the loss-only call is compared too.
TEST_CASE_TEMPLATE("cuda: fused cross_entropy matches the host op at V = 50257 and 1000", T, float, double) {
  const double ftol = std::is_same_v<T, float> ? fwd_tol : f64_tol, btol = std::is_same_v<T, float> ? bwd_tol : f64_tol;
  const index_t N = 64;
  for (const index_t V : {index_t{50257}, index_t{1000}}) {
    INFO("V = ", V);
    auto logits = random_vec<T>(N * V, 251);
    for (T& v : logits) v *= T(3);
    auto dlogits0 = random_vec<T>(N * V, 252);
    for (T& v : dlogits0) v *= T(0.01);
    std::vector<std::int32_t> targets(static_cast<std::size_t>(N));
    const philox_stream pick{253, 3};
    for (std::size_t i = 0; i < targets.size(); ++i) targets[i] = static_cast<std::int32_t>(pick.bits(i) % V);
    targets[0] = targets[9] = targets[31] = targets[63] = -1;
    targets[5] = static_cast<std::int32_t>(V - 1);  // the last logit of a row, the tail of the strided loops
    targets[6] = 0;
    host_vs_device([&](auto& be) {
      arena a(be);
      const tensor tl = a.upload(logits, {N, V}), tt = a.upload(targets, {N});
      const tensor row_loss = a.template zeros<T>({N}), dl = a.upload(dlogits0, {N, V});
      const double loss = ops::cross_entropy(be, dl, row_loss, tl, tt, static_cast<double>(N));
      const tensor row_loss2 = a.template zeros<T>({N});
      const double loss_only = ops::cross_entropy(be, tensor(), row_loss2, tl, tt);
      results r;
      r.add_scalar("loss", loss, ftol);
      r.add_scalar("loss without gradient", loss_only, ftol);
      r.add("row_loss", a.get(row_loss), ftol);
      r.add("row_loss without gradient", a.get(row_loss2), ftol);
      r.add("dlogits", a.get(dl), btol);
      return r;
    });
  }
}

TEST_CASE("cuda: distillation losses (mse, nmse, cosine, logit KL) match the host backend") {
  const index_t rows = 37, C = 160;
  const shape s{rows, C};
  const auto student = randn(rows * C, 161), teacher = randn(rows * C, 162), d0 = randn(rows * C, 163, 0.01);
  // Teacher = student + noise for the feature losses, so they sit in their realistic small-error regime.
  auto near = student;
  for (std::size_t i = 0; i < near.size(); ++i) near[i] += 0.1f * teacher[i];
  host_vs_device([&](auto& be) {
    arena a(be);
    const tensor ts = a.upload(student, s), tnear = a.upload(near, s), tt = a.upload(teacher, s);
    results r;
    {
      const tensor d = a.upload(d0, s), scratch = a.template zeros<float>({2 * rows});
      r.add_scalar("mse", ops::mse_loss(be, d, scratch, ts, tnear, 0.5), fwd_tol);
      r.add("mse dstudent", a.get(d), bwd_tol);
    }
    {
      const tensor d = a.upload(d0, s), scratch = a.template zeros<float>({2 * rows});
      r.add_scalar("nmse", ops::nmse_loss(be, d, scratch, ts, tnear, 0.5), fwd_tol);
      r.add("nmse dstudent", a.get(d), bwd_tol);
    }
    {
      const tensor d = a.upload(d0, s), scratch = a.template zeros<float>({2 * rows});
      r.add_scalar("cosine", ops::cosine_loss(be, d, scratch, ts, tnear, 0.5), fwd_tol);
      r.add("cosine dstudent", a.get(d), bwd_tol);
    }
    {
      const tensor d = a.upload(d0, s), scratch = a.template zeros<float>({2 * rows});
      r.add_scalar("logit kl", ops::logit_kl_loss(be, d, scratch, ts, tt, 2.0, 0.5), fwd_tol);
      r.add("logit kl dstudent", a.get(d), bwd_tol);
    }
    return r;
  });
}

TEST_CASE("cuda: linear forward and backward match the host backend") {
  const index_t B = 2, T = 37, IC = 96, OC = 80;
  const auto x = randn(B * T * IC, 171), w = randn(OC * IC, 172, 0.1), b = randn(OC, 173), dout = randn(B * T * OC, 174);
  const auto dx0 = randn(B * T * IC, 175), dw0 = randn(OC * IC, 176), db0 = randn(OC, 177);
  for (bool with_bias : {true, false}) {
    for (bool with_dinp : {true, false}) {
      INFO("bias: ", with_bias, ", dinp: ", with_dinp);
      host_vs_device([&](auto& be) {
        arena a(be);
        const tensor tx = a.upload(x, {B, T, IC}), tw = a.upload(w, {OC, IC}), tb = with_bias ? a.upload(b, {OC}) : tensor();
        const tensor out = a.template zeros<float>({B, T, OC});
        ops::linear_forward(be, out, tx, tw, tb);
        const tensor dx = with_dinp ? a.upload(dx0, {B, T, IC}) : tensor(), dw = a.upload(dw0, {OC, IC}),
                     db = with_bias ? a.upload(db0, {OC}) : tensor();
        ops::linear_backward(be, dx, dw, db, a.upload(dout, {B, T, OC}), tx, tw);
        results r;
        r.add("out", a.get(out), fwd_tol);
        if (with_dinp) r.add("dinp", a.get(dx), bwd_tol);
        r.add("dweight", a.get(dw), bwd_tol);
        if (with_bias) r.add("dbias", a.get(db), bwd_tol);
        return r;
      });
    }
  }
}

TEST_CASE("cuda: rope forward (out of place and in place) and backward match the host backend") {
  const index_t B = 2, T = 23, H = 4, D = 32;
  const shape s{B, T, H, D};
  const auto x = randn(B * T * H * D, 181), dout = randn(B * T * H * D, 182), dx0 = randn(B * T * H * D, 183);
  for (double theta : {10000.0, 500000.0}) {
    INFO("theta = ", theta);
    host_vs_device([&](auto& be) {
      arena a(be);
      const tensor tx = a.upload(x, s), out = a.template zeros<float>(s);
      ops::rope_forward(be, out, tx, theta, 5);
      const tensor in_place = a.upload(x, s);
      ops::rope_forward(be, in_place, in_place, theta, 5);
      const tensor dx = a.upload(dx0, s);
      ops::rope_backward(be, dx, a.upload(dout, s), theta, 5);
      results r;
      r.add("out", a.get(out), fwd_tol);
      r.add("out in place", a.get(in_place), fwd_tol);
      r.add("dinp", a.get(dx), bwd_tol);
      return r;
    });
  }
}

TEST_CASE("cuda: attention forward and backward match the host backend (GQA, causal and bidirectional)") {
  const index_t B = 2, T = 33, H = 6, KVH = 2, D = 16;
  const shape qs{B, T, H, D}, kvs{B, T, KVH, D}, ps{B, H, T, T};
  const auto q = randn(B * T * H * D, 191), k = randn(B * T * KVH * D, 192), v = randn(B * T * KVH * D, 193);
  const auto dout = randn(B * T * H * D, 194);
  const auto dq0 = randn(B * T * H * D, 195), dk0 = randn(B * T * KVH * D, 196), dv0 = randn(B * T * KVH * D, 197);
  for (bool causal : {true, false}) {
    INFO("causal: ", causal);
    host_vs_device([&](auto& be) {
      arena a(be);
      const tensor tq = a.upload(q, qs), tk = a.upload(k, kvs), tv = a.upload(v, kvs);
      const tensor out = a.template zeros<float>(qs), probs = a.template zeros<float>(ps);
      ops::attention_forward(be, out, probs, tq, tk, tv, causal);
      const tensor dq = a.upload(dq0, qs), dk = a.upload(dk0, kvs), dv = a.upload(dv0, kvs);
      const tensor dprobs = a.template zeros<float>(ps);
      ops::attention_backward(be, dq, dk, dv, dprobs, a.upload(dout, qs), tq, tk, tv, probs, causal);
      results r;
      r.add("out", a.get(out), fwd_tol);
      r.add("probs", a.get(probs), fwd_tol);
      r.add("dq", a.get(dq), bwd_tol);
      r.add("dk", a.get(dk), bwd_tol);
      r.add("dv", a.get(dv), bwd_tol);
      return r;
    });
  }
}

TEST_CASE("cuda: attention over a key/value cache matches the host backend (GQA, 9 cached positions, 4 new)") {
  const index_t n = 4, past = 9, cap = 16, H = 6, KVH = 2, D = 16;
  const shape qs{1, n, H, D}, cs{1, cap, KVH, D};
  const auto q = randn(n * H * D, 201), k = randn(cap * KVH * D, 202), v = randn(cap * KVH * D, 203);
  host_vs_device([&](auto& be) {
    arena a(be);
    const tensor tq = a.upload(q, qs), tk = a.upload(k, cs), tv = a.upload(v, cs);
    const tensor out = a.template zeros<float>(qs), probs = a.template zeros<float>(shape{H, n, past + n});
    ops::attention_cached_forward(be, out, probs, tq, tk, tv, past);
    results r;
    r.add("out", a.get(out), fwd_tol);
    r.add("probs", a.get(probs), fwd_tol);
    return r;
  });
}

// The forward runs the tiled kernel on the device and the row functor on the host: both sum each score
// over D in the same order and share the online-softmax update, so they differ by FMA contraction and
// expf's last bits (fwd_tol, out and lse). The backward runs the tiled kernels on the device and the
// row functors on the host, from those slightly different forward results (bwd_tol). T = 1000 is not
// a multiple of any tile.
TEST_CASE("cuda: flash attention (tiled kernels) matches the host flash op end to end (GQA, D = 64 and 128)") {
  const index_t B = 2, T = 1000, H = 4, KVH = 2;
  for (index_t D : {index_t(64), index_t(128)}) {
    const shape qs{B, T, H, D}, kvs{B, T, KVH, D}, ls{B, H, T};
    const auto q = randn(qs.numel(), 201), k = randn(kvs.numel(), 202), v = randn(kvs.numel(), 203);
    const auto dout = randn(qs.numel(), 204);
    const auto dq0 = randn(qs.numel(), 205), dk0 = randn(kvs.numel(), 206), dv0 = randn(kvs.numel(), 207);
    for (bool causal : {true, false}) {
      INFO("D: ", D, ", causal: ", causal);
      host_vs_device([&](auto& be) {
        arena a(be);
        const tensor tq = a.upload(q, qs), tk = a.upload(k, kvs), tv = a.upload(v, kvs);
        const tensor out = a.template zeros<float>(qs), lse = a.template zeros<float>(ls);
        ops::flash_attention_forward(be, out, lse, tq, tk, tv, causal);
        const tensor dq = a.upload(dq0, qs), dk = a.upload(dk0, kvs), dv = a.upload(dv0, kvs);
        const tensor delta = a.template zeros<float>(ls);
        ops::flash_attention_backward(be, dq, dk, dv, delta, a.upload(dout, qs), tq, tk, tv, out, lse, causal);
        results r;
        r.add("out", a.get(out), fwd_tol);
        r.add("lse", a.get(lse), fwd_tol);
        r.add("delta", a.get(delta), bwd_tol);
        r.add("dq", a.get(dq), bwd_tol);
        r.add("dk", a.get(dk), bwd_tol);
        r.add("dv", a.get(dv), bwd_tol);
        return r;
      });
    }
  }
}

// The tiled backward alone: out and lse come from the host forward and are uploaded to both backends,
// so dq, dk, dv and delta differ only by the backward's own rounding. The kernels continue the host
// functors' sums (same order over D, keys and query rows, from the gradients' old values), so what
// remains is FMA contraction and expf's last bits. dq, dk and dv start from random values (the
// backward accumulates); T = 1 and 37 are a partial tile only, 1000 ends in one; KVH = 2 of H = 8 is
// GQA (a kv head sums 4 query heads), KVH = H = 4 is MHA; D = 64 forms dk and dv in one pass, D = 128
// in two, and D = 80 leaves part of the accumulator unused.
TEST_CASE("cuda: flash attention backward (tiled kernels) matches the host row functors") {
  struct config {
    index_t B, T, H, KVH, D;
  };
  const config configs[] = {{2, 1, 8, 2, 64},   {2, 37, 8, 2, 64},  {1, 1000, 8, 2, 64}, {2, 37, 4, 4, 64},
                            {1, 1000, 4, 4, 64}, {2, 1, 8, 2, 128},  {2, 37, 8, 2, 128}, {1, 1000, 8, 2, 128},
                            {2, 37, 4, 4, 128},  {1, 1000, 4, 4, 128}, {1, 77, 6, 3, 80}};
  std::uint64_t seed = 300;
  for (const config& c : configs) {
    const shape qs{c.B, c.T, c.H, c.D}, kvs{c.B, c.T, c.KVH, c.D}, ls{c.B, c.H, c.T};
    const auto q = randn(qs.numel(), ++seed), k = randn(kvs.numel(), ++seed), v = randn(kvs.numel(), ++seed);
    const auto dout = randn(qs.numel(), ++seed);
    const auto dq0 = randn(qs.numel(), ++seed), dk0 = randn(kvs.numel(), ++seed), dv0 = randn(kvs.numel(), ++seed);
    for (bool causal : {true, false}) {
      INFO("B = ", c.B, ", T = ", c.T, ", H = ", c.H, ", KVH = ", c.KVH, ", D = ", c.D, ", causal: ", causal);
      std::vector<float> out(static_cast<std::size_t>(qs.numel())), lse(static_cast<std::size_t>(ls.numel()));
      {
        host_be host;
        auto q_copy = q, k_copy = k, v_copy = v;
        ops::flash_attention_forward(host, tensor(out.data(), qs), tensor(lse.data(), ls), tensor(q_copy.data(), qs),
                                     tensor(k_copy.data(), kvs), tensor(v_copy.data(), kvs), causal);
      }
      host_vs_device([&](auto& be) {
        arena a(be);
        const tensor dq = a.upload(dq0, qs), dk = a.upload(dk0, kvs), dv = a.upload(dv0, kvs);
        const tensor delta = a.upload(std::vector<float>(static_cast<std::size_t>(ls.numel()), 7.0f), ls);
        ops::flash_attention_backward(be, dq, dk, dv, delta, a.upload(dout, qs), a.upload(q, qs), a.upload(k, kvs),
                                      a.upload(v, kvs), a.upload(out, qs), a.upload(lse, ls), causal);
        results r;
        r.add("delta", a.get(delta), bwd_tol);
        r.add("dq", a.get(dq), bwd_tol);
        r.add("dk", a.get(dk), bwd_tol);
        r.add("dv", a.get(dv), bwd_tol);
        return r;
      });
    }
  }
}

// Run twice from the same inputs, the tiled backward gives the same bits: every gradient element has
// one writer, which adds its terms in a fixed order (no atomics).
TEST_CASE("cuda: flash attention backward (tiled kernels) is deterministic") {
  const index_t B = 2, T = 300, H = 8, KVH = 2, D = 64;
  const shape qs{B, T, H, D}, kvs{B, T, KVH, D}, ls{B, H, T};
  const auto q = randn(qs.numel(), 321), k = randn(kvs.numel(), 322), v = randn(kvs.numel(), 323);
  const auto dout = randn(qs.numel(), 324);
  device_be dev;
  arena a(dev);
  const tensor tq = a.upload(q, qs), tk = a.upload(k, kvs), tv = a.upload(v, kvs), tg = a.upload(dout, qs);
  const tensor out = a.zeros<float>(qs), lse = a.zeros<float>(ls);
  ops::flash_attention_forward(dev, out, lse, tq, tk, tv, true);
  std::vector<double> first[3];
  for (int run = 0; run < 2; ++run) {
    const tensor dq = a.zeros<float>(qs), dk = a.zeros<float>(kvs), dv = a.zeros<float>(kvs), delta = a.zeros<float>(ls);
    ops::flash_attention_backward(dev, dq, dk, dv, delta, tg, tq, tk, tv, out, lse, true);
    const std::vector<double> got[3] = {a.get(dq), a.get(dk), a.get(dv)};
    for (int i = 0; i < 3; ++i) {
      if (run == 0) {
        first[i] = got[i];
      } else {
        INFO("gradient ", i);
        CHECK(rel_error(got[i], first[i]) < exact);
      }
    }
  }
}

TEST_CASE("cuda: flash attention in f64 (row functor on the device) matches the host; D > 256 is refused") {
  const index_t B = 1, T = 77, H = 6, KVH = 3, D = 24;
  const shape qs{B, T, H, D}, kvs{B, T, KVH, D}, ls{B, H, T};
  const auto q = random_vec<double>(qs.numel(), 211), k = random_vec<double>(kvs.numel(), 212);
  const auto v = random_vec<double>(kvs.numel(), 213), dout = random_vec<double>(qs.numel(), 214);
  host_vs_device([&](auto& be) {
    arena a(be);
    const tensor tq = a.upload(q, qs), tk = a.upload(k, kvs), tv = a.upload(v, kvs);
    const tensor out = a.template zeros<double>(qs), lse = a.template zeros<double>(ls);
    ops::flash_attention_forward(be, out, lse, tq, tk, tv, true);
    const tensor dq = a.template zeros<double>(qs), dk = a.template zeros<double>(kvs), dv = a.template zeros<double>(kvs);
    const tensor delta = a.template zeros<double>(ls);
    ops::flash_attention_backward(be, dq, dk, dv, delta, a.upload(dout, qs), tq, tk, tv, out, lse, true);
    results r;
    r.add("out", a.get(out), f64_tol);
    r.add("lse", a.get(lse), f64_tol);
    r.add("dq", a.get(dq), f64_tol);
    r.add("dk", a.get(dk), f64_tol);
    r.add("dv", a.get(dv), f64_tol);
    return r;
  });

  device_be dev;
  arena a(dev);
  const index_t big = 264;
  const tensor q2 = a.zeros<float>({1, 4, 2, big}), kv2 = a.zeros<float>({1, 4, 1, big});
  const tensor out2 = a.zeros<float>({1, 4, 2, big}), lse2 = a.zeros<float>({1, 2, 4});
  CHECK_THROWS_WITH_AS(ops::flash_attention_forward(dev, out2, lse2, q2, kv2, kv2, false),
                       doctest::Contains("cuda_flash_attention_forward: head dimension D = 264 (q [1, 4, 2, 264]) exceeds 256"),
                       lwcl::error);
  const tensor dq2 = a.zeros<float>({1, 4, 2, big}), dkv2 = a.zeros<float>({1, 4, 1, big}), delta2 = a.zeros<float>({1, 2, 4});
  CHECK_THROWS_WITH_AS(ops::flash_attention_backward(dev, dq2, dkv2, dkv2, delta2, q2, q2, kv2, kv2, out2, lse2, false),
                       doctest::Contains("cuda_flash_attention_backward: head dimension D = 264 (q [1, 4, 2, 264]) exceeds 256"),
                       lwcl::error);
}

TEST_CASE("cuda: feature cache tiers on the device and in pinned memory round-trip bit for bit") {
  std::vector<float> f(2 * 8 * 16);
  for (std::size_t i = 0; i < f.size(); ++i) f[i] = std::sin(0.1f * static_cast<float>(i)) * 3.0f;
  const shape s{2, 8, 16};
  lwcl::cache::feature_cache<lwcl::cache::device_store> dev;
  lwcl::cache::feature_cache<lwcl::cache::pinned_host_store> pinned;
  const lwcl::cache::feature_key k{1, lwcl::cache::source::teacher, 0};
  dev.put(k, f.data(), s, 0);
  pinned.put(k, f.data(), s, 0);
  std::vector<float> a(f.size()), b(f.size());
  dev.get(k, a.data(), s);
  pinned.get(k, b.data(), s);
  CHECK(a == f);
  CHECK(b == f);
}
