#pragma once
// Turns CUDA runtime and cuBLAS status codes into lwcl::error. The message names the failing call as
// written in the source, the file and line, and the library's own name and text for the code, so a
// failure on a remote GPU can be traced from the log alone.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdio>

#include "lwcl/core/error.hpp"

namespace lwcl::backend::cuda_detail {

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  // A non-sticky error stays latched in the runtime until read; clear it so the next call starts clean.
  (void)cudaGetLastError();
  fail("cuda: ", call, " failed at ", file, ":", line, ": ", cudaGetErrorName(status), " (", cudaGetErrorString(status), ")");
}

inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  fail("cublas: ", call, " failed at ", file, ":", line, ": ", cublasGetStatusString(status), " (status ",
       static_cast<int>(status), ")");
}

// For paths that must not throw (destructors, frees run during stack unwinding): the error is printed
// instead, so a failure is still visible without replacing the exception already in flight.
inline void report_cuda(cudaError_t status, const char* call, const char* file, int line) noexcept {
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();
  std::fprintf(stderr, "lwcl: cuda: %s failed at %s:%d: %s (%s)\n", call, file, line, cudaGetErrorName(status),
               cudaGetErrorString(status));
}

}  // namespace lwcl::backend::cuda_detail

// Throws lwcl::error naming the call, file and line unless the CUDA runtime call returned cudaSuccess.
#define LWCL_CUDA_CHECK(call) ::lwcl::backend::cuda_detail::check_cuda((call), #call, __FILE__, __LINE__)
// Same for cuBLAS calls.
#define LWCL_CUBLAS_CHECK(call) ::lwcl::backend::cuda_detail::check_cublas((call), #call, __FILE__, __LINE__)
// Checks that the kernel launch just issued was accepted (bad configuration, missing image for this GPU).
#define LWCL_CUDA_CHECK_LAUNCH(what) \
  ::lwcl::backend::cuda_detail::check_cuda(cudaGetLastError(), what, __FILE__, __LINE__)
// Prints instead of throwing; for destructors and deallocation.
#define LWCL_CUDA_REPORT(call) ::lwcl::backend::cuda_detail::report_cuda((call), #call, __FILE__, __LINE__)
