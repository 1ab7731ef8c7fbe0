#pragma once
// GEMM provider over oneDNN's dnnl_sgemm, which takes row-major operands directly. oneDNN has no f64
// GEMM, so f64 (used for reference checks, not for speed) goes to OpenBLAS. Select it with
// backend::host<gemm::onednn>; link oneDNN (libdnnl-dev).

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include <string_view>

#include "lwcl/backend/host/gemm_openblas.hpp"
#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"

namespace lwcl::gemm {

struct onednn {
  static constexpr std::string_view name = "onednn";

  static void run(bool ta, bool tb, index_t M, index_t N, index_t K, float alpha, const float* A, index_t lda,
                  const float* B, index_t ldb, float beta, float* C, index_t ldc) {
    if (M == 0 || N == 0) return;
    if (K == 0) {  // C = beta C: dnnl_sgemm (oneDNN 2.6) leaves C as it was for an empty inner dimension
      for (index_t i = 0; i < M; ++i)
        for (index_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0 ? 0.0f : beta * C[i * ldc + j];
      return;
    }
    const dnnl_status_t status = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    check(status == dnnl_success, "gemm::onednn: dnnl_sgemm(", ta ? 'T' : 'N', ", ", tb ? 'T' : 'N', ", M=", M, ", N=", N,
          ", K=", K, ", lda=", lda, ", ldb=", ldb, ", ldc=", ldc, ") failed: ", dnnl_status2str(status));
  }
  static void run(bool ta, bool tb, index_t M, index_t N, index_t K, double alpha, const double* A, index_t lda,
                  const double* B, index_t ldb, double beta, double* C, index_t ldc) {
    openblas::run(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
};

}  // namespace lwcl::gemm
