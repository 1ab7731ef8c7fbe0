// The weight quantisers (include/lwcl/quant/) against the PyTorch oracle of tools/fixtures/quant.py,
// written from the definitions of round-to-nearest and of GPTQ (the optimal brain quantiser's update in
// a fixed order, with an explicit inverse Hessian): the same codes, scales and zero points, bitwise;
// GPTQ's loss within f64 rounding. Then the packed formats' round trips and layout, the dequantising
// GEMM against dequantise-then-GEMM at every instruction set the CPU runs, and the refusals.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/quant/format.hpp"
#include "lwcl/quant/gptq.hpp"
#include "lwcl/quant/matmul.hpp"
#include "lwcl/quant/packed.hpp"
#include "lwcl/quant/rtn.hpp"
#include "support/fixture.hpp"
#include "support/quant_format.hpp"

using namespace lwcl;
using namespace lwcl::quant;

namespace {

const test::fixture& oracle() {
  static const test::fixture f("quant/quant.lwfx");
  return f;
}


// Codes, scales and zero points of `p` against the oracle's case `name`, exactly.
void expect_matches(const packed_weight& p, const std::string& name) {
  const auto& o = oracle();
  const auto codes = unpack_codes(p);
  const auto want = o.ints(name + ".codes");
  REQUIRE(codes.size() == want.size());
  std::size_t differ = 0;
  for (std::size_t i = 0; i < codes.size(); ++i) differ += codes[i] != want[i];
  CHECK_MESSAGE(differ == 0, name, ": ", differ, " of ", codes.size(), " codes differ");
  const auto scales = o.f64(name + ".scales");
  const auto zeros = o.ints(name + ".zeros");
  REQUIRE(static_cast<index_t>(scales.size()) == p.rows * p.groups());
  std::size_t bad_scale = 0, bad_zero = 0;
  for (index_t r = 0; r < p.rows; ++r)
    for (index_t g = 0; g < p.groups(); ++g) {
      const auto k = static_cast<std::size_t>(r * p.groups() + g);
      const group_params q = p.params(r, g);
      bad_scale += static_cast<double>(q.scale) != scales[k];
      if (p.format.sym == symmetry::asymmetric) bad_zero += q.zero != zeros[k];
    }
  CHECK_MESSAGE(bad_scale == 0, name, ": ", bad_scale, " scales differ");
  CHECK_MESSAGE(bad_zero == 0, name, ": ", bad_zero, " zero points differ");
}

double recon_error(const std::vector<float>& W, const std::vector<float>& deq, const std::vector<float>& X, index_t rows,
                   index_t cols) {
  const index_t n = static_cast<index_t>(X.size()) / cols;
  double e = 0.0;
  for (index_t t = 0; t < n; ++t)
    for (index_t r = 0; r < rows; ++r) {
      double s = 0.0;
      for (index_t c = 0; c < cols; ++c)
        s += static_cast<double>(X[t * cols + c]) * (static_cast<double>(W[r * cols + c]) - static_cast<double>(deq[r * cols + c]));
      e += s * s;
    }
  return e / static_cast<double>(n);
}

struct rtn_case {
  const char* name;
  int bits;
  index_t group;
  bool sym;
  dtype st;
};
struct gptq_case {
  const char* name;
  int bits;
  index_t group;
  bool sym;
  dtype st;
  bool act_order;
  const char* rtn_twin;  // the round-to-nearest case of the same format, or null
};

const rtn_case rtn_cases[] = {
    {"rtn_int4_g0_sym_f16", 4, 0, true, dtype::f16},    {"rtn_int4_g32_asym_f16", 4, 32, false, dtype::f16},
    {"rtn_int4_g32_sym_bf16", 4, 32, true, dtype::bf16}, {"rtn_int8_g0_sym_bf16", 8, 0, true, dtype::bf16},
    {"rtn_int8_g64_asym_f16", 8, 64, false, dtype::f16},
};
const gptq_case gptq_cases[] = {
    {"gptq_int4_g0_sym_f16", 4, 0, true, dtype::f16, false, "rtn_int4_g0_sym_f16"},
    {"gptq_int4_g32_asym_f16", 4, 32, false, dtype::f16, false, "rtn_int4_g32_asym_f16"},
    {"gptq_int4_g32_sym_f16", 4, 32, true, dtype::f16, false, nullptr},
    {"gptq_int8_g64_sym_bf16", 8, 64, true, dtype::bf16, false, nullptr},
    {"gptq_int4_g32_sym_f16_actorder", 4, 32, true, dtype::f16, true, nullptr},
    {"gptq_int4_g0_asym_f16_actorder", 4, 0, false, dtype::f16, true, nullptr},
};

}  // namespace

