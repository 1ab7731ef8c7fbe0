// cuda::linear_epilogue_forward (cuBLASLt GEMM with fused bias / GELU epilogues) against the host ops:
// ops::linear_forward, then ops::gelu_forward with GPT-2's tanh form, in f32 on backend::host. f32 runs
// are held to the f32 parity tolerance of test_cuda.cu; bf16 runs to a bound derived from bf16's
// rounding. The saved GELU input (aux) is checked against the host's bias + GEMM result.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "lwcl/backend/cuda/cuda.cuh"
#include "lwcl/backend/host/host.hpp"
#include "lwcl/ops/activation.hpp"
#include "lwcl/ops/linear.hpp"
#include "lwcl/tensor/dtype.hpp"
#include "lwcl/tensor/tensor.hpp"
#include "support/check.hpp"

using namespace lwcl;
using lwcl::test::rel_error;

namespace {

// f32: both sides form the same fp32 products; cuBLASLt's summation order differs from OpenBLAS's
// (a few ulp, growing like sqrt(IC)), and the GELU differs by CUDA's tanh/exp against glibc's. The
// tolerance is test_cuda.cu's fwd_tol.
constexpr double f32_tol = 1e-5;

// bf16: the inputs are rounded to bf16 first and the host reference is computed in f32 from the
// rounded values, so input rounding is common to both sides. bf16 x bf16 products are exact in fp32
// (8 + 8 significand bits), and cuBLASLt accumulates, adds the bias and applies GELU in fp32; what
// differs is (1) one rounding of each output (and of each saved pre-activation) to bf16, at most
// u = 2^-8 relative under round-to-nearest (8 significand bits), so at most 2^-8 of the largest
// reference magnitude in test::rel_error's measure; and (2) the two fp32 accumulations (device and
// host), each at most IC * 2^-24 * sum_i |x_i w_i| at worst-case growth. With x ~ N(0, 1) and
// w ~ N(0, 1/IC) below, sum |x w| is about 0.64 sqrt(IC), 6.2 at IC = 96: under 4e-5 absolute each,
// against largest outputs of about 4, so about 1e-5 relative each, and GELU' <= 1.13 keeps that
// order. 1e-4 covers both. Hence 2^-8 + 1e-4.
// With the GELU epilogue, cuBLASLt rounds the pre-activation to bf16 before applying GELU (measured on
// an H200 with cuBLAS 13: the output equals GELU of the saved bf16 pre-activation within one output
// rounding, the case below; against the f32 reference it was 1.1 u off at [37, 50] x 100). That adds
// GELU'(x) * u * |x| <= 1.13 u max|pre| to each output, so the bound there is
// u (1 + 1.13 max|pre| / max|out|) + 1e-4, the ratio taken from the reference.
constexpr double bf16_tol = 0x1p-8 + 1e-4;
double bf16_gelu_tol(const std::vector<float>& pre, const std::vector<float>& out) {
  double mp = 0, mo = 0;
  for (const float v : pre) mp = std::max(mp, std::abs(static_cast<double>(v)));
  for (const float v : out) mo = std::max(mo, std::abs(static_cast<double>(v)));
  return 0x1p-8 * (1.0 + 1.13 * mp / mo) + 1e-4;
}

std::vector<float> randn(index_t n, std::uint64_t seed, double scale = 1.0) {
  return test::random_normal<float>(static_cast<std::size_t>(n), seed, scale);
}

std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = bf16::from_float(v[i]);
  return r;
}
std::vector<float> to_float(const std::vector<bf16>& v) {
  std::vector<float> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = v[i].to_float();
  return r;
}
std::vector<float> to_float(const std::vector<float>& v) { return v; }

// One problem: inp of shape `in` (last extent IC), OC outputs, and which parts of the epilogue run.
struct problem {
  shape in;
  index_t OC;
  bool bias, gelu, save_pre;
};

shape out_shape_of(const problem& p) {
  shape s;
  for (int a = 0; a + 1 < p.in.rank(); ++a) s.push(p.in[a]);
  s.push(p.OC);
  return s;
}

