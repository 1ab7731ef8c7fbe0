#pragma once
// GEMM provider over BLIS's typed API (bli_sgemm_ex / bli_dgemm_ex). BLIS takes a row and a column
// stride per operand, so row-major operands are passed as they are, without the transpose trick that
// column-major BLAS needs. Select it with backend::host<gemm::blis>; link BLIS (libblis-dev).

#include <blis.h>
#include <omp.h>

#include <string_view>

#include "lwcl/core/config.hpp"

namespace lwcl::gemm {

struct blis {
  static constexpr std::string_view name = "blis";

  // BLIS runs single-threaded unless told otherwise (BLIS_NUM_THREADS); each call here asks for the
  // OpenMP thread count instead, like the other providers, without touching BLIS's global settings.
  static void run(bool ta, bool tb, index_t M, index_t N, index_t K, float alpha, const float* A, index_t lda,
                  const float* B, index_t ldb, float beta, float* C, index_t ldc) {
    rntm_t rntm = threads();
    bli_sgemm_ex(trans(ta), trans(tb), M, N, K, &alpha, const_cast<float*>(A), lda, 1, const_cast<float*>(B), ldb, 1, &beta,
                 C, ldc, 1, nullptr, &rntm);
  }
  static void run(bool ta, bool tb, index_t M, index_t N, index_t K, double alpha, const double* A, index_t lda,
                  const double* B, index_t ldb, double beta, double* C, index_t ldc) {
    rntm_t rntm = threads();
    bli_dgemm_ex(trans(ta), trans(tb), M, N, K, &alpha, const_cast<double*>(A), lda, 1, const_cast<double*>(B), ldb, 1,
                 &beta, C, ldc, 1, nullptr, &rntm);
  }

 private:
  // The stored operand is row-major with leading dimension ld (row stride ld, column stride 1); BLIS
  // applies the transpose on top of those strides.
  static trans_t trans(bool t) { return t ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE; }
  static rntm_t threads() {
    rntm_t rntm;
    bli_rntm_init(&rntm);
    bli_rntm_set_num_threads(omp_get_max_threads(), &rntm);
    return rntm;
  }
};

}  // namespace lwcl::gemm
