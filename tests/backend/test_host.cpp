// backend::host: the OpenBLAS GEMM provider against the naive reference (every transpose combination,
// odd sizes, padded leading dimensions, alpha/beta, f32 and f64), batched GEMM, for_each coverage on
// its serial and parallel paths, sums, and memory accounting.
#include <doctest/doctest.h>

#include <omp.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <vector>

#include "lwcl/backend/host/gemm_naive.hpp"
#include "lwcl/backend/host/host.hpp"
#include "support/check.hpp"

using namespace lwcl;
using naive_backend = backend::host<gemm::naive>;

namespace {

struct gemm_case {
  bool ta, tb;
  index_t M, N, K;
  index_t pad;  // extra columns in every leading dimension
};

// Runs one GEMM through both providers on the same inputs; returns the relative error over the
// whole C array, padding included (padding must come back untouched).
template <class T>
double compare_providers(const gemm_case& c, T alpha, T beta, std::uint64_t seed) {
  const index_t rows_a = c.ta ? c.K : c.M, cols_a = c.ta ? c.M : c.K;
  const index_t rows_b = c.tb ? c.N : c.K, cols_b = c.tb ? c.K : c.N;
  const index_t lda = cols_a + c.pad, ldb = cols_b + c.pad, ldc = c.N + c.pad;
  const auto A = test::random_normal<T>(static_cast<std::size_t>(rows_a * lda), seed);
  const auto B = test::random_normal<T>(static_cast<std::size_t>(rows_b * ldb), seed + 1);
  auto C_ref = test::random_normal<T>(static_cast<std::size_t>(c.M * ldc), seed + 2);
  auto C = C_ref;
  naive_backend nb;
  backend::cpu ob;
  nb.gemm(c.ta, c.tb, c.M, c.N, c.K, alpha, A.data(), lda, B.data(), ldb, beta, C_ref.data(), ldc);
  ob.gemm(c.ta, c.tb, c.M, c.N, c.K, alpha, A.data(), lda, B.data(), ldb, beta, C.data(), ldc);
  const auto C0 = test::random_normal<T>(static_cast<std::size_t>(c.M * ldc), seed + 2);
  int padding_written = 0;
  for (index_t i = 0; i < c.M; ++i)
    for (index_t j = c.N; j < ldc; ++j) {
      const auto k = static_cast<std::size_t>(i * ldc + j);
      padding_written += (C[k] != C0[k]) + (C_ref[k] != C0[k]);
    }
  CHECK(padding_written == 0);
  return test::rel_error(C, C_ref);
}

}  // namespace

TEST_CASE("gemm::naive computes a hand-checked product with transposes") {
  // A = [[1, 2, 3], [4, 5, 6]], B = [[1, 0], [0, 1], [1, 1]]: A B = [[4, 5], [10, 11]].
  const std::vector<double> A = {1, 2, 3, 4, 5, 6}, At = {1, 4, 2, 5, 3, 6};
  const std::vector<double> B = {1, 0, 0, 1, 1, 1}, Bt = {1, 0, 1, 0, 1, 1};
  const std::vector<double> want = {4, 5, 10, 11};
  naive_backend nb;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      std::vector<double> C = {1, 1, 1, 1};
      nb.gemm(ta, tb, 2, 2, 3, 2.0, (ta ? At : A).data(), ta ? 2 : 3, (tb ? Bt : B).data(), tb ? 3 : 2, 0.5, C.data(), 2);
      for (int i = 0; i < 4; ++i) CHECK(C[static_cast<std::size_t>(i)] == 2 * want[static_cast<std::size_t>(i)] + 0.5);
    }
}

TEST_CASE_TEMPLATE("gemm through OpenBLAS equals gemm::naive", T, float, double) {
  const double tol = std::is_same_v<T, float> ? 2e-6 : 1e-14;
  const gemm_case sizes[] = {{false, false, 1, 1, 1, 0},  {false, false, 7, 5, 3, 0},  {false, false, 13, 17, 11, 3},
                             {false, false, 33, 1, 65, 1}, {false, false, 1, 29, 31, 5}, {false, false, 64, 48, 80, 0},
                             {false, false, 37, 41, 129, 7}};
  std::uint64_t seed = 10;
  for (const auto& base : sizes)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        gemm_case c = base;
        c.ta = ta;
        c.tb = tb;
        CAPTURE(ta);
        CAPTURE(tb);
        CAPTURE(c.M);
        CAPTURE(c.N);
        CAPTURE(c.K);
        CAPTURE(c.pad);
        CHECK(compare_providers<T>(c, T(1), T(0), seed++) < tol);
        CHECK(compare_providers<T>(c, T(0.75), T(-1.25), seed++) < tol);
        CHECK(compare_providers<T>(c, T(-2), T(1), seed++) < tol);
      }
}

