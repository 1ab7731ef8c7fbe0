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
#pragma omp parallel for schedule(static) if (M * N * K > 65536)
    for (index_t i = 0; i < M; ++i) {
      for (index_t j = 0; j < N; ++j) {
        T acc = 0;
        for (index_t k = 0; k < K; ++k) {
          const T a = ta ? A[k * lda + i] : A[i * lda + k];
          const T b = tb ? B[j * ldb + k] : B[k * ldb + j];
          acc += a * b;
        }
        C[i * ldc + j] = alpha * acc + (beta == T(0) ? T(0) : beta * C[i * ldc + j]);
      }
    }
  }
};

}  // namespace lwcl::gemm
