#pragma once
// backend::host: runs LWCL_HD functors with OpenMP and GEMMs through a provider policy (by default
// gemm::chosen, which picks the fastest compiled-in provider at run time; gemm::openblas and the others
// can be named). Memory is 64-byte aligned host memory reported to the tracker as tier::host.

#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <string_view>
#include <type_traits>
#include <vector>

#include "lwcl/backend/host/gemm_chosen.hpp"
#include "lwcl/backend/host/gemm_openblas.hpp"
#include "lwcl/backend/interface.hpp"
#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/core/memory.hpp"
#include "lwcl/tensor/dtype.hpp"

namespace lwcl::backend {

namespace detail {
// Lowers the calling thread's OpenMP thread count to 1 for its lifetime. OpenBLAS's OpenMP build reads
// omp_get_max_threads() on every call, so this makes one GEMM single-threaded.
class single_threaded {
 public:
  single_threaded() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~single_threaded() { omp_set_num_threads(saved_); }
  single_threaded(const single_threaded&) = delete;
  single_threaded& operator=(const single_threaded&) = delete;

 private:
  int saved_;
};
}  // namespace detail

// A GEMM provider that settles something once before its first GEMM in T (gemm::chosen measures the
// providers). host calls prepare<T>() at the caller's thread count, before it narrows a small GEMM to one
// thread and outside its own parallel regions, so the measurement sees the threads large GEMMs get.
template <class Gemm, class T>
concept gemm_prepared_once = requires { Gemm::template prepare<T>(); };

// The provider of host<> (backend::cpu): the one this machine runs fastest, decided once per process.
using host_default_gemm = gemm::chosen;

template <class Gemm = host_default_gemm>
struct host {
  using gemm_provider = Gemm;
  static constexpr std::string_view name = "host";
  static constexpr bool is_device = false;
  static constexpr lwcl::tier memory_tier = lwcl::tier::host;

  // ---- memory -------------------------------------------------------------------------------------
  void* allocate_bytes(std::size_t bytes) {
    const std::size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded ? rounded : 64);
    check(p != nullptr, "backend::host: out of memory allocating ", bytes, " bytes");
    memory().on_alloc(memory_tier, bytes);
    return p;
  }
  void deallocate_bytes(void* p, std::size_t bytes) {
    std::free(p);
    memory().on_free(memory_tier, bytes);
  }
  void fill_zero(void* p, std::size_t bytes) { if (bytes) std::memset(p, 0, bytes); }
  void copy(void* dst, const void* src, std::size_t bytes) { if (bytes) std::memcpy(dst, src, bytes); }
  void to_host(void* host_dst, const void* src, std::size_t bytes) { copy(host_dst, src, bytes); }
  void from_host(void* dst, const void* host_src, std::size_t bytes) { copy(dst, host_src, bytes); }
  void synchronize() {}
  // The copy-stream interface of a device backend, trivially: a copy is done when copy_async returns,
  // so there is nothing to order or wait for.
  void copy_async(void* dst, const void* src, std::size_t bytes) { copy(dst, src, bytes); }
  void compute_wait_for_copies() {}
  void copies_wait_for_compute() {}
  void synchronize_copies() {}

  // ---- kernels ------------------------------------------------------------------------------------
  // Calls f(i) for i in [0, n). `cost` is a rough per-index work estimate in flops; loops under
  // parallel_work stay on one thread. A parallel region costs microseconds on an idle machine but can
  // cost milliseconds when another process holds a core (every worker must reach the barrier), so
  // only loops worth a fraction of a millisecond are split.
  static constexpr index_t parallel_work = index_t(1) << 20;
  template <class F>
  void for_each(index_t n, F f, index_t cost = 1) const {
    if (n <= 0) return;
#pragma omp parallel for schedule(static) if (n * cost >= parallel_work && n > 1)
    for (index_t i = 0; i < n; ++i) f(i);
  }

  // GEMMs below this many multiply-adds run on one thread: splitting them saves less than the
  // synchronisation costs, badly so when another process holds a core.
  static constexpr double serial_gemm_mnk = 8.0 * (1 << 20);