TEST_CASE("f16_from_float rounds as PyTorch's .half() does, and to nearest even between neighbours") {
  const auto& o = oracle();
  const auto probe = o.f32("f16_probe");
  const auto bits = o.ints("f16_probe_bits");
  std::size_t differ = 0;
  for (std::size_t i = 0; i < probe.size(); ++i) differ += f16_from_float(probe[i]) != static_cast<std::uint16_t>(bits[i]);
  CHECK(differ == 0);
  // Every finite f16 survives the round trip, and the midpoint of two neighbours goes to the even one.
  std::size_t bad_trip = 0, bad_tie = 0;
  for (std::uint32_t h = 0; h < 0x7c00u; ++h) {
    for (const std::uint32_t s : {0u, 0x8000u}) {
      const auto b = static_cast<std::uint16_t>(h | s);
      bad_trip += f16_from_float(f16_to_float(b)) != b;
      if (h + 1 < 0x7c00u) {
        const float mid = (f16_to_float(b) + f16_to_float(static_cast<std::uint16_t>((h + 1) | s))) / 2.0f;
        const auto even = static_cast<std::uint16_t>(((h & 1u) ? h + 1 : h) | s);
        bad_tie += f16_from_float(mid) != even;
      }
    }
  }
  CHECK(bad_trip == 0);
  CHECK(bad_tie == 0);
  CHECK(f16_from_float(1e6f) == 0x7c00u);
  CHECK(f16_from_float(-1e6f) == 0xfc00u);
  CHECK((f16_from_float(std::nanf("")) & 0x7e00u) == 0x7e00u);
}

TEST_CASE("round-to-nearest gives the oracle's codes, scales and zero points, and its dequantised weight bitwise") {
  const auto& o = oracle();
  const auto W = o.f32("W");
  const index_t rows = o.dims("W")[0], cols = o.dims("W")[1];
  for (const auto& c : rtn_cases) {
    CAPTURE(c.name);
    const packed_weight p = quantize_rtn(W, rows, cols, test::quant_format(c.bits, c.group, c.sym, c.st), c.name);
    expect_matches(p, c.name);
    const auto deq = dequantize(p);
    const auto want = o.f32(std::string(c.name) + ".deq");
    std::size_t differ = 0;
    for (std::size_t i = 0; i < deq.size(); ++i) differ += deq[i] != want[i];
    CHECK(differ == 0);
  }
}

TEST_CASE("GPTQ gives the oracle's codes and scales, its loss, and a smaller layer error than round-to-nearest") {
  const auto& o = oracle();
  const auto W = o.f32("W");
  const auto X = o.f32("X");
  const index_t rows = o.dims("W")[0], cols = o.dims("W")[1];
  hessian h(cols);
  h.add(X.data(), o.dims("X")[0] / 2);  // in two calls, as calibration batches come
  h.add(X.data() + (o.dims("X")[0] / 2) * cols, o.dims("X")[0] - o.dims("X")[0] / 2);
  CHECK(h.rows_seen() == o.dims("X")[0]);
  for (const auto& c : gptq_cases) {
    CAPTURE(c.name);
    // The lazy batch size changes the order of the floating-point updates only: a block that holds the
    // whole row, blocks aligned with the groups and blocks that are not must all give the oracle's codes.
    for (const index_t block : {index_t(128), index_t(32), index_t(48)}) {
      CAPTURE(block);
      gptq_options opt;
      opt.damp = o.scalar("damp");
      opt.block = block;
      opt.act_order = c.act_order;
      const quantized res = quantize_gptq(W.data(), rows, cols, h, test::quant_format(c.bits, c.group, c.sym, c.st), opt, c.name);
      expect_matches(res.weight, c.name);
      const double want = o.scalar(std::string(c.name) + ".loss");
      CHECK(std::abs(res.loss - want) <= 1e-9 * want);
      const double recon = recon_error(W, dequantize(res.weight), X, rows, cols);
      CHECK(std::abs(recon - o.scalar(std::string(c.name) + ".recon")) <= 1e-5 * recon);
      if (c.rtn_twin != nullptr) CHECK(recon < 0.9 * o.scalar(std::string(c.rtn_twin) + ".recon"));
    }
  }
}

