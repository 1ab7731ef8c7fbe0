// 8-bit activations per token (include/lwcl/quant/act_quant.hpp) against the PyTorch oracle of
// tools/fixtures/quant.py (codes, scales and zero points bitwise; the W8A8 and W4A8 products within the
// rounding of the f32 scaling), the integer kernel at every level this CPU runs against the plain loops,
// and the latency table's JSON, its refusals and its sums (include/lwcl/quant/latency.hpp).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/model/config.hpp"
#include "lwcl/quant/act_quant.hpp"
#include "lwcl/quant/latency.hpp"
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


}  // namespace

TEST_CASE("per-token activation codes, scales and zero points equal the oracle's bitwise") {
  const auto& o = oracle();
  const auto X = o.f32("act.x");
  const index_t M = o.dims("act.x")[0], K = o.dims("act.x")[1];
  token_codes q;
  quantize_tokens(X.data(), M, K, q);
  const auto codes = o.ints("act.codes");
  const auto scales = o.f32("act.scales");
  const auto zeros = o.ints("act.zeros");
  std::size_t differ = 0;
  for (std::size_t i = 0; i < codes.size(); ++i) differ += q.codes[i] != codes[i];
  CHECK(differ == 0);
  for (index_t m = 0; m < M; ++m) {
    CAPTURE(m);
    CHECK(q.scale[static_cast<std::size_t>(m)] == scales[static_cast<std::size_t>(m)]);
    CHECK(q.zero[static_cast<std::size_t>(m)] == zeros[static_cast<std::size_t>(m)]);
  }
  // The all-zero row gets scale 1 and zero point 0; the row with the outlier keeps it exactly at code 255.
  CHECK(q.scale[7] == 1.0f);
  CHECK(q.zero[7] == 0);
  CHECK(q.codes[static_cast<std::size_t>(2 * K + 40)] == 255);
  // Fake quantisation is dequantise(quantise) row by row.
  std::vector<float> f = X;
  fake_quantize_tokens(f.data(), M, K);
  std::size_t off = 0;
  for (index_t m = 0; m < M; ++m)
    for (index_t k = 0; k < K; ++k) {
      const auto i = static_cast<std::size_t>(m * K + k);
      off += f[i] != q.scale[static_cast<std::size_t>(m)] * static_cast<float>(static_cast<std::int32_t>(q.codes[i]) - q.zero[static_cast<std::size_t>(m)]);
    }
  CHECK(off == 0);
}

TEST_CASE("W8A8 and W4A8 products equal the oracle's dequantised product, with the VNNI kernel and the plain loops") {
  const auto& o = oracle();
  const auto X = o.f32("act.x");
  const auto W = o.f32("W");
  const index_t M = o.dims("act.x")[0], rows = o.dims("W")[0], cols = o.dims("W")[1];
  struct c_ {
    const char* name;
    weight_format f;
  };
  for (const auto& c : {c_{"rtn_int8_g0_sym_bf16", test::quant_format(8, 0, true, dtype::bf16)},
                        c_{"rtn_int4_g32_asym_f16", test::quant_format(4, 32, false, dtype::f16)}}) {
    CAPTURE(c.name);
    const a8_weight w = prepare_a8(quantize_rtn(W, rows, cols, c.f, c.name), c.name);
    const auto want = o.f64(std::string(c.name) + ".a8_y");
    const auto deq = o.f32(std::string(c.name) + ".deq");
    std::vector<float> xdeq = X;
    fake_quantize_tokens(xdeq.data(), M, cols);
    for (const bool vnni : {false, true}) {
      if (vnni && !cpu_has_vnni()) continue;
      CAPTURE(vnni);
      std::vector<float> y(static_cast<std::size_t>(M * rows), -7.0f);
      a8_matmul(w, X.data(), M, nullptr, y.data(), vnni);
      double worst = 0.0;
      for (index_t m = 0; m < M; ++m)
        for (index_t r = 0; r < rows; ++r) {
          // The integer sums are exact and the scaling runs in double, rounded once to f32; the oracle
          // rounds each dequantised operand to f32 before its float64 sum. Together: a few 2^-24 of the
          // sum of the products' magnitudes.
          double mag = 0.0;
          for (index_t k = 0; k < cols; ++k)
            mag += std::abs(static_cast<double>(xdeq[static_cast<std::size_t>(m * cols + k)]) * deq[static_cast<std::size_t>(r * cols + k)]);
          const auto i = static_cast<std::size_t>(m * rows + r);
          worst = std::max(worst, std::abs(y[i] - want[i]) / (4 * 0x1p-24 * mag + 1e-30));
        }
      CHECK(worst <= 1.0);
    }
  }
}

