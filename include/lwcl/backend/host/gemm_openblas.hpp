#pragma once
// GEMM provider over OpenBLAS's CBLAS interface: the host backend's default. Row-major semantics:
// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C.

#include <cblas.h>

#include <limits>
#include <string_view>

#include "lwcl/core/error.hpp"

#include "lwcl/core/config.hpp"

namespace lwcl::gemm {

struct openblas {
  static constexpr std::string_view name = "openblas";

  // CBLAS takes int extents: anything larger is refused rather than silently truncated.
  static void check_extents(index_t M, index_t N, index_t K, index_t lda, index_t ldb, index_t ldc) {
    constexpr index_t limit = std::numeric_limits<int>::max();
    check(M <= limit && N <= limit && K <= limit && lda <= limit && ldb <= limit && ldc <= limit,
          "gemm::openblas: extents M=", M, " N=", N, " K=", K, " (leading dimensions ", lda, ", ", ldb, ", ", ldc,
          ") exceed CBLAS's int range");
  }

  static void run(bool ta, bool tb, index_t M, index_t N, index_t K, float alpha, const float* A, index_t lda,
                  const float* B, index_t ldb, float beta, float* C, index_t ldc) {
    check_extents(M, N, K, lda, ldb, ldc);
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(M),
                static_cast<int>(N), static_cast<int>(K), alpha, A, static_cast<int>(lda), B, static_cast<int>(ldb), beta, C,
                static_cast<int>(ldc));
  }
  static void run(bool ta, bool tb, index_t M, index_t N, index_t K, double alpha, const double* A, index_t lda,
                  const double* B, index_t ldb, double beta, double* C, index_t ldc) {
    check_extents(M, N, K, lda, ldb, ldc);
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(M),
                static_cast<int>(N), static_cast<int>(K), alpha, A, static_cast<int>(lda), B, static_cast<int>(ldb), beta, C,
                static_cast<int>(ldc));
  }
};

}  // namespace lwcl::gemm
