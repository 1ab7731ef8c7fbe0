#pragma once
// gemm::chosen: the host GEMM provider picked at run time, once per process, among those compiled in
// (OpenBLAS; oneDNN and BLIS where the build found them), by gemm_choice.hpp's measurement or its cache.
// It prints its choice and the reason once to stderr (LWCL_GEMM_QUIET=1 silences it); LWCL_GEMM=openblas|
// onednn|blis forces a provider; LWCL_GEMM_PRECISION=bf16 (or a program's --dtype bf16, which takes its
// place: choice::request_precision) runs every f32 GEMM with bf16 operands and f32 accumulation
// (gemm::onednn_bf16; a CPU with AVX512-BF16 or AMX). f64 always goes to OpenBLAS (oneDNN has
// no f64 GEMM).

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "lwcl/backend/host/gemm_choice.hpp"
#include "lwcl/backend/host/gemm_openblas.hpp"
#include "lwcl/core/config.hpp"

namespace lwcl::gemm {

struct chosen {
  static constexpr std::string_view name = "chosen";

  // The process's decision, made on first use: thread-safe (a function-local static), and retried on
  // the next call when it throws (a bad LWCL_GEMM).
  static const choice::decision& decision() {
    static const choice::decision d = decide_and_say();
    return d;
  }
  // The measurement runs at the caller's thread count, so backend::host calls this before it narrows a
  // small GEMM to one thread (see host.hpp's gemm_prepared_once). Only f32 needs a decision.
  template <class T>
  static void prepare() {
    if constexpr (std::is_same_v<T, float>) (void)decision();
  }

  static void run(bool ta, bool tb, index_t M, index_t N, index_t K, float alpha, const float* A, index_t lda,
                  const float* B, index_t ldb, float beta, float* C, index_t ldc) {
#if LWCL_GEMM_WITH_ONEDNN
    if (decision().bf16) return onednn_bf16::run(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
    choice::run_on(decision().p, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  static void run(bool ta, bool tb, index_t M, index_t N, index_t K, double alpha, const double* A, index_t lda,
                  const double* B, index_t ldb, double beta, double* C, index_t ldc) {
    openblas::run(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }

 private:
  static choice::decision decide_and_say() {
    choice::decision d = choice::decide(choice::inputs_from_environment());
    choice::decided_bf16() = d.bf16;
    const char* quiet = std::getenv("LWCL_GEMM_QUIET");
    if (!(quiet && std::strcmp(quiet, "1") == 0)) std::fprintf(stderr, "%s\n", choice::describe(d).c_str());
    return d;
  }
};

}  // namespace lwcl::gemm