TEST_CASE("the VNNI kernel equals the plain loops bitwise for every format, group and batch") {
  if (!cpu_has_vnni()) return;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const index_t rows = 24, cols = 256;
  std::vector<float> W(static_cast<std::size_t>(rows * cols)), bias(static_cast<std::size_t>(rows));
  for (auto& v : W) v = 0.05f * nd(rng);
  for (auto& v : bias) v = nd(rng);
  for (const int bits : {4, 8})
    for (const index_t group : {index_t(0), index_t(32), index_t(128)})
      for (const bool sym : {true, false}) {
        const a8_weight w = prepare_a8(quantize_rtn(W, rows, cols, test::quant_format(bits, group, sym, dtype::f16), "vnni"));
        for (const index_t M : {index_t(1), index_t(5)}) {
          CAPTURE(bits);
          CAPTURE(group);
          CAPTURE(sym);
          CAPTURE(M);
          std::vector<float> x(static_cast<std::size_t>(M * cols));
          for (auto& v : x) v = nd(rng);
          std::vector<float> a(static_cast<std::size_t>(M * rows)), b(a.size());
          a8_matmul(w, x.data(), M, bias.data(), a.data(), false);
          a8_matmul(w, x.data(), M, bias.data(), b.data(), true);
          CHECK(a == b);
        }
      }
}

TEST_CASE("non-finite activations are refused, naming the column") {
  std::vector<float> x(64, 0.5f);
  x[9] = std::nanf("");
  token_codes q;
  CHECK_THROWS_WITH_AS(quantize_tokens(x.data(), 1, 64, q, "layers.0.attn.q input"),
                       doctest::Contains("layers.0.attn.q input: activation nan at column 9 is not finite"), lwcl::error);
}

TEST_CASE("the latency table round-trips through JSON, refuses what it cannot use, and sums a model's linears") {
  latency_table t;
  const linear_key a{64, 32, 32, 0, 32, 1, 1}, b{64, 32, 4, 32, 8, 1, 1};
  t.set(a, 2.5e-6);
  t.set(b, 1.0e-6);
  const auto back = latency_table::from_json(t.to_json(), "round trip");
  CHECK(back.size() == 2);
  CHECK(back.at(a) == 2.5e-6);
  CHECK(back.at(b) == 1.0e-6);
  CHECK_THROWS_WITH_AS(back.at({64, 32, 8, 0, 32, 1, 1}), doctest::Contains("no measurement for 64x32 w8 g0 a32"), lwcl::error);
  CHECK_THROWS_WITH_AS(t.set(a, -1.0), doctest::Contains("expected a positive time"), lwcl::error);
  CHECK_THROWS_WITH_AS(t.set(a, std::nan("")), doctest::Contains("expected a positive time"), lwcl::error);
  nlohmann::json bad = t.to_json();
  bad[0].erase("tokens");
  CHECK_THROWS_WITH_AS(latency_table::from_json(bad, "bad.json"), doctest::Contains("bad.json: a measurement lacks a field"), lwcl::error);
  CHECK_THROWS_WITH_AS(latency_table::from_json(nlohmann::json::object(), "obj.json"), doctest::Contains("not a JSON array"), lwcl::error);

  // A 2-layer gpt2-style config: 4 linears a layer, each measured once; the sum picks each layer's choice.
  const auto cfg = model::model_config::uniform(model::family::gpt2, 16, 8, 32, 2, 4, 4, 64);
  latency_table m;
  double want = 0.0;
  int i = 0;
  for (index_t l = 0; l < 2; ++l)
    for (const auto& [name, r, c] : block_linears(cfg, l)) {
      const int bits = l == 0 ? 32 : 4;
      const linear_key k{r, c, bits, bits == 32 ? 0 : 32, 32, 1, 1};
      if (m.contains(k)) continue;
      m.set(k, 1e-6 * ++i);
    }
  for (index_t l = 0; l < 2; ++l)
    for (const auto& [name, r, c] : block_linears(cfg, l)) want += m.at({r, c, l == 0 ? 32 : 4, l == 0 ? 0 : 32, 32, 1, 1});
  const double got = m.linear_seconds(cfg, 1, 1, [](index_t l, const std::string&) {
    return l == 0 ? linear_choice{32, 0} : linear_choice{4, 32};
  });
  CHECK(got == doctest::Approx(want).epsilon(1e-12));
}
