#pragma once
// backend::host: runs LWCL_HD functors with OpenMP and GEMMs through a provider policy (OpenBLAS by
// default). Memory is 64-byte aligned host memory reported to the tracker as tier::host.

#include <cstdlib>
#include <cstring>
#include <string_view>

#include "lwcl/backend/host/gemm_openblas.hpp"
#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/core/memory.hpp"

namespace lwcl::backend {

template <class Gemm = gemm::openblas>
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

  // ---- kernels ------------------------------------------------------------------------------------
  // Calls f(i) for i in [0, n). `cost` is a rough per-index work estimate in flops; small loops stay on
  // one thread, where a parallel region would cost more than it saves.
  template <class F>
  void for_each(index_t n, F f, index_t cost = 1) const {
    if (n <= 0) return;
#pragma omp parallel for schedule(static) if (n * cost >= 32768 && n > 1)
    for (index_t i = 0; i < n; ++i) f(i);
  }

  // Row-major C[M,N] = alpha * op(A) * op(B) + beta * C.
  template <class T>
  void gemm(bool ta, bool tb, index_t M, index_t N, index_t K, T alpha, const T* A, index_t lda, const T* B, index_t ldb,
            T beta, T* C, index_t ldc) const {
    if (M == 0 || N == 0) return;
    Gemm::run(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  // `batch` GEMMs whose operands sit at fixed strides from each other.
  template <class T>
  void gemm_batched(bool ta, bool tb, index_t M, index_t N, index_t K, T alpha, const T* A, index_t lda, index_t strideA,
                    const T* B, index_t ldb, index_t strideB, T beta, T* C, index_t ldc, index_t strideC,
                    index_t batch) const {
    for (index_t b = 0; b < batch; ++b)
      gemm(ta, tb, M, N, K, alpha, A + b * strideA, lda, B + b * strideB, ldb, beta, C + b * strideC, ldc);
  }

  // Sum of n elements, accumulated in double.
  template <class T>
  double sum(const T* x, index_t n) const {
    double acc = 0;
#pragma omp parallel for reduction(+ : acc) schedule(static) if (n >= 65536)
    for (index_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]);
    return acc;
  }
  // Sum of squares of n elements, accumulated in double.
  template <class T>
  double sum_squares(const T* x, index_t n) const {
    double acc = 0;
#pragma omp parallel for reduction(+ : acc) schedule(static) if (n >= 65536)
    for (index_t i = 0; i < n; ++i) acc += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    return acc;
  }
};

using cpu = host<>;

}  // namespace lwcl::backend