TEST_CASE_TEMPLATE("gemm edge cases: beta 0 ignores C, K 0 scales C, M or N 0 does nothing", T, float, double) {
  backend::cpu ob;
  naive_backend nb;
  const std::vector<T> A = {1, 2, 3, 4}, B = {1, 1, 1, 1};
  for (auto run : {+[](const T* a, const T* b, T beta, T* c, index_t K) { backend::cpu{}.gemm(false, false, 2, 2, K, T(1), a, 2, b, 2, beta, c, 2); },
                   +[](const T* a, const T* b, T beta, T* c, index_t K) { naive_backend{}.gemm(false, false, 2, 2, K, T(1), a, 2, b, 2, beta, c, 2); }}) {
    std::vector<T> C(4, std::numeric_limits<T>::quiet_NaN());
    run(A.data(), B.data(), T(0), C.data(), 2);
    CHECK(C == std::vector<T>{3, 3, 7, 7});
    std::vector<T> D = {1, 2, 3, 4};
    run(A.data(), B.data(), T(3), D.data(), 0);
    CHECK(D == std::vector<T>{3, 6, 9, 12});
  }
  std::vector<T> E = {5};
  ob.gemm(false, false, 0, 1, 1, T(1), A.data(), 1, B.data(), 1, T(0), E.data(), 1);
  nb.gemm(false, false, 1, 0, 1, T(1), A.data(), 1, B.data(), 1, T(0), E.data(), 1);
  CHECK(E[0] == 5);
}

TEST_CASE_TEMPLATE("gemm_batched equals one gemm per batch entry at its strides", T, float, double) {
  const index_t M = 5, N = 7, K = 3, batch = 4;
  const index_t lda = M + 1, ldb = K + 2, ldc = N + 1;  // A transposed (K x M), B transposed (N x K)
  const index_t sA = K * lda + 3, sB = N * ldb + 1, sC = M * ldc + 2;
  const auto A = test::random_normal<T>(static_cast<std::size_t>(batch * sA), 1);
  const auto B = test::random_normal<T>(static_cast<std::size_t>(batch * sB), 2);
  const auto C0 = test::random_normal<T>(static_cast<std::size_t>(batch * sC), 3);
  auto C = C0, C_ref = C0;
  backend::cpu ob;
  naive_backend nb;
  ob.gemm_batched(true, true, M, N, K, T(1.5), A.data(), lda, sA, B.data(), ldb, sB, T(0.5), C.data(), ldc, sC, batch);
  for (index_t b = 0; b < batch; ++b)
    nb.gemm(true, true, M, N, K, T(1.5), A.data() + b * sA, lda, B.data() + b * sB, ldb, T(0.5), C_ref.data() + b * sC, ldc);
  CHECK(test::rel_error(C, C_ref) < (std::is_same_v<T, float> ? 2e-6 : 1e-14));
  // Elements between the batch entries are not written.
  int gaps_written = 0;
  for (index_t b = 0; b < batch; ++b)
    for (index_t k = M * ldc; k < sC; ++k)
      gaps_written += C[static_cast<std::size_t>(b * sC + k)] != C0[static_cast<std::size_t>(b * sC + k)];
  CHECK(gaps_written == 0);
  naive_backend{}.gemm_batched(true, true, M, N, K, T(1.5), A.data(), lda, sA, B.data(), ldb, sB, T(0.5), C.data(), ldc, sC,
                               index_t{0});
  CHECK(test::rel_error(C, C_ref) < (std::is_same_v<T, float> ? 2e-6 : 1e-14));  // batch 0 writes nothing
}

