#pragma once
// GEMM provider with bf16 operands and f32 accumulation, over oneDNN's matmul primitive (its AVX512-BF16
// or AMX kernels where the CPU has them): C = alpha * op(A) op(B) + beta * C with A and B in f32 memory,
// each rounded to bf16 (to nearest, ties to even) into a scratch copy before the product, and C in f32.
// The master weights, the optimiser state and every other op stay f32: the recipe of bf16 mixed
// precision, applied to the GEMMs alone. One primitive per shape, transposition, output stride, alpha
// and beta is created on first use and kept (per thread); later calls only convert and execute.
// f64 goes to OpenBLAS, as with gemm::onednn. gemm::chosen runs every f32 GEMM here under
// LWCL_GEMM_PRECISION=bf16 (gemm_choice.hpp refuses it on a CPU without AVX512-BF16 or AMX).

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "lwcl/backend/host/gemm_openblas.hpp"
#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/tensor/dtype.hpp"

namespace lwcl::gemm {

namespace onednn_bf16_detail {

inline void ok(dnnl_status_t s, std::string_view what) {
  check(s == dnnl_success, "gemm::onednn_bf16: ", what, " failed: ", dnnl_status2str(s));
}

// rows x cols of a row-major f32 matrix (leading dimension ld) rounded to bf16, packed (leading
// dimension cols).
inline void round_to_bf16(const float* src, index_t rows, index_t cols, index_t ld, std::uint16_t* dst) {
#pragma omp parallel for schedule(static) if (rows * cols >= (index_t{1} << 16))
  for (index_t r = 0; r < rows; ++r) {
    const float* s = src + r * ld;
    std::uint16_t* d = dst + r * cols;
    for (index_t c = 0; c < cols; ++c) d[c] = bf16::from_float(s[c]).bits;
  }
}

// The CPU engine and an in-order stream, created once per thread.
struct context {
  dnnl_engine_t engine = nullptr;
  dnnl_stream_t stream = nullptr;
  context() {
    ok(dnnl_engine_create(&engine, dnnl_cpu, 0), "dnnl_engine_create");
    ok(dnnl_stream_create(&stream, engine, dnnl_stream_default_flags), "dnnl_stream_create");
  }
  ~context() {
    if (stream) dnnl_stream_destroy(stream);
    if (engine) dnnl_engine_destroy(engine);
  }
  context(const context&) = delete;
  context& operator=(const context&) = delete;
};

// One matmul primitive and its three memory objects (their data handles set at each call).
struct plan {
  dnnl_primitive_t prim = nullptr;
  dnnl_memory_t a = nullptr, b = nullptr, c = nullptr;
  std::string impl;  // oneDNN's implementation name (e.g. "brg:avx512_core_amx", "gemm:jit")
  plan() = default;
  plan(const plan&) = delete;
  plan& operator=(const plan&) = delete;
  ~plan() {
    if (a) dnnl_memory_destroy(a);
    if (b) dnnl_memory_destroy(b);
    if (c) dnnl_memory_destroy(c);
    if (prim) dnnl_primitive_destroy(prim);
  }
};

// Packed bf16 operands: op(A) as M x K (strides K, 1) or, transposed, stored K x M (strides 1, M);
// op(B) as K x N (strides N, 1) or stored N x K (strides 1, K). C: M x N with strides (ldc, 1), f32.
inline std::unique_ptr<plan> make_plan(const context& ctx, bool ta, bool tb, index_t M, index_t N, index_t K,
                                       index_t ldc, float alpha, float beta) {
  auto p = std::make_unique<plan>();
  dnnl_memory_desc_t a_md, b_md, c_md;
  const dnnl_dims_t a_dims = {M, K}, b_dims = {K, N}, c_dims = {M, N};
  const dnnl_dims_t a_str = {ta ? 1 : K, ta ? M : 1}, b_str = {tb ? 1 : N, tb ? K : 1}, c_str = {ldc, 1};
  ok(dnnl_memory_desc_init_by_strides(&a_md, 2, a_dims, dnnl_bf16, a_str), "the A descriptor");
  ok(dnnl_memory_desc_init_by_strides(&b_md, 2, b_dims, dnnl_bf16, b_str), "the B descriptor");
  ok(dnnl_memory_desc_init_by_strides(&c_md, 2, c_dims, dnnl_f32, c_str), "the C descriptor");
  dnnl_matmul_desc_t desc;
  ok(dnnl_matmul_desc_init(&desc, &a_md, &b_md, nullptr, &c_md), "dnnl_matmul_desc_init");
  dnnl_primitive_attr_t attr = nullptr;
  ok(dnnl_primitive_attr_create(&attr), "dnnl_primitive_attr_create");
  dnnl_post_ops_t post = nullptr;
  dnnl_primitive_desc_t pd = nullptr;
  const auto release = [&] {
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (post) dnnl_post_ops_destroy(post);
    dnnl_primitive_attr_destroy(attr);
  };
  try {
    if (alpha != 1.0f) ok(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha), "setting alpha");
    if (beta != 0.0f) {  // C = alpha A B + beta C: the sum post-op scales what C held by beta
      ok(dnnl_post_ops_create(&post), "dnnl_post_ops_create");
      ok(dnnl_post_ops_append_sum(post, beta), "setting beta");
      ok(dnnl_primitive_attr_set_post_ops(attr, post), "dnnl_primitive_attr_set_post_ops");
    }
    const dnnl_status_t s = dnnl_primitive_desc_create(&pd, &desc, attr, ctx.engine, nullptr);
    check(s == dnnl_success, "gemm::onednn_bf16: oneDNN has no bf16 matmul for M=", M, ", N=", N, ", K=", K, " (",
          ta ? 'T' : 'N', tb ? 'T' : 'N', ", ldc=", ldc, ") on this CPU: ", dnnl_status2str(s));
    const char* impl = nullptr;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl) p->impl = impl;
    ok(dnnl_primitive_create(&p->prim, pd), "dnnl_primitive_create");
    ok(dnnl_memory_create(&p->a, &a_md, ctx.engine, DNNL_MEMORY_NONE), "the A memory");
    ok(dnnl_memory_create(&p->b, &b_md, ctx.engine, DNNL_MEMORY_NONE), "the B memory");
    ok(dnnl_memory_create(&p->c, &c_md, ctx.engine, DNNL_MEMORY_NONE), "the C memory");
  } catch (...) {
    release();
    throw;
  }
  release();
  return p;
}

