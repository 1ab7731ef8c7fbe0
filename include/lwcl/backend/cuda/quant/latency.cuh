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
#include "lwcl/backend/cuda/events.cuh"
#include "lwcl/backend/cuda/quant/matmul.cuh"
#include "lwcl/core/error.hpp"
#include "lwcl/quant/latency.hpp"
#include "lwcl/quant/rtn.hpp"
#include "lwcl/tensor/tensor.hpp"

namespace lwcl::quant {

namespace cuda_latency_detail {

// The median of 5 timings, each of enough calls to last about min_seconds / 5.
template <class F>
double median_seconds(backend::cuda& gpu, F&& f, double min_seconds) {
  backend::cuda_detail::scoped_device on(gpu.device());  // the events belong to the backend's device
  backend::cuda_events ev;
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
  latency_detail::check_key(k, "measure_linear (cuda)");
  const latency_detail::linear_data data = latency_detail::random_linear(k);
  const std::vector<float>& W = data.W;
  const std::vector<float>& x = data.x;
  const auto copies = [&](std::size_t bytes) { return latency_detail::copies(k, bytes); };
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
