#pragma once
// backend::cuda: the interface of backend::host on one GPU. Functors run in a grid-stride kernel,
// GEMMs go to cuBLAS, whole-array sums to CUB, and memory comes from a stream-ordered pool, every byte
// (cuBLAS's workspace included) reported to lwcl::memory() as tier::device. Include it only from .cu
// files (nvcc).

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "lwcl/backend/cuda/device.cuh"
#include "lwcl/backend/cuda/error.cuh"
#include "lwcl/backend/cuda/launch.cuh"
#include "lwcl/backend/cuda/pinned.cuh"
#include "lwcl/backend/cuda/reduce.cuh"
#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/core/memory.hpp"
#include "lwcl/tensor/tensor.hpp"

namespace lwcl::backend {

// Work is queued on the backend's compute stream in call order, so ops need no synchronisation
// between each other; to_host, from_host, sum, sum_squares and synchronize wait for it. A second
// stream carries host<->device copies of pinned staging buffers so they overlap compute; the
// *_wait_* calls order the two streams. Allocation and release are ordered on the compute stream, so a
// device buffer is used on the copy stream only after copies_wait_for_compute() (once it is
// allocated), and released only after compute_wait_for_copies() (once the copies using it are queued).
// One backend object belongs to one host thread at a time (the cuBLAS handle is not thread-safe);
// every buffer allocated from it must be released before it dies.
class cuda {
 public:
  static constexpr std::string_view name = "cuda";
  static constexpr bool is_device = true;
  static constexpr lwcl::tier memory_tier = lwcl::tier::device;
  // The fused kernels the ops call on this backend (ops/fused.hpp); each names members declared below.
  static constexpr bool fused_layernorm = true, fused_rmsnorm = true, fused_flash_attention = true,
                        fused_cross_entropy = true, fused_linear_epilogue = true, device_ranking = true;

  explicit cuda(int device = 0) : device_(device) {
    const int count = cuda_device_count();
    check(device >= 0 && device < count, "backend::cuda: device ", device, " requested but ", count,
          " CUDA device(s) found");
    try {
      init();
    } catch (...) {
      release();
      throw;
    }
  }
  ~cuda() { release(); }
  cuda(const cuda&) = delete;
  cuda& operator=(const cuda&) = delete;

  int device() const { return device_; }
  int sm_count() const { return sm_count_; }
  cudaStream_t stream() const { return stream_; }
  cudaStream_t copy_stream() const { return copy_stream_; }
  cublasHandle_t blas_handle() const { return blas_; }

  // ---- memory -------------------------------------------------------------------------------------
  // Stream-ordered: the block may be used by work queued on the compute stream after this call, and
  // is returned to the pool once the work queued before deallocate_bytes has finished. The pool keeps
  // freed blocks cached (trim() hands them back to the driver); the tracker counts what lwcl holds.
  void* allocate_bytes(std::size_t bytes) const {
    cuda_detail::scoped_device on(device_);
    void* p = nullptr;
    LWCL_CUDA_CHECK(cudaMallocFromPoolAsync(&p, bytes ? bytes : 1, pool_, stream_));
    memory().on_alloc(memory_tier, bytes);
    return p;
  }
  // Never throws: it runs from buffer destructors, possibly while another error unwinds the stack.
  void deallocate_bytes(void* p, std::size_t bytes) const noexcept {
    if (!p) return;
    LWCL_CUDA_REPORT(cudaFreeAsync(p, stream_));
    memory().on_free(memory_tier, bytes);
  }
  // Returns the pool's cached free blocks to the driver.
  void trim() const {
    cuda_detail::scoped_device on(device_);
    LWCL_CUDA_CHECK(cudaStreamSynchronize(stream_));
    LWCL_CUDA_CHECK(cudaMemPoolTrimTo(pool_, 0));
  }