// Random f32 inputs, scaled so that the pre-activations are O(1): weights by 1/sqrt(IC), bias 0.5.
// GELU's curved region (and the region where tanh and erf forms differ most, |x| near 2.7) is then
// well covered.
struct inputs {
  std::vector<float> x, w, b;
};
inputs make_inputs(const problem& p, std::uint64_t seed) {
  const index_t IC = p.in.last();
  inputs r;
  r.x = randn(p.in.numel(), seed);
  r.w = randn(p.OC * IC, seed + 1, 1.0 / std::sqrt(static_cast<double>(IC)));
  if (p.bias) r.b = randn(p.OC, seed + 2, 0.5);
  return r;
}

std::vector<float> round_to_bf16(const std::vector<float>& v) { return to_float(to_bf16(v)); }

// The host reference in f32: pre = inp @ weight^T + bias, out = gelu_tanh(pre) or pre.
struct outputs {
  std::vector<float> out, pre;
};
outputs host_reference(const problem& p, const inputs& in) {
  backend::cpu host;
  const index_t IC = p.in.last();
  const shape os = out_shape_of(p);
  outputs r;
  r.pre.assign(static_cast<std::size_t>(os.numel()), 0.0f);
  r.out.assign(r.pre.size(), 0.0f);
  ops::linear_forward(host, tensor(r.pre.data(), os), tensor(in.x.data(), p.in), tensor(in.w.data(), shape{p.OC, IC}),
                      p.bias ? tensor(in.b.data(), shape{p.OC}) : tensor());
  if (p.gelu) ops::gelu_forward(host, tensor(r.out.data(), os), tensor(r.pre.data(), os), ops::gelu_kind::tanh);
  else r.out = r.pre;
  return r;
}

template <class T>
owned_tensor<backend::cuda> upload(backend::cuda& gpu, const std::vector<T>& v, shape s) {
  REQUIRE(static_cast<index_t>(v.size()) == s.numel());
  owned_tensor<backend::cuda> t(gpu, dtype_of_v<T>, s);
  gpu.from_host(t.view().data, v.data(), v.size() * sizeof(T));
  return t;
}
template <class T>
std::vector<float> download(backend::cuda& gpu, const tensor& t) {
  std::vector<T> v(static_cast<std::size_t>(t.numel()));
  gpu.to_host(v.data(), t.data, t.bytes());
  return to_float(v);
}

// Runs the fused GEMM on the device with T = float or bf16 elements made from the f32 inputs; `pre`
// comes back empty unless the problem saves it.
template <class T>
outputs run_device(backend::cuda& gpu, const problem& p, const inputs& in) {
  const index_t IC = p.in.last();
  const shape os = out_shape_of(p);
  auto convert = [](const std::vector<float>& v) {
    if constexpr (std::is_same_v<T, bf16>) return to_bf16(v);
    else return v;
  };
  const auto x = upload(gpu, convert(in.x), p.in), w = upload(gpu, convert(in.w), shape{p.OC, IC});
  owned_tensor<backend::cuda> b;
  if (p.bias) b = upload(gpu, convert(in.b), shape{p.OC});
  owned_tensor<backend::cuda> out(gpu, dtype_of_v<T>, os), pre;
  if (p.save_pre) pre = owned_tensor<backend::cuda>(gpu, dtype_of_v<T>, os);
  auto call = [&] { return gpu.linear_epilogue_forward(out.view(), pre.view(), x.view(), w.view(), b.view(), p.gelu); };
  if constexpr (std::is_same_v<decltype(call()), bool>) REQUIRE(call());  // the fused path took the case
  else call();
  outputs r;
  r.out = download<T>(gpu, out.view());
  if (p.save_pre) r.pre = download<T>(gpu, pre.view());
  return r;
}

// Every epilogue: GELU with saved input and bias (GELU_AUX_BIAS), without saving, bias only, GELU
// without bias (with and without the saved input), plain GEMM, a 3-D input, and ragged sizes.
const std::vector<problem>& problems() {
  static const std::vector<problem> ps = {
      {shape{2, 32, 96}, 128, true, true, true},  {shape{64, 96}, 128, true, true, false},
      {shape{64, 96}, 128, true, false, false},   {shape{64, 96}, 128, false, true, true},
      {shape{64, 96}, 128, false, true, false},   {shape{64, 96}, 128, false, false, false},
      {shape{37, 50}, 100, true, true, false},    {shape{37, 50}, 100, false, false, false},
  };
  return ps;
}

