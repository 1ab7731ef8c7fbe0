// quant::dequant_matmul on backend::cuda (backend/cuda/quant/matmul.cuh) against dequantise-then-GEMM
// on the host: the host's quant::dequantize of the same packed weight, multiplied in double. Both sides
// form the same f32 products scale * (code - zero) * x; the device sums them in f32 in another order,
// so the bound is the f32 accumulation's, (cols + 1) * 2^-24 of the sum of the products' magnitudes
// and the bias's (as tests/quant/test_quant.cpp holds the host kernel to cols * 2^-24). The device's dequantised matrix must equal the
// host's bit for bit.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "lwcl/backend/cuda/cuda.cuh"
#include "lwcl/backend/cuda/quant/matmul.cuh"
#include "lwcl/core/error.hpp"
#include "lwcl/quant/packed.hpp"
#include "lwcl/quant/rtn.hpp"
#include "lwcl/tensor/tensor.hpp"
#include "support/quant_format.hpp"

using namespace lwcl;
using namespace lwcl::quant;

namespace {

std::vector<float> normal(std::size_t n, std::uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

owned_tensor<backend::cuda> upload(backend::cuda& gpu, const std::vector<float>& v) {
  owned_tensor<backend::cuda> t(gpu, dtype::f32, shape{static_cast<index_t>(v.size())});
  gpu.from_host(t.view().data, v.data(), v.size() * sizeof(float));
  return t;
}

std::vector<float> download(backend::cuda& gpu, const float* p, std::size_t n) {
  std::vector<float> v(n);
  gpu.to_host(v.data(), p, n * sizeof(float));
  return v;
}

// The largest error of y against the double-precision product of x and the host's dequantised weight,
// in units of the f32 accumulation bound.
double worst_error(const std::vector<float>& y, const std::vector<float>& x, const std::vector<float>& deq,
                   const std::vector<float>& bias, index_t M, index_t rows, index_t cols) {
  double worst = 0.0;
  for (index_t t = 0; t < M; ++t)
    for (index_t r = 0; r < rows; ++r) {
      double ref = bias.empty() ? 0.0 : bias[static_cast<std::size_t>(r)], mag = std::abs(ref);
      for (index_t c = 0; c < cols; ++c) {
        const double term = static_cast<double>(x[static_cast<std::size_t>(t * cols + c)]) * deq[static_cast<std::size_t>(r * cols + c)];
        ref += term;
        mag += std::abs(term);
      }
      const double bound = mag * static_cast<double>(cols + 1) * 0x1p-24, err = std::abs(y[static_cast<std::size_t>(t * rows + r)] - ref);
      worst = std::max(worst, bound > 0 ? err / bound : (err == 0 ? 0.0 : HUGE_VAL));
    }
  return worst;
}

template <class F>
void refuses(F&& f, const char* needle) {
  try {
    f();
    FAIL("expected lwcl::error containing '", needle, "'");
  } catch (const lwcl::error& e) {
    CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, e.what());
  }
}

}  // namespace