TEST_CASE("for_each calls every index exactly once, serially for small loops and in parallel for large ones") {
  backend::cpu be;
  for (index_t n : {index_t{0}, index_t{1}, index_t{7}, index_t{1000}, index_t{200003}}) {
    for (index_t cost : {index_t{1}, index_t{100}, index_t{10}}) {
      CAPTURE(n);
      CAPTURE(cost);
      std::unique_ptr<std::atomic<int>[]> hits(new std::atomic<int>[static_cast<std::size_t>(n) + 1]);
      for (index_t i = 0; i <= n; ++i) hits[static_cast<std::size_t>(i)] = 0;
      std::atomic<int> max_level{0};
      std::atomic<int>* h = hits.get();
      std::atomic<int>* level = &max_level;
      be.for_each(n, [=](index_t i) {
        h[i].fetch_add(1);
        const int l = omp_get_active_level();
        if (l > level->load()) level->store(l);
      }, cost);
      index_t wrong = 0;
      for (index_t i = 0; i < n; ++i) wrong += hits[static_cast<std::size_t>(i)].load() != 1;
      CHECK(wrong == 0);
      CHECK(hits[static_cast<std::size_t>(n)].load() == 0);
      // The host backend parallelises once n * cost reaches parallel_work (given more than one thread).
      const bool parallel = n * cost >= backend::cpu::parallel_work && n > 1 && omp_get_max_threads() > 1;
      if (n > 0) CHECK(max_level.load() == (parallel ? 1 : 0));
    }
  }
  int calls = 0;
  be.for_each(-5, [&](index_t) { ++calls; });
  CHECK(calls == 0);
}

TEST_CASE_TEMPLATE("sum and sum_squares accumulate in double on both paths", T, float, double) {
  backend::cpu be;
  for (index_t n : {index_t{1}, index_t{1001}, index_t{65536}, index_t{300007}}) {
    CAPTURE(n);
    // Small integers: every partial sum is exact in double, whatever the order.
    std::vector<T> x(static_cast<std::size_t>(n));
    double want = 0, want_sq = 0;
    for (index_t i = 0; i < n; ++i) {
      const auto v = static_cast<double>(i % 7) - 3;
      x[static_cast<std::size_t>(i)] = static_cast<T>(v);
      want += v;
      want_sq += v * v;
    }
    CHECK(be.sum(x.data(), n) == want);
    CHECK(be.sum_squares(x.data(), n) == want_sq);
    // Random values: double accumulation keeps the error far below float precision (a float
    // accumulator would be off by ~1e-4 here). The bound for n non-negative terms summed in order is
    // n * 2^-53 = 3.3e-11 at n = 300007, so the squares are checked at 1e-11.
    const auto r = test::random_normal<T>(static_cast<std::size_t>(n), 77 + static_cast<std::uint64_t>(n));
    long double ref = 0, ref_sq = 0;
    for (T v : r) {
      ref += v;
      ref_sq += static_cast<long double>(v) * v;
    }
    CHECK(be.sum(r.data(), n) == doctest::Approx(static_cast<double>(ref)).epsilon(1e-10));
    CHECK(be.sum_squares(r.data(), n) == doctest::Approx(static_cast<double>(ref_sq)).epsilon(1e-11));
  }
  CHECK(be.sum(static_cast<const T*>(nullptr), 0) == 0.0);
  // 2^24 + 1 in float would lose the 1; the backend must accumulate in double.
  std::vector<float> big(2, 8388608.0f);
  big.push_back(1.0f);
  CHECK(be.sum(big.data(), 3) == 16777217.0);
}

TEST_CASE("host allocations are 64-byte aligned and tracked as tier::host") {
  backend::cpu be;
  const std::size_t before_host = memory().current(tier::host), before_device = memory().current(tier::device);
  memory().reset_peak(tier::host);
  void* p = be.allocate_bytes(1000);
  void* q = be.allocate_bytes(1);
  CHECK(reinterpret_cast<std::uintptr_t>(p) % 64 == 0);
  CHECK(reinterpret_cast<std::uintptr_t>(q) % 64 == 0);
  CHECK(memory().current(tier::host) == before_host + 1001);  // the bytes asked for, not the rounded size
  CHECK(memory().current(tier::device) == before_device);
  be.fill_zero(p, 1000);
  CHECK(static_cast<unsigned char*>(p)[999] == 0);
  std::vector<char> src(1000, 'x'), back(1000);
  be.from_host(p, src.data(), 1000);
  be.to_host(back.data(), p, 1000);
  CHECK(back == src);
  be.deallocate_bytes(q, 1);
  be.deallocate_bytes(p, 1000);
  CHECK(memory().current(tier::host) == before_host);
  CHECK(memory().peak(tier::host) == before_host + 1001);
  static_assert(!backend::cpu::is_device);
  static_assert(backend::cpu::memory_tier == tier::host);
  static_assert(backend::cpu::gemm_provider::name == "chosen");
  static_assert(naive_backend::gemm_provider::name == "naive");
}
