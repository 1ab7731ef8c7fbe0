#pragma once
// Latency-table entries measured on backend::cuda: one linear as a decoding step runs it on the GPU,
// the f32 layer through cuBLAS (backend::cuda::gemm, exact fp32) and a packed one through
// quant::dequant_matmul (backend/cuda/quant/matmul.cuh), timed with CUDA events on the compute stream.
// The keys are quant::linear_key's, with threads 0 standing for the GPU, so a table measured here is
// read and summed by quant::latency_table as a host one is.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "lwcl/backend/cuda/cuda.cuh"
#include "lwcl/backend/cuda/error.cuh"
#include "lwcl/backend/cuda/quant/matmul.cuh"
#include "lwcl/core/error.hpp"
#include "lwcl/core/rng.hpp"
#include "lwcl/quant/latency.hpp"
#include "lwcl/quant/rtn.hpp"
#include "lwcl/tensor/tensor.hpp"

namespace lwcl::quant {

namespace cuda_latency_detail {

class events {
 public:
  events() {
    LWCL_CUDA_CHECK(cudaEventCreate(&start_));
    LWCL_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~events() {
    LWCL_CUDA_REPORT(cudaEventDestroy(start_));
    LWCL_CUDA_REPORT(cudaEventDestroy(stop_));
  }
  events(const events&) = delete;
  events& operator=(const events&) = delete;

  // Seconds per call of `calls` calls of f() queued back to back on the stream.
  template <class F>
  double per_call(cudaStream_t stream, long calls, F&& f) {
    LWCL_CUDA_CHECK(cudaEventRecord(start_, stream));
    for (long i = 0; i < calls; ++i) f();
    LWCL_CUDA_CHECK(cudaEventRecord(stop_, stream));
    LWCL_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    LWCL_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return 1e-3 * static_cast<double>(ms) / static_cast<double>(calls);
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// The median of 5 timings, each of enough calls to last about min_seconds / 5.
template <class F>
double median_seconds(backend::cuda& gpu, F&& f, double min_seconds) {
  backend::cuda_detail::scoped_device on(gpu.device());  // the events belong to the backend's device
  events ev;
  f();
  gpu.synchronize();
  long calls = 1;
  while (ev.per_call(gpu.stream(), calls, f) * static_cast<double>(calls) < min_seconds / 5 && calls < (1L << 20)) calls *= 2;
  std::vector<double> t;
  for (int r = 0; r < 5; ++r) t.push_back(ev.per_call(gpu.stream(), calls, f));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace cuda_latency_detail

// One linear on the GPU, as quant::measure_linear measures it on the host: hot (stream_bytes 0) or with
// the calls taking turns over copies of the weights spanning stream_bytes. Weights are RTN-packed random
// values (speed does not depend on them). Only 32-bit activations: there is no 8-bit activation kernel on
// CUDA.
inline double measure_linear(backend::cuda& gpu, const linear_key& k, double min_seconds = 0.05) {
  check(k.act_bits == 32, "measure_linear (cuda): ", k.str(), ": 8-bit activations have no CUDA kernel (expected act_bits 32)");
  check(k.rows > 0 && k.cols > 0 && k.tokens > 0, "measure_linear (cuda): ", k.str(), " (expected positive sizes)");
  check(k.stream_bytes <= (std::size_t{16} << 30), "measure_linear (cuda): ", k.str(), " (expected a working set of at most 16 GiB)");
  const philox_stream s{0x1a7e, static_cast<std::uint64_t>(k.rows * 131 + k.cols)};
  std::vector<float> W(static_cast<std::size_t>(k.rows * k.cols)), x(static_cast<std::size_t>(k.tokens * k.cols));
  for (std::size_t i = 0; i < W.size(); ++i) W[i] = 0.05f * (s.uniform(i) - 0.5f);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = s.uniform(W.size() + i) - 0.5f;
  const auto copies = [&](std::size_t bytes) {
    return k.stream_bytes == 0 ? std::size_t{1} : std::max<std::size_t>(1, (k.stream_bytes + bytes - 1) / bytes);
  };
  owned_tensor<backend::cuda> xd(gpu, dtype::f32, shape{k.tokens, k.cols}), yd(gpu, dtype::f32, shape{k.tokens, k.rows});
  gpu.from_host(xd.view().data, x.data(), x.size() * sizeof(float));
  std::size_t turn = 0;
  if (k.weight_bits == 32) {
    const std::size_t n = copies(W.size() * sizeof(float));
    std::vector<owned_tensor<backend::cuda>> ws;
    for (std::size_t c = 0; c < n; ++c) {
      ws.emplace_back(gpu, dtype::f32, shape{k.rows, k.cols});
      if (c == 0) gpu.from_host(ws.back().view().data, W.data(), W.size() * sizeof(float));
      else gpu.copy(ws.back().view().data, ws.front().view().data, W.size() * sizeof(float));
    }
    return cuda_latency_detail::median_seconds(gpu, [&] {
      gpu.gemm<float>(false, true, k.tokens, k.rows, k.cols, 1.0f, xd.ptr<float>(), k.cols, ws[turn++ % n].ptr<float>(), k.cols,
                      0.0f, yd.ptr<float>(), k.rows);
    }, min_seconds);
  }
  weight_format f;
  f.bits = k.weight_bits;
  f.group = k.group;
  const packed_weight p = quantize_rtn(W, k.rows, k.cols, f, k.str());
  std::vector<std::unique_ptr<device_packed_weight>> ps;
  for (std::size_t c = 0, n = copies(p.bytes()); c < n; ++c) ps.push_back(std::make_unique<device_packed_weight>(gpu, p, k.str()));
  // The arguments are checked once here, so the timed calls queue kernels and nothing else.
  cuda_qmm::check_arguments(gpu, xd.ptr<float>(), k.tokens, nullptr, yd.ptr<float>());
  return cuda_latency_detail::median_seconds(gpu, [&] {
    cuda_qmm::queue_matmul(gpu, *ps[turn++ % ps.size()], xd.ptr<float>(), k.tokens, nullptr, yd.ptr<float>(), std::size_t{32} << 20);
  }, min_seconds);
}

}  // namespace lwcl::quant