TEST_CASE("packing round-trips every format, and int4's tiles hold columns j and j + 16 in one byte") {
  std::mt19937 rng(7);
  for (const int bits : {4, 8})
    for (const index_t group : {index_t(0), index_t(32), index_t(64)})
      for (const bool sym : {true, false})
        for (const dtype st : {dtype::f16, dtype::bf16}) {
          const weight_format f = test::quant_format(bits, group, sym, st);
          CAPTURE(f.describe());
          const index_t rows = 5, cols = 128;
          std::uniform_int_distribution<int> code(0, f.max_code());
          std::vector<std::uint8_t> codes(static_cast<std::size_t>(rows * cols));
          for (auto& c : codes) c = static_cast<std::uint8_t>(code(rng));
          std::vector<std::uint16_t> scales(static_cast<std::size_t>(rows * f.groups(cols)));
          for (auto& s : scales) s = scale_bits(0.01f * static_cast<float>(1 + code(rng)), st);
          std::vector<std::uint8_t> zeros;
          if (!sym) zeros.assign(scales.size(), static_cast<std::uint8_t>(f.max_code() / 3));
          const packed_weight p = pack_codes(codes, rows, cols, f, scales, zeros, "round trip");
          CHECK(p.codes.size() == static_cast<std::size_t>(rows * cols * bits / 8));
          CHECK(unpack_codes(p) == codes);
          CHECK(p.scales == scales);
          CHECK(p.zeros == zeros);
          if (bits == 4) {
            const std::uint8_t b = p.codes[static_cast<std::size_t>(p.row_bytes() + 16 + 5)];  // row 1, tile 1, byte 5
            CHECK((b & 15) == codes[static_cast<std::size_t>(cols + 32 + 5)]);
            CHECK((b >> 4) == codes[static_cast<std::size_t>(cols + 32 + 16 + 5)]);
          }
          // Dequantising reads each code against its own group's scale and zero point.
          const auto w = dequantize(p);
          const index_t r = 3, c = cols - 1, g = c / f.group_width(cols);
          const float s = scale_value(scales[static_cast<std::size_t>(r * f.groups(cols) + g)], st);
          const int z = sym ? f.mid() : f.max_code() / 3;
          CHECK(w[static_cast<std::size_t>(r * cols + c)] == s * static_cast<float>(codes[static_cast<std::size_t>(r * cols + c)] - z));
        }
}

TEST_CASE("the dequantising GEMM equals dequantise-then-GEMM within f32 rounding, at every instruction set this CPU runs") {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const index_t rows = 40, cols = 192;
  std::vector<float> W(static_cast<std::size_t>(rows * cols)), bias(static_cast<std::size_t>(rows));
  for (auto& v : W) v = 0.05f * nd(rng);
  for (auto& v : bias) v = nd(rng);
  for (const int bits : {4, 8})
    for (const index_t group : {index_t(0), index_t(64)})
      for (const bool sym : {true, false}) {
        const weight_format f = test::quant_format(bits, group, sym, dtype::f16);
        const packed_weight p = quantize_rtn(W, rows, cols, f, "gemm");
        const auto deq = dequantize(p);
        for (const index_t M : {index_t(1), index_t(3), index_t(16)}) {
          std::vector<float> x(static_cast<std::size_t>(M * cols));
          for (auto& v : x) v = nd(rng);
          for (int l = 0; l <= static_cast<int>(cpu_level()); ++l) {
            const auto level = static_cast<simd_level>(l);
            CAPTURE(f.describe());
            CAPTURE(M);
            CAPTURE(simd_level_name(level));
            std::vector<float> y(static_cast<std::size_t>(M * rows), -1.0f);
            dequant_matmul(p, x.data(), M, bias.data(), y.data(), level);
            double worst = 0.0;
            for (index_t t = 0; t < M; ++t)
              for (index_t r = 0; r < rows; ++r) {
                double ref = bias[static_cast<std::size_t>(r)], mag = std::abs(ref);
                for (index_t c = 0; c < cols; ++c) {
                  const double term = static_cast<double>(x[static_cast<std::size_t>(t * cols + c)]) * deq[static_cast<std::size_t>(r * cols + c)];
                  ref += term;
                  mag += std::abs(term);
                }
                // f32 accumulation over `cols` terms: at most about cols * 2^-24 of the sum of magnitudes.
                worst = std::max(worst, std::abs(y[static_cast<std::size_t>(t * rows + r)] - ref) / (mag * static_cast<double>(cols) * 0x1p-24));
              }
            CHECK(worst <= 1.0);
          }
        }
      }
}

