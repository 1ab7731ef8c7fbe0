#pragma once
// cuBLASLt GEMMs with fused bias / GELU epilogues on backend::cuda (included by cuda.cuh): the linear
// layer out = act(inp @ weight^T + bias) in one kernel, saving GELU's input for the backward, instead
// of a GEMM followed by separate bias and activation passes over the output.

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "lwcl/backend/cuda/cuda.cuh"
#include "lwcl/backend/cuda/device.cuh"
#include "lwcl/backend/cuda/error.cuh"
#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/ops/common.hpp"
#include "lwcl/ops/linear.hpp"
#include "lwcl/tensor/tensor.hpp"

namespace lwcl::backend {

namespace cuda_detail {

// Owners of cuBLASLt descriptors, destroyed at scope exit, also when a later call throws.
class lt_matmul_desc {
 public:
  lt_matmul_desc(cublasComputeType_t compute, cudaDataType_t scale) {
    LWCL_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, compute, scale));
  }
  ~lt_matmul_desc() {
    if (desc_) cublasLtMatmulDescDestroy(desc_);
  }
  lt_matmul_desc(const lt_matmul_desc&) = delete;
  lt_matmul_desc& operator=(const lt_matmul_desc&) = delete;
  // `value` has the attribute's documented type (int32_t, uint32_t, int64_t or a pointer).
  template <class V>
  void set(cublasLtMatmulDescAttributes_t attr, const V& value) {
    LWCL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, attr, &value, sizeof value));
  }
  cublasLtMatmulDesc_t get() const { return desc_; }

 private:
  cublasLtMatmulDesc_t desc_ = nullptr;
};

// A column-major rows x cols matrix with leading dimension ld.
class lt_layout {
 public:
  lt_layout(cudaDataType_t type, index_t rows, index_t cols, index_t ld) {
    LWCL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout_, type, static_cast<std::uint64_t>(rows),
                                                 static_cast<std::uint64_t>(cols), static_cast<std::int64_t>(ld)));
  }
  ~lt_layout() {
    if (layout_) cublasLtMatrixLayoutDestroy(layout_);
  }
  lt_layout(const lt_layout&) = delete;
  lt_layout& operator=(const lt_layout&) = delete;
  cublasLtMatrixLayout_t get() const { return layout_; }

 private:
  cublasLtMatrixLayout_t layout_ = nullptr;
};

class lt_preference {
 public:
  explicit lt_preference(std::size_t workspace_bytes) {
    LWCL_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref_));
    const std::uint64_t bytes = workspace_bytes;
    LWCL_CUBLAS_CHECK(
        cublasLtMatmulPreferenceSetAttribute(pref_, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof bytes));
  }
  ~lt_preference() {
    if (pref_) cublasLtMatmulPreferenceDestroy(pref_);
  }
  lt_preference(const lt_preference&) = delete;
  lt_preference& operator=(const lt_preference&) = delete;
  cublasLtMatmulPreference_t get() const { return pref_; }

 private:
  cublasLtMatmulPreference_t pref_ = nullptr;
};

// Alignment of a device pointer in bytes, capped at 256 (null counts as fully aligned). The
// heuristic picks kernels by the operands' alignment, so it is part of what a cached choice assumes.
inline std::uint32_t pointer_alignment(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t align = 1;
  while (align < 256 && a % (2u * align) == 0) align *= 2;
  return align;
}

// What the heuristic's choice depends on: device, problem, epilogue, alignments and workspace.
struct lt_algo_key {
  int device;
  int type;
  index_t n, ic, oc;
  std::uint32_t epilogue;
  std::uint32_t align[5];  // weight, inp, out, bias, pre
  std::size_t workspace;
  bool operator==(const lt_algo_key&) const = default;
};

