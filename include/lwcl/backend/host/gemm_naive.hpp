#pragma once
// A plain triple-loop GEMM provider: no library, exact summation order, slow. It is the reference the
// other providers are tested against, and the fallback on machines without a BLAS.

#include <string_view>

#include "lwcl/core/config.hpp"

namespace lwcl::gemm {

struct naive {
  static constexpr std::string_view name = "naive";

  template <class T>
  static void run(bool ta, bool tb, index_t M, index_t N, index_t K, T alpha, const T* A, index_t lda, const T* B,
                  index_t ldb, T beta, T* C, index_t ldc) {
    // op(A)[i, k] = A[i * a_row + k * a_col], op(B)[k, j] = B[k * b_row + j * b_col]: the transposes
    // become strides, so the loop body has no branches.
    const index_t a_row = ta ? 1 : lda, a_col = ta ? lda : 1;
    const index_t b_row = tb ? 1 : ldb, b_col = tb ? ldb : 1;
#pragma omp parallel for schedule(static) if (M * N * K > 65536)
    for (index_t i = 0; i < M; ++i) {
      for (index_t j = 0; j < N; ++j) {
        T acc = 0;
        for (index_t k = 0; k < K; ++k) acc += A[i * a_row + k * a_col] * B[k * b_row + j * b_col];
        C[i * ldc + j] = alpha * acc + (beta == T(0) ? T(0) : beta * C[i * ldc + j]);
      }
    }
  }
};

}  // namespace lwcl::gemm