// A consistent case that the cuBLASLt path does not take: an error naming the reason while
// linear_epilogue_forward returns nothing; false (nothing done, the caller falls back) if it returns bool.
template <class Call>
void check_declined(Call&& call, const char* why) {
  if constexpr (std::is_same_v<decltype(call()), bool>) CHECK_FALSE(call());
  else CHECK_THROWS_WITH_AS(call(), doctest::Contains(why), lwcl::error);
}

// GELU in double, both forms, for telling which one the epilogue computes.
double gelu_tanh(double x) { return 0.5 * x * (1.0 + std::tanh(0.79788456080286535588 * (x + 0.044715 * x * x * x))); }
double gelu_erf(double x) { return 0.5 * x * std::erfc(-x * 0.70710678118654752440); }

}  // namespace

TEST_CASE("cuda: linear_epilogue_forward in f32 matches host linear_forward + gelu_forward (tanh)") {
  backend::cuda gpu;
  std::uint64_t seed = 100;
  for (const auto& p : problems()) {
    CAPTURE(p.in.str());
    CAPTURE(p.OC);
    CAPTURE(p.bias);
    CAPTURE(p.gelu);
    CAPTURE(p.save_pre);
    const auto in = make_inputs(p, seed += 10);
    const auto want = host_reference(p, in);
    const auto got = run_device<float>(gpu, p, in);
    const double err = rel_error(got.out, want.out);
    MESSAGE("f32 out, device vs host: relative error ", err);
    CHECK(err < f32_tol);
    if (p.save_pre) CHECK(rel_error(got.pre, want.pre) < f32_tol);
  }
}

TEST_CASE("cuda: the GELU epilogue is the tanh form (it is told apart from erf on the saved input)") {
  backend::cuda gpu;
  const problem p{shape{64, 96}, 128, true, true, true};
  const auto in = make_inputs(p, 7);
  const auto got = run_device<float>(gpu, p, in);
  // The epilogue alone: the device output against both forms applied, in double, to the device's own
  // pre-activations, so that GEMM rounding does not enter.
  std::vector<double> as_tanh(got.pre.size()), as_erf(got.pre.size());
  for (std::size_t i = 0; i < got.pre.size(); ++i) {
    as_tanh[i] = gelu_tanh(got.pre[i]);
    as_erf[i] = gelu_erf(got.pre[i]);
  }
  const double tanh_err = rel_error(got.out, as_tanh), erf_err = rel_error(got.out, as_erf);
  MESSAGE("GELU epilogue against the tanh form: ", tanh_err, "; against the erf form: ", erf_err);
  // The data reach the region where the forms differ by several times the tolerance (about 1e-4 of
  // the largest output here).
  REQUIRE(rel_error(as_erf, as_tanh) > 5 * f32_tol);
  CHECK(tanh_err < f32_tol);
}

TEST_CASE("cuda: linear_epilogue_forward in bf16 matches the f32 host reference within bf16 rounding") {
  backend::cuda gpu;
  std::uint64_t seed = 300;
  for (const auto& p : problems()) {
    CAPTURE(p.in.str());
    CAPTURE(p.OC);
    CAPTURE(p.bias);
    CAPTURE(p.gelu);
    CAPTURE(p.save_pre);
    auto in = make_inputs(p, seed += 10);
    // Round once, here, so that the device's inputs and the reference's are the same numbers.
    in.x = round_to_bf16(in.x);
    in.w = round_to_bf16(in.w);
    in.b = round_to_bf16(in.b);
    const auto want = host_reference(p, in);
    const auto got = run_device<bf16>(gpu, p, in);
    const double err = rel_error(got.out, want.out), tol = p.gelu ? bf16_gelu_tol(want.pre, want.out) : bf16_tol;
    MESSAGE("bf16 out, device vs f32 host: relative error ", err, " (bound ", tol, ")");
    CHECK(err < tol);
    // Not exact: a tolerance this loose must still see something of bf16's rounding, else the
    // output was not rounded to bf16 at all (or the reference was).
    CHECK(err > 0);
    if (p.save_pre) {
      const double pre_err = rel_error(got.pre, want.pre);
      MESSAGE("bf16 pre, device vs f32 host: relative error ", pre_err);
      CHECK(pre_err < bf16_tol);
    }
  }
}