// The algorithm for a key, from cublasLtMatmulAlgoGetHeuristic on first use. The query costs tens of
// microseconds of host time per call, as long as the GEMM itself at small sizes and far more than
// the launch; a training step repeats the same few shapes, so each is asked for once per thread.
// `found` tells whether there is one; query(found) sets it. A miss is remembered too.
template <class Query>
cublasLtMatmulAlgo_t cached_lt_algo(const lt_algo_key& key, bool& found, Query&& query) {
  struct entry {
    lt_algo_key key;
    cublasLtMatmulAlgo_t algo;
    bool found;
  };
  thread_local std::vector<entry> cache;
  for (const auto& e : cache)
    if (e.key == key) {
      found = e.found;
      return e.algo;
    }
  const cublasLtMatmulAlgo_t algo = query(found);
  if (cache.size() >= 64) cache.clear();  // shapes beyond a model's handful: start over
  cache.push_back({key, algo, found});
  return algo;
}

// The work of cuda::linear_epilogue_forward, for the backend `be` whose cuBLAS workspace is
// (workspace, workspace_bytes). Inconsistent arguments (shapes, mixed dtypes, overlapping outputs,
// pre without gelu) throw lwcl::error. A consistent case that this cuBLASLt path does not take (a dtype
// other than f32 and bf16, pre with OC not a multiple of 8, no cuBLASLt algorithm) throws too when
// `throw_if_declined`, and otherwise returns false having done nothing, so that a caller can fall back
// to a plain GEMM and separate passes. Returns true when the GEMM was queued.
template <class = void>
bool lt_linear_epilogue(const cuda& be, void* workspace, std::size_t workspace_bytes, const tensor& out,
                        const tensor& pre, const tensor& inp, const tensor& weight, const tensor& bias, bool gelu,
                        bool throw_if_declined) {
  constexpr std::string_view op = "cuda::linear_epilogue_forward";
  // The checks of ops::linear_forward for out, then those of the saved GELU input.
  const ops::linear_detail::linear_dims dims = ops::linear_detail::check_forward(op, "out", out, inp, weight, bias);
  const index_t N = dims.N, IC = dims.IC, OC = dims.OC;
  if (pre.data) {
    check(gelu, op, ": pre (the saved GELU input) is written only when gelu is true; pass an empty tensor");
    ops::expect_shape(op, "pre", pre, out.shape);
  }
  ops::expect_same_dtype(op, {{"inp", &inp}, {"pre", &pre}});
  ops::linear_detail::expect_disjoint(op, "pre", pre, "out", out);
  ops::linear_detail::expect_disjoint(op, "pre", pre, "inp", inp);
  ops::linear_detail::expect_disjoint(op, "pre", pre, "weight", weight);

  auto decline = [&](auto&&... why) {
    if (throw_if_declined) fail(op, ": ", why...);
    return false;
  };
  if (inp.type != dtype::f32 && inp.type != dtype::bf16)
    return decline("dtype ", dtype_name(inp.type), " is not supported (expected f32 or bf16)");
  if (pre.data && OC % 8 != 0)
    return decline("saving pre needs OC divisible by 8 (cuBLASLt's leading dimension of the GELU input), OC is ", OC);

  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  if (gelu && pre.data) epilogue = bias.data ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  else if (gelu) epilogue = bias.data ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  else if (bias.data) epilogue = CUBLASLT_EPILOGUE_BIAS;

  scoped_device on(be.device());
  const cudaDataType_t type = inp.type == dtype::f32 ? CUDA_R_32F : CUDA_R_16BF;
  lt_matmul_desc desc(CUBLAS_COMPUTE_32F, CUDA_R_32F);
  desc.set(CUBLASLT_MATMUL_DESC_TRANSA, static_cast<std::int32_t>(CUBLAS_OP_T));
  desc.set(CUBLASLT_MATMUL_DESC_TRANSB, static_cast<std::int32_t>(CUBLAS_OP_N));
  desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<std::uint32_t>(epilogue));
  if (bias.data) desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias.data));
  if (pre.data) {
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, pre.data);
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, static_cast<std::int64_t>(OC));
  }
  const lt_layout a(type, IC, OC, IC), b(type, IC, N, IC), d(type, OC, N, OC);
  const auto lt = reinterpret_cast<cublasLtHandle_t>(be.blas_handle());

  const lt_algo_key key{be.device(),
                        static_cast<int>(type),
                        N,
                        IC,
                        OC,
                        static_cast<std::uint32_t>(epilogue),
                        {pointer_alignment(weight.data), pointer_alignment(inp.data), pointer_alignment(out.data),
                         pointer_alignment(bias.data), pointer_alignment(pre.data)},
                        workspace_bytes};
  bool found = true;
  const cublasLtMatmulAlgo_t algo = cached_lt_algo(key, found, [&](bool& ok) {
    const lt_preference pref(workspace_bytes);
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    const cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(lt, desc.get(), a.get(), b.get(), d.get(), d.get(), pref.get(), 1, &result, &count);
    ok = status != CUBLAS_STATUS_NOT_SUPPORTED && (status != CUBLAS_STATUS_SUCCESS || count > 0);
    if (ok) check_cublas(status, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
    return result.algo;
  });
  if (!found)
    return decline("cuBLASLt has no algorithm for ", dtype_name(inp.type), " inp [", N, ", ", IC, "] x weight [", OC, ", ",
                   IC, "]^T with epilogue ", static_cast<int>(epilogue));
  const float alpha = 1.0f, beta = 0.0f;  // beta = 0: out is only written
  LWCL_CUBLAS_CHECK(cublasLtMatmul(lt, desc.get(), &alpha, weight.data, a.get(), inp.data, b.get(), &beta, out.data, d.get(),
                                   out.data, d.get(), &algo, workspace, workspace_bytes, be.stream()));
  return true;
}

}  // namespace cuda_detail