  // Row-major C[M,N] = alpha * op(A) * op(B) + beta * C. bf16 operands are widened to f32, multiplied
  // by the f32 provider and the result rounded once: the reference for the GPU's bf16 GEMMs (f32
  // accumulation), not a fast path.
  template <class T>
  void gemm(bool ta, bool tb, index_t M, index_t N, index_t K, compute_t<T> alpha, const T* A, index_t lda, const T* B,
            index_t ldb, compute_t<T> beta, T* C, index_t ldc) const {
    if (M == 0 || N == 0) return;
    if constexpr (std::is_same_v<T, bf16>) {
      gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      return;
    } else {
    if constexpr (gemm_prepared_once<Gemm, T>) Gemm::template prepare<T>();
    if (static_cast<double>(M) * N * K < serial_gemm_mnk) {
      detail::single_threaded guard;
      Gemm::run(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
      return;
    }
    Gemm::run(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    }
  }
  // `batch` GEMMs whose operands sit at fixed strides from each other. Small GEMMs (attention's
  // per-head products) are spread over threads one whole GEMM each, which keeps every output's
  // summation order independent of the thread count; inside the parallel region OpenBLAS runs on the
  // calling thread alone.
  template <class T>
  void gemm_batched(bool ta, bool tb, index_t M, index_t N, index_t K, compute_t<T> alpha, const T* A, index_t lda,
                    index_t strideA, const T* B, index_t ldb, index_t strideB, compute_t<T> beta, T* C, index_t ldc,
                    index_t strideC, index_t batch) const {
    if (M == 0 || N == 0 || batch <= 0) return;
    if constexpr (std::is_same_v<T, bf16>) {
      for (index_t b = 0; b < batch; ++b)
        gemm_bf16(ta, tb, M, N, K, alpha, A + b * strideA, lda, B + b * strideB, ldb, beta, C + b * strideC, ldc);
      return;
    } else {
    if constexpr (gemm_prepared_once<Gemm, T>) Gemm::template prepare<T>();
    const double mnk = static_cast<double>(M) * N * K;
    if (batch > 1 && mnk < serial_gemm_mnk && mnk * batch >= parallel_work) {
#pragma omp parallel for schedule(static)
      for (index_t b = 0; b < batch; ++b)
        Gemm::run(ta, tb, M, N, K, alpha, A + b * strideA, lda, B + b * strideB, ldb, beta, C + b * strideC, ldc);
      return;
    }
    for (index_t b = 0; b < batch; ++b)
      gemm(ta, tb, M, N, K, alpha, A + b * strideA, lda, B + b * strideB, ldb, beta, C + b * strideC, ldc);
    }
  }

  void gemm_bf16(bool ta, bool tb, index_t M, index_t N, index_t K, float alpha, const bf16* A, index_t lda, const bf16* B,
                 index_t ldb, float beta, bf16* C, index_t ldc) const;

  // Sum of n elements, accumulated in double.
  template <class T>
  double sum(const T* x, index_t n) const {
    double acc = 0;
#pragma omp parallel for reduction(+ : acc) schedule(static) if (n >= parallel_work)
    for (index_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]);
    return acc;
  }
  // Sum of squares of n elements, accumulated in double.
  template <class T>
  double sum_squares(const T* x, index_t n) const {
    double acc = 0;
#pragma omp parallel for reduction(+ : acc) schedule(static) if (n >= parallel_work)
    for (index_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    return acc;
  }
};

using cpu = host<>;
static_assert(backend_interface<cpu>);

template <class Gemm>
void host<Gemm>::gemm_bf16(bool ta, bool tb, index_t M, index_t N, index_t K, float alpha, const bf16* A, index_t lda,
                           const bf16* B, index_t ldb, float beta, bf16* C, index_t ldc) const {
  // Stored extents: op(A) is M x K, so A holds (ta ? K : M) rows of ld lda; likewise B.
  auto widen = [](const bf16* src, index_t rows, index_t cols, index_t ld) {
    std::vector<float> w(static_cast<std::size_t>(rows * cols));
    for (index_t r = 0; r < rows; ++r)
      for (index_t c = 0; c < cols; ++c) w[static_cast<std::size_t>(r * cols + c)] = src[r * ld + c];
    return w;
  };
  const std::vector<float> a = widen(A, ta ? K : M, ta ? M : K, lda);
  const std::vector<float> b = widen(B, tb ? N : K, tb ? K : N, ldb);
  std::vector<float> c = beta != 0.0f ? widen(C, M, N, ldc) : std::vector<float>(static_cast<std::size_t>(M * N), 0.0f);
  gemm<float>(ta, tb, M, N, K, alpha, a.data(), ta ? M : K, b.data(), tb ? K : N, beta, c.data(), N);
  for (index_t r = 0; r < M; ++r)
    for (index_t j = 0; j < N; ++j) C[r * ldc + j] = bf16(c[static_cast<std::size_t>(r * N + j)]);
}

}  // namespace lwcl::backend