TEST_CASE("bad formats, bad packed weights and bad calibration are refused with the layer named") {
  const std::vector<float> W(static_cast<std::size_t>(8 * 96), 0.5f);
  const auto refuses = [](auto&& f, const char* needle) {
    try {
      f();
      FAIL("expected lwcl::error containing '", needle, "'");
    } catch (const lwcl::error& e) {
      CHECK_MESSAGE(std::string(e.what()).find(needle) != std::string::npos, e.what());
    }
  };
  refuses([&] { quantize_rtn(W, 8, 96, test::quant_format(3, 0, true, dtype::f16), "layer0.q"); }, "3 weight bits are not supported");
  refuses([&] { quantize_rtn(W, 8, 96, test::quant_format(4, 64, true, dtype::f16), "layer0.q"); }, "does not divide the layer's 96");
  refuses([&] { quantize_rtn(W, 8, 96, test::quant_format(4, 48, true, dtype::f16), "layer0.q"); }, "not a multiple of 32");
  refuses([&] { quantize_rtn(W, 8, 96, test::quant_format(8, 0, true, dtype::f32), "layer0.q"); }, "expected f16 or bf16");
  const std::vector<float> narrow(static_cast<std::size_t>(8 * 48), 0.5f);
  refuses([&] { quantize_rtn(narrow, 8, 48, test::quant_format(4, 0, true, dtype::f16), "layer0.q"); }, "not a multiple of 32");
  std::vector<float> bad = W;
  bad[17] = std::nanf("");
  refuses([&] { quantize_rtn(bad, 8, 96, test::quant_format(8, 0, true, dtype::f16), "layer0.q"); }, "is not finite");
  std::vector<float> huge = W;
  huge[3] = 1e7f;
  refuses([&] { quantize_rtn(huge, 8, 96, test::quant_format(8, 0, true, dtype::f16), "layer0.q"); }, "past f16's range");

  packed_weight p = quantize_rtn(W, 8, 96, test::quant_format(4, 32, false, dtype::f16), "layer0.q");
  std::vector<float> x(96, 1.0f), y(8);
  packed_weight shortp = p;
  shortp.codes.pop_back();
  refuses([&] { dequant_matmul(shortp, x.data(), 1, nullptr, y.data()); }, "packed codes hold 383 entries, expected 384");
  packed_weight noscale = p;
  noscale.scales.resize(5);
  refuses([&] { dequantize(noscale); }, "packed scales hold 5 entries, expected 24");
  packed_weight badzero = p;
  badzero.zeros[2] = 16;
  refuses([&] { dequantize(badzero); }, "zero point 16 is past the largest 4-bit code 15");

  hessian h(64);
  refuses([&] { quantize_gptq(W.data(), 8, 96, h, test::quant_format(4, 32, true, dtype::f16), {}, "layer0.q"); }, "a Hessian of width 64");
  hessian h96(96);
  refuses([&] { quantize_gptq(W.data(), 8, 96, h96, test::quant_format(4, 32, true, dtype::f16), {}, "layer0.q"); },
          "no calibration inputs were added");
  std::vector<float> xs(96, 1.0f);
  xs[4] = std::numeric_limits<float>::infinity();
  refuses([&] { h96.add(xs.data(), 1); }, "calibration input is inf");
}