  void fill_zero(void* p, std::size_t bytes) const {
    if (!bytes) return;
    cuda_detail::scoped_device on(device_);
    LWCL_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
  }
  // Device to device, ordered on the compute stream.
  void copy(void* dst, const void* src, std::size_t bytes) const {
    if (!bytes) return;
    cuda_detail::scoped_device on(device_);
    LWCL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
  }
  // Device to host; returns when the bytes are in host_dst (and all earlier compute work is done).
  void to_host(void* host_dst, const void* src, std::size_t bytes) const {
    if (!bytes) return;
    cuda_detail::scoped_device on(device_);
    LWCL_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDefault, stream_));
    LWCL_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  // Host to device; returns when host_src may be reused.
  void from_host(void* dst, const void* host_src, std::size_t bytes) const {
    if (!bytes) return;
    cuda_detail::scoped_device on(device_);
    LWCL_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyDefault, stream_));
    LWCL_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void synchronize() const {
    cuda_detail::scoped_device on(device_);
    LWCL_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  // ---- pinned host memory and the copy stream -----------------------------------------------------
  void* allocate_pinned_bytes(std::size_t bytes) const { return backend::allocate_pinned_bytes(bytes); }
  void deallocate_pinned_bytes(void* p, std::size_t bytes) const noexcept { backend::deallocate_pinned_bytes(p, bytes); }

  // Queues a copy on the copy stream and returns at once. For overlap, the host side must be pinned;
  // the host buffer must stay untouched until the copy stream has passed this point.
  void copy_async(void* dst, const void* src, std::size_t bytes) const {
    if (!bytes) return;
    cuda_detail::scoped_device on(device_);
    LWCL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, copy_stream_));
  }
  // Compute work queued after this call starts only once every copy queued so far has finished.
  void compute_wait_for_copies() const {
    cuda_detail::scoped_device on(device_);
    LWCL_CUDA_CHECK(cudaEventRecord(copies_done_, copy_stream_));
    LWCL_CUDA_CHECK(cudaStreamWaitEvent(stream_, copies_done_, 0));
  }
  // Copies queued after this call start only once all compute work queued so far has finished (to
  // fetch results, or to overwrite a device buffer the compute stream still reads).
  void copies_wait_for_compute() const {
    cuda_detail::scoped_device on(device_);
    LWCL_CUDA_CHECK(cudaEventRecord(compute_done_, stream_));
    LWCL_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, compute_done_, 0));
  }
  void synchronize_copies() const {
    cuda_detail::scoped_device on(device_);
    LWCL_CUDA_CHECK(cudaStreamSynchronize(copy_stream_));
  }

  // ---- kernels ------------------------------------------------------------------------------------
  // Calls f(i) for i in [0, n) on the device; F is an LWCL_HD functor holding device pointers. `cost`
  // (rough flops per index) picks the block shape, see cuda_detail::for_each_shape.
  template <class F>
  void for_each(index_t n, F f, index_t cost = 1) const {
    static_assert(std::is_trivially_copyable_v<F>, "backend::cuda::for_each: the functor is copied to the device "
                                                   "as a kernel argument and must be trivially copyable");
    if (n <= 0) return;
    cuda_detail::scoped_device on(device_);
    cuda_detail::launch_for_each(n, f, cost, sm_count_, stream_);
  }

  // Row-major C[M,N] = alpha * op(A) * op(B) + beta * C. cuBLAS is column-major, and a row-major
  // matrix is its transpose in column-major, so this computes C^T = op(B)^T op(A)^T: the operands
  // swap places and M and N swap, with no data movement. bf16 operands go to cublasGemmEx with f32
  // accumulation (CUBLAS_COMPUTE_32F) and f32 alpha/beta, on the tensor cores.
  template <class T>
  void gemm(bool ta, bool tb, index_t M, index_t N, index_t K, compute_t<T> alpha, const T* A, index_t lda, const T* B,
            index_t ldb, compute_t<T> beta, T* C, index_t ldc) const {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bf16>,
                  "backend::cuda::gemm: T must be float, double or bf16");
    if (M == 0 || N == 0) return;
    cuda_detail::scoped_device on(device_);
    const cublasOperation_t opA = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opB = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if constexpr (std::is_same_v<T, float>)
      LWCL_CUBLAS_CHECK(cublasSgemm_64(blas_, opB, opA, N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc));
    else if constexpr (std::is_same_v<T, double>)
      LWCL_CUBLAS_CHECK(cublasDgemm_64(blas_, opB, opA, N, M, K, &alpha, B, ldb, A, lda, &beta, C, ldc));
    else
      LWCL_CUBLAS_CHECK(cublasGemmEx_64(blas_, opB, opA, N, M, K, &alpha, B, CUDA_R_16BF, ldb, A, CUDA_R_16BF, lda, &beta, C,
                                        CUDA_R_16BF, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  // `batch` GEMMs whose operands sit at fixed strides from each other (one strided-batched call).
  template <class T>
  void gemm_batched(bool ta, bool tb, index_t M, index_t N, index_t K, compute_t<T> alpha, const T* A, index_t lda,
                    index_t strideA, const T* B, index_t ldb, index_t strideB, compute_t<T> beta, T* C, index_t ldc,
                    index_t strideC, index_t batch) const {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bf16>,
                  "backend::cuda::gemm_batched: T must be float, double or bf16");
    if (M == 0 || N == 0 || batch == 0) return;
    cuda_detail::scoped_device on(device_);
    const cublasOperation_t opA = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opB = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if constexpr (std::is_same_v<T, float>)
      LWCL_CUBLAS_CHECK(cublasSgemmStridedBatched_64(blas_, opB, opA, N, M, K, &alpha, B, ldb, strideB, A, lda, strideA,
                                                     &beta, C, ldc, strideC, batch));
    else if constexpr (std::is_same_v<T, double>)
      LWCL_CUBLAS_CHECK(cublasDgemmStridedBatched_64(blas_, opB, opA, N, M, K, &alpha, B, ldb, strideB, A, lda, strideA,
                                                     &beta, C, ldc, strideC, batch));
    else
      LWCL_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(blas_, opB, opA, N, M, K, &alpha, B, CUDA_R_16BF, ldb, strideB, A,
                                                      CUDA_R_16BF, lda, strideA, &beta, C, CUDA_R_16BF, ldc, strideC, batch,
                                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }

  // ops::flash_attention_forward runs this when given a cuda backend: the tiled kernel of
  // flash_attention.cuh (included at the end of this file), which defines it. A template, so that
  // only translation units that call it compile the kernels.
  template <class Tensor>
  void flash_attention_forward(const Tensor& out, const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                               bool causal) const;
  // ops::flash_attention_backward runs this when given a cuda backend: tiled kernels (also in
  // flash_attention.cuh) taking the op's arguments after the op has checked them; it accumulates into
  // dq, dk and dv and writes delta, like the host functors.
  template <class Tensor>
  void flash_attention_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& delta,
                                const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                const Tensor& lse, bool causal) const;

  // ops::layernorm_* and ops::rmsnorm_* run these when given a cuda backend: fused kernels with one
  // block per row (norms.cuh, included at the end of this file, defines them), taking the ops'
  // arguments after the ops have checked them. Templates, so that only translation units that call
  // them compile the kernels.
  template <class Tensor>
  void layernorm_forward(const Tensor& out, const Tensor& mean, const Tensor& rstd, const Tensor& inp, const Tensor& weight,
                         const Tensor& bias, double eps) const;
  template <class Tensor>
  void layernorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dbias, const Tensor& dout,
                          const Tensor& inp, const Tensor& weight, const Tensor& mean, const Tensor& rstd) const;
  template <class Tensor>
  void rmsnorm_forward(const Tensor& out, const Tensor& rstd, const Tensor& inp, const Tensor& weight, double eps) const;
  template <class Tensor>
  void rmsnorm_backward(const Tensor& dinp, const Tensor& dweight, const Tensor& dout, const Tensor& inp,
                        const Tensor& weight, const Tensor& rstd) const;

  // ops::cross_entropy runs this when given a cuda backend, in place of its row functor: a fused kernel
  // with one block per row (cross_entropy.cuh, included at the end of this file, defines it) writing
  // each row's loss and adding scale * (softmax - onehot) to dlogits (when non-empty). The op keeps
  // the argument checks, the count of counted rows and the mean. A template, as above.
  template <class Tensor>
  void cross_entropy_rows(const Tensor& dlogits, const Tensor& row_loss, const Tensor& logits, const Tensor& targets,
                          double scale) const;

  // ---- sort.cuh and blaslt.cuh (included at the end of this file) define these ---------------------
  // The ranking behind prune::allocate on a cuda backend: writes to order_host[0, n) the indices of
  // keys_host[0, n) by descending key, equal keys by ascending index (a stable device radix sort). A
  // template, so that only translation units that call it compile the sort kernels.
  template <class = void>
  void rank_descending(index_t* order_host, const double* keys_host, index_t n) const;
  // cuBLASLt GEMM with a fused epilogue (see blaslt.cuh): out = act(inp @ weight^T + bias), saving the
  // pre-activation in `pre` when act is GELU and `pre` is non-empty. A template, so that only
  // translation units that call it compile it.
  template <class Tensor>
  bool linear_epilogue_forward(const Tensor& out, const Tensor& pre, const Tensor& inp, const Tensor& weight,
                               const Tensor& bias, bool gelu) const;

  // Sum of n elements, accumulated in double. Waits for the result.
  template <class T>
  double sum(const T* x, index_t n) const {
    return reduce(x, n, cuda_detail::widen<T>{});
  }
  // Sum of squares of n elements, accumulated in double. Waits for the result.
  template <class T>
  double sum_squares(const T* x, index_t n) const {
    return reduce(x, n, cuda_detail::widen_square<T>{});
  }

 private:
  void init() {
    cuda_detail::scoped_device on(device_);
    LWCL_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_));
    LWCL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    LWCL_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    LWCL_CUDA_CHECK(cudaEventCreateWithFlags(&copies_done_, cudaEventDisableTiming));
    LWCL_CUDA_CHECK(cudaEventCreateWithFlags(&compute_done_, cudaEventDisableTiming));

    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device_;
    LWCL_CUDA_CHECK(cudaMemPoolCreate(&pool_, &props));
    // Keep freed blocks for reuse instead of returning them to the driver at every synchronisation:
    // training allocates the same sizes step after step.
    std::uint64_t keep = UINT64_MAX;
    LWCL_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep));

    LWCL_CUBLAS_CHECK(cublasCreate(&blas_));
    LWCL_CUBLAS_CHECK(cublasSetStream(blas_, stream_));
    // cuBLAS's workspace comes from the tracked pool rather than its own allocation, so the tracker's
    // device peak includes it. Sizes are NVIDIA's recommendations: 32 MiB on Hopper, 4 MiB before.
    // (Set after cublasSetStream, which resets the workspace.)
    int major = 0;
    LWCL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_));
    blas_workspace_bytes_ = static_cast<std::size_t>(major >= 9 ? 32 : 4) << 20;
    blas_workspace_ = allocate_bytes(blas_workspace_bytes_);
    LWCL_CUBLAS_CHECK(cublasSetWorkspace(blas_, blas_workspace_, blas_workspace_bytes_));
    // Exact fp32 (no TF32) so that f32 results can be compared with the host backend; alpha and beta
    // are read from host memory.
    LWCL_CUBLAS_CHECK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
    LWCL_CUBLAS_CHECK(cublasSetPointerMode(blas_, CUBLAS_POINTER_MODE_HOST));
  }

  void release() noexcept {
    if (stream_) LWCL_CUDA_REPORT(cudaStreamSynchronize(stream_));
    if (copy_stream_) LWCL_CUDA_REPORT(cudaStreamSynchronize(copy_stream_));
    if (blas_) cublasDestroy(blas_);
    if (blas_workspace_) {
      deallocate_bytes(blas_workspace_, blas_workspace_bytes_);
      LWCL_CUDA_REPORT(cudaStreamSynchronize(stream_));
    }
    if (pool_) LWCL_CUDA_REPORT(cudaMemPoolDestroy(pool_));
    if (copies_done_) LWCL_CUDA_REPORT(cudaEventDestroy(copies_done_));
    if (compute_done_) LWCL_CUDA_REPORT(cudaEventDestroy(compute_done_));
    if (copy_stream_) LWCL_CUDA_REPORT(cudaStreamDestroy(copy_stream_));
    if (stream_) LWCL_CUDA_REPORT(cudaStreamDestroy(stream_));
    blas_ = nullptr;
    blas_workspace_ = nullptr;
    pool_ = nullptr;
    copies_done_ = compute_done_ = nullptr;
    copy_stream_ = stream_ = nullptr;
  }

  // One allocation holds the result (first 256 bytes, keeping CUB's storage aligned) and CUB's
  // temporary storage, so a reduction costs one stream-ordered malloc/free pair and one copy back.
  template <class T, class Transform>
  double reduce(const T* x, index_t n, Transform transform) const {
    if (n <= 0) return 0.0;
    cuda_detail::scoped_device on(device_);
    std::size_t temp_bytes = 0;
    LWCL_CUDA_CHECK(cub::DeviceReduce::TransformReduce(nullptr, temp_bytes, x, static_cast<double*>(nullptr), n,
                                                       cuda_detail::add_double{}, transform, 0.0, stream_));
    constexpr std::size_t head = 256;
    const std::size_t bytes = head + temp_bytes;
    void* scratch = allocate_bytes(bytes);
    double* d_result = static_cast<double*>(scratch);
    double result = 0;
    try {
      LWCL_CUDA_CHECK(cub::DeviceReduce::TransformReduce(static_cast<char*>(scratch) + head, temp_bytes, x, d_result, n,
                                                         cuda_detail::add_double{}, transform, 0.0, stream_));
      LWCL_CUDA_CHECK(cudaMemcpyAsync(&result, d_result, sizeof result, cudaMemcpyDeviceToHost, stream_));
      LWCL_CUDA_CHECK(cudaStreamSynchronize(stream_));
    } catch (...) {
      deallocate_bytes(scratch, bytes);
      throw;
    }
    deallocate_bytes(scratch, bytes);
    return result;
  }

  int device_ = 0;
  int sm_count_ = 1;
  cudaStream_t stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;
  cudaEvent_t copies_done_ = nullptr;
  cudaEvent_t compute_done_ = nullptr;
  cudaMemPool_t pool_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  void* blas_workspace_ = nullptr;
  std::size_t blas_workspace_bytes_ = 0;
};

}  // namespace lwcl::backend

// The definition of cuda::flash_attention_forward.
#include "lwcl/backend/cuda/flash_attention.cuh"
// The definitions of cuda::layernorm_forward, layernorm_backward, rmsnorm_forward, rmsnorm_backward.
#include "lwcl/backend/cuda/norms.cuh"
// The definition of cuda::cross_entropy_rows.
#include "lwcl/backend/cuda/cross_entropy.cuh"
// The definition of cuda::rank_descending.
#include "lwcl/backend/cuda/sort.cuh"
// The definition of cuda::linear_epilogue_forward.
#include "lwcl/backend/cuda/blaslt.cuh"
