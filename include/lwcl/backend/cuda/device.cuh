#pragma once
// Device discovery and selection. cuda_device_count() answers 0 rather than failing on machines with
// no driver or no GPU, so that CPU-only builds can run CUDA programs and skip cleanly.

#include <cuda_runtime_api.h>

#include "lwcl/backend/cuda/error.cuh"

namespace lwcl::backend {

// Number of usable CUDA devices; 0 when there is no driver, no device, or only a stub driver library.
// Any other failure of the runtime is an lwcl::error.
inline int cuda_device_count() {
  int n = 0;
  const cudaError_t status = cudaGetDeviceCount(&n);
  switch (status) {
    case cudaSuccess: return n;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorInitializationError:
      (void)cudaGetLastError();
      return 0;
    default: LWCL_CUDA_CHECK(status); return 0;
  }
}

namespace cuda_detail {

// Makes `device` current for the lifetime of the guard and restores the previous device afterwards;
// a no-op (one cudaGetDevice) when it already is current, which is the common single-GPU case.
class scoped_device {
 public:
  explicit scoped_device(int device) {
    LWCL_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) LWCL_CUDA_CHECK(cudaSetDevice(device));
    else previous_ = -1;
  }
  ~scoped_device() {
    if (previous_ >= 0) LWCL_CUDA_REPORT(cudaSetDevice(previous_));
  }
  scoped_device(const scoped_device&) = delete;
  scoped_device& operator=(const scoped_device&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace cuda_detail
}  // namespace lwcl::backend