// Row-major out[N, OC] = act(inp[N, IC] @ weight[OC, IC]^T + bias[OC]) with act the identity, or GELU
// when `gelu`; then, when `pre` is non-empty (gelu only), pre = inp @ weight^T + bias as well, the
// input that gelu_backward needs. inp is (..., IC) read as N = numel / IC rows; out and pre are
// (..., OC); bias and pre may be empty tensors. All of one dtype: f32 (exact fp32 products and sums,
// no TF32, as cuda::gemm) or bf16 (lwcl::bf16, stored as CUDA_R_16BF; fp32 accumulation, bias add and
// GELU, one rounding to bf16 per output). lwcl tensors are dense, so the shapes fix the strides.
//
// GELU flavour: cuBLAS documents the epilogue only as "GELU". It is the tanh approximation
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), gpt2's ops::gelu_kind::tanh: PyTorch uses this
// epilogue as its fused path for gelu(approximate="tanh") and applies that same form itself where the
// epilogue is unavailable. test_cuda_blaslt.cu holds the output to the host's tanh form at f32
// tolerance, which the erf form (up to 4.7e-4 away, near |x| = 2.7) would miss.
//
// The row-major trick of cuda::gemm: a row-major matrix is its transpose in column-major, so this
// computes out^T = weight inp^T in column-major, cuBLASLt's D = op(A) B with A = weight read as the
// column-major IC x OC matrix and op(A) its transpose, B = inp read as IC x N, and D = out read as
// OC x N (ld OC). The bias then runs along D's rows, as cuBLASLt's bias epilogues require, and the
// GELU input matrix (aux) has D's layout, with leading dimension OC, which cuBLASLt requires to be a
// multiple of 8.
//
// cuBLASLt runs on the backend's cuBLAS handle: a cublasHandle_t may stand in for a cublasLtHandle_t
// (a cuBLAS context holds a cuBLASLt one). The GEMM is queued on the compute stream and uses the cuBLAS
// workspace: cuBLAS and cuBLASLt calls on one stream run one after another, so they never use it at
// the same time. The bias and aux types are left at their defaults, the output's type (f32 or bf16).
//
// Inconsistent arguments throw lwcl::error naming this function. A case this path does not take (f64,
// pre with OC not a multiple of 8, no cuBLASLt algorithm) returns false, having done nothing, so that
// ops::linear_gelu_forward falls back to its GEMM and separate passes; true means the GEMM is queued.
template <class Tensor>
bool cuda::linear_epilogue_forward(const Tensor& out, const Tensor& pre, const Tensor& inp, const Tensor& weight,
                                   const Tensor& bias, bool gelu) const {
  return cuda_detail::lt_linear_epilogue(*this, blas_workspace_, blas_workspace_bytes_, out, pre, inp, weight, bias, gelu,
                                         false);
}

}  // namespace lwcl::backend