using plan_key = std::tuple<bool, bool, index_t, index_t, index_t, index_t, float, float>;

// This thread's engine, plans and scratch operands.
struct thread_state {
  context ctx;
  std::map<plan_key, std::unique_ptr<plan>> plans;
  std::vector<std::uint16_t> a, b;
  const plan* last = nullptr;
};

inline thread_state& state() {
  thread_local thread_state s;
  return s;
}

}  // namespace onednn_bf16_detail

struct onednn_bf16 {
  static constexpr std::string_view name = "onednn_bf16";

  static void run(bool ta, bool tb, index_t M, index_t N, index_t K, float alpha, const float* A, index_t lda,
                  const float* B, index_t ldb, float beta, float* C, index_t ldc) {
    namespace d = onednn_bf16_detail;
    if (M == 0 || N == 0) return;
    if (K == 0) {  // C = beta C, as the other providers leave it
      for (index_t i = 0; i < M; ++i)
        for (index_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0 ? 0.0f : beta * C[i * ldc + j];
      return;
    }
    d::thread_state& s = d::state();
    auto& slot = s.plans[d::plan_key{ta, tb, M, N, K, ldc, alpha, beta}];
    if (!slot) slot = d::make_plan(s.ctx, ta, tb, M, N, K, ldc, alpha, beta);
    const d::plan& p = *slot;
    s.last = &p;
    // The operands in their stored orientation, packed: A is M x K, or K x M when transposed; B K x N or N x K.
    s.a.resize(static_cast<std::size_t>(M * K));
    s.b.resize(static_cast<std::size_t>(K * N));
    d::round_to_bf16(A, ta ? K : M, ta ? M : K, lda, s.a.data());
    d::round_to_bf16(B, tb ? N : K, tb ? K : N, ldb, s.b.data());
    d::ok(dnnl_memory_set_data_handle(p.a, s.a.data()), "setting A");
    d::ok(dnnl_memory_set_data_handle(p.b, s.b.data()), "setting B");
    d::ok(dnnl_memory_set_data_handle(p.c, C), "setting C");
    const dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c}};
    d::ok(dnnl_primitive_execute(p.prim, s.ctx.stream, 3, args), "dnnl_primitive_execute");
    d::ok(dnnl_stream_wait(s.ctx.stream), "dnnl_stream_wait");
  }
  static void run(bool ta, bool tb, index_t M, index_t N, index_t K, double alpha, const double* A, index_t lda,
                  const double* B, index_t ldb, double beta, double* C, index_t ldc) {
    openblas::run(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }

  // oneDNN's implementation of this thread's last bf16 GEMM ("" before the first), and the plans this
  // thread holds: for benchmarks and tests.
  static std::string last_implementation() {
    const auto* p = onednn_bf16_detail::state().last;
    return p ? p->impl : std::string();
  }
  static std::size_t plans_held() { return onednn_bf16_detail::state().plans.size(); }
};

}  // namespace lwcl::gemm