TEST_CASE("cuda: in bf16 the GELU epilogue is GELU of the bf16-rounded pre-activation, rounded once") {
  backend::cuda gpu;
  std::uint64_t seed = 700;
  for (const auto& p : problems()) {
    if (!p.gelu || !p.save_pre) continue;
    CAPTURE(p.in.str());
    auto in = make_inputs(p, seed += 10);
    in.x = round_to_bf16(in.x);
    in.w = round_to_bf16(in.w);
    in.b = round_to_bf16(in.b);
    const auto got = run_device<bf16>(gpu, p, in);
    // GELU (tanh form, in double) of the device's own saved bf16 pre-activations: if the epilogue
    // works from them, only the output's rounding (u = 2^-8) and the tanh's evaluation separate the two.
    std::vector<double> from_saved(got.pre.size());
    for (std::size_t i = 0; i < got.pre.size(); ++i) from_saved[i] = gelu_tanh(got.pre[i]);
    const double err = rel_error(got.out, from_saved);
    MESSAGE("bf16 out against GELU of the saved bf16 pre-activation: relative error ", err);
    CHECK(err <= 0x1p-8 + 1e-5);
  }
}

TEST_CASE("cuda: linear_epilogue_forward rejects bad arguments with lwcl::error and declines f64 and ragged pre") {
  backend::cuda gpu;
  const index_t N = 4, IC = 8, OC = 16;
  auto f32 = [&](shape s) { return owned_tensor<backend::cuda>(gpu, dtype::f32, s); };
  const auto x = f32({N, IC}), w = f32({OC, IC}), b = f32({OC}), out = f32({N, OC}), pre = f32({N, OC});
  const tensor none;
  auto call = [&](const tensor& o, const tensor& pr, const tensor& in, const tensor& wt, const tensor& bs, bool gelu) {
    return gpu.linear_epilogue_forward(o, pr, in, wt, bs, gelu);
  };
  // The valid call, for contrast.
  CHECK_NOTHROW(call(out, pre, x, w, b, true));
  gpu.synchronize();
  const auto msg = [](const char* what) { return doctest::Contains(what); };
  CHECK_THROWS_WITH_AS(call(out, none, none, w, b, false), msg("cuda::linear_epilogue_forward: inp is empty"), lwcl::error);
  CHECK_THROWS_WITH_AS(call(out, none, x, f32({OC, IC + 1}), b, false),
                       msg("cuda::linear_epilogue_forward: weight has shape [16, 9], expected [OC, 8]"), lwcl::error);
  CHECK_THROWS_WITH_AS(call(f32({N, OC + 1}), none, x, w, b, false),
                       msg("cuda::linear_epilogue_forward: out has shape [4, 17], expected [4, 16]"), lwcl::error);
  CHECK_THROWS_WITH_AS(call(out, none, x, w, f32({OC + 1}), false),
                       msg("cuda::linear_epilogue_forward: bias has shape [17], expected [16]"), lwcl::error);
  CHECK_THROWS_WITH_AS(call(out, pre, x, w, b, false), msg("written only when gelu is true"), lwcl::error);
  CHECK_THROWS_WITH_AS(call(out, f32({N, OC + 1}), x, w, b, true), msg("pre has shape [4, 17], expected [4, 16]"),
                       lwcl::error);
  {
    const auto o12 = f32({N, 12}), p12 = f32({N, 12}), w12 = f32({12, IC});
    check_declined([&] { return call(o12, p12, x, w12, none, true); },
                   "cuda::linear_epilogue_forward: saving pre needs OC divisible by 8");
  }
  const owned_tensor<backend::cuda> b16(gpu, dtype::bf16, shape{OC});
  CHECK_THROWS_WITH_AS(call(out, none, x, w, b16, false), msg("bias has dtype bf16, expected f32 (the dtype of inp)"),
                       lwcl::error);
  {
    auto f64 = [&](shape s) { return owned_tensor<backend::cuda>(gpu, dtype::f64, s); };
    const auto o64 = f64({N, OC}), x64 = f64({N, IC}), w64 = f64({OC, IC});
    check_declined([&] { return call(o64, none, x64, w64, none, false); },
                   "cuda::linear_epilogue_forward: dtype f64 is not supported (expected f32 or bf16)");
  }
  // out written over its own input.
  const auto square = f32({N, IC}), wsq = f32({IC, IC});
  CHECK_THROWS_WITH_AS(call(square, none, square, wsq, none, false), msg("out overlaps inp"), lwcl::error);
  CHECK_THROWS_WITH_AS(call(out, out, x, w, b, true), msg("pre overlaps out"), lwcl::error);
}