TEST_CASE("cuda dequant_matmul equals dequantise-then-GEMM within f32 rounding, every format, decoding and slab paths") {
  backend::cuda gpu;
  struct shape_case {
    int bits;
    index_t rows, cols, group;
  };
  // rows 37: the last block's warps run past the matrix; int8 with 40 columns: the one-code-at-a-time
  // kernel; 48: 16-code reads of a per-channel row; 256 with groups 32 and 128.
  const shape_case shapes[] = {{4, 37, 256, 0}, {4, 37, 256, 32}, {4, 64, 256, 128}, {8, 37, 256, 0},
                               {8, 37, 256, 32}, {8, 21, 40, 0},   {8, 19, 48, 0},    {8, 64, 256, 128}};
  std::uint32_t seed = 1;
  for (const auto& sc : shapes)
    for (const bool sym : {true, false})
      for (const dtype st : {dtype::f16, dtype::bf16}) {
        const weight_format f = test::quant_format(sc.bits, sc.group, sym, st);
        const auto W = normal(static_cast<std::size_t>(sc.rows * sc.cols), ++seed, 0.05f);
        const packed_weight p = quantize_rtn(W, sc.rows, sc.cols, f, "cuda gemm");
        const auto deq = dequantize(p);
        const device_packed_weight dw(gpu, p);
        CHECK(dw.bytes() == p.bytes());

        // The device's dequantised matrix is the host's, bit for bit.
        owned_tensor<backend::cuda> wd(gpu, dtype::f32, shape{sc.rows, sc.cols});
        dequantize(gpu, dw, wd.ptr<float>());
        CHECK(download(gpu, wd.ptr<float>(), deq.size()) == deq);

        const auto bias = normal(static_cast<std::size_t>(sc.rows), ++seed, 1.0f);
        const auto bias_d = upload(gpu, bias);
        for (const index_t M : {index_t(1), index_t(5), index_t(8), index_t(9), index_t(33)})
          for (const bool with_bias : {true, false}) {
            CAPTURE(f.describe());
            CAPTURE(sc.rows);
            CAPTURE(sc.cols);
            CAPTURE(M);
            CAPTURE(with_bias);
            const auto x = normal(static_cast<std::size_t>(M * sc.cols), ++seed, 1.0f);
            const auto xd = upload(gpu, x);
            owned_tensor<backend::cuda> yd(gpu, dtype::f32, shape{M, sc.rows});
            // Slabs of 5 rows (several slabs, the last one short) for the batched path.
            dequant_matmul(gpu, dw, xd.ptr<float>(), M, with_bias ? bias_d.ptr<float>() : nullptr, yd.ptr<float>(),
                           static_cast<std::size_t>(5 * sc.cols) * sizeof(float));
            const auto y = download(gpu, yd.ptr<float>(), static_cast<std::size_t>(M * sc.rows));
            CHECK(worst_error(y, x, deq, with_bias ? bias : std::vector<float>{}, M, sc.rows, sc.cols) <= 1.0);
          }
      }
}

TEST_CASE("cuda dequant_matmul reads an input that is not 16-byte aligned through the one-code kernel") {
  backend::cuda gpu;
  const index_t rows = 24, cols = 128, M = 3;
  const weight_format f = test::quant_format(4, 64, true, dtype::f16);
  const auto W = normal(static_cast<std::size_t>(rows * cols), 7, 0.05f);
  const packed_weight p = quantize_rtn(W, rows, cols, f, "unaligned");
  const device_packed_weight dw(gpu, p);
  const auto x = normal(static_cast<std::size_t>(M * cols), 8, 1.0f);
  std::vector<float> shifted(x.size() + 1, 0.0f);
  std::copy(x.begin(), x.end(), shifted.begin() + 1);
  const auto xd = upload(gpu, shifted);
  owned_tensor<backend::cuda> yd(gpu, dtype::f32, shape{M, rows});
  dequant_matmul(gpu, dw, xd.ptr<float>() + 1, M, nullptr, yd.ptr<float>());
  const auto y = download(gpu, yd.ptr<float>(), static_cast<std::size_t>(M * rows));
  CHECK(worst_error(y, x, dequantize(p), {}, M, rows, cols) <= 1.0);
}

TEST_CASE("cuda dequant_matmul refuses bad input with what was wrong named") {
  backend::cuda gpu;
  const index_t rows = 8, cols = 96;
  const auto W = normal(static_cast<std::size_t>(rows * cols), 3, 0.05f);
  packed_weight p = quantize_rtn(W, rows, cols, test::quant_format(8, 32, true, dtype::f16), "bad input");
  const device_packed_weight dw(gpu, p);
  const auto xd = upload(gpu, std::vector<float>(static_cast<std::size_t>(cols), 1.0f));
  owned_tensor<backend::cuda> yd(gpu, dtype::f32, shape{1, rows});
  std::vector<float> host_x(static_cast<std::size_t>(cols), 1.0f);
  refuses([&] { dequant_matmul(gpu, dw, xd.ptr<float>(), 0, nullptr, yd.ptr<float>()); }, "0 input rows (expected at least 1)");
  refuses([&] { dequant_matmul(gpu, dw, nullptr, 1, nullptr, yd.ptr<float>()); }, "the input x is null");
  refuses([&] { dequant_matmul(gpu, dw, host_x.data(), 1, nullptr, yd.ptr<float>()); }, "the input x is not in device memory");
  p.codes.pop_back();
  refuses([&] { device_packed_weight bad(gpu, p, "layer 3 mlp.fc"); }, "layer 3 mlp.fc: packed codes hold 767 entries, expected 768");
}
