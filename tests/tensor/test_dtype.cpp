// Element-type conversions against their oracles: float32 -> bfloat16 round-to-nearest-even against
// PyTorch on adversarial values, and float16 -> float32 against numpy on all 65536 bit patterns.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "lwcl/tensor/dtype.hpp"
#include "support/fixture.hpp"

using namespace lwcl;

namespace {

std::string hex(std::uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}
bool is_nan_bf16(std::uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x007fu) != 0; }

}  // namespace

TEST_CASE("bf16::from_float rounds like PyTorch's float32 -> bfloat16 conversion") {
  test::fixture fx{"tensor/bf16.lwfx"};
  const auto in = fx.ints("f32_bits"), want = fx.ints("bf16_bits"), back = fx.ints("back_f32_bits");
  REQUIRE(in.size() == want.size());
  REQUIRE(in.size() > 100);
  int nans = 0, infs = 0, subnormals = 0, ties = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const auto u = static_cast<std::uint32_t>(in[i]);
    const auto expected = static_cast<std::uint16_t>(want[i]);
    const std::uint16_t got = bf16::from_float(bits_float(u)).bits;
    INFO("f32 ", hex(u), ": lwcl ", hex(got), ", torch ", hex(expected));
    if (std::isnan(bits_float(u))) {
      // PyTorch's vectorised CPU path writes every NaN as 0xffff (its scalar path as 0x7fc0): the payload
      // is not part of the contract, NaN-ness is. lwcl keeps the sign and quiets the NaN.
      ++nans;
      CHECK(is_nan_bf16(expected));
      CHECK(is_nan_bf16(got));
      CHECK((got & 0x8000u) == (u >> 16 & 0x8000u));
      CHECK((got & 0x0040u) != 0);
    } else {
      infs += std::isinf(bf16::from_bits(expected).to_float()) ? 1 : 0;
      subnormals += (u & 0x7f800000u) == 0 && (u & 0x7fffffu) != 0;
      ties += (u & 0xffffu) == 0x8000u;
      CHECK(got == expected);
    }
    // Widening back is exact: the bf16 bits become the top half of the float.
    CHECK(float_bits(bf16::from_bits(expected).to_float()) == static_cast<std::uint32_t>(back[i]));
  }
  // The fixture really holds the hard cases.
  CHECK(nans >= 8);
  CHECK(infs >= 4);
  CHECK(subnormals >= 8);
  CHECK(ties >= 6);
}

TEST_CASE("f16_to_float matches numpy on all 65536 half bit patterns") {
  test::fixture fx{"tensor/f16.lwfx"};
  const auto pairs = fx.ints("f32_bits_pairs");
  REQUIRE(pairs.size() == 32768);
  int mismatches = 0;
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto packed = static_cast<std::uint64_t>(pairs[h / 2]);
    const auto want = static_cast<std::uint32_t>(h % 2 ? packed >> 32 : packed & 0xffffffffu);
    const std::uint32_t got = float_bits(f16_to_float(static_cast<std::uint16_t>(h)));
    if (got != want && ++mismatches <= 5) FAIL_CHECK("f16 ", hex(h), ": lwcl ", hex(got), ", numpy ", hex(want));
  }
  CHECK(mismatches == 0);
  // Spot checks that do not rely on the fixture.
  CHECK(f16_to_float(0x3c00) == 1.0f);
  CHECK(f16_to_float(0xc000) == -2.0f);
  CHECK(f16_to_float(0x7bff) == 65504.0f);
  CHECK(f16_to_float(0x0001) == std::ldexp(1.0f, -24));
  CHECK(f16_to_float(0x03ff) == std::ldexp(1023.0f, -24));
  CHECK(float_bits(f16_to_float(0x8000)) == 0x80000000u);
}

TEST_CASE("dtype sizes, names and the C++ type mapping") {
  CHECK(dtype_size(dtype::f32) == 4);
  CHECK(dtype_size(dtype::f64) == 8);
  CHECK(dtype_size(dtype::bf16) == 2);
  CHECK(dtype_size(dtype::f16) == 2);
  CHECK(dtype_size(dtype::i32) == 4);
  CHECK(dtype_name(dtype::bf16) == "bf16");
  CHECK(dtype_name(dtype::i32) == "i32");
  static_assert(dtype_of_v<float> == dtype::f32);
  static_assert(dtype_of_v<double> == dtype::f64);
  static_assert(dtype_of_v<bf16> == dtype::bf16);
  static_assert(dtype_of_v<std::int32_t> == dtype::i32);
  static_assert(sizeof(bf16) == 2);
  CHECK(bf16::from_float(1.0f).to_float() == 1.0f);
  CHECK(bf16::from_float(-0.0f).bits == 0x8000u);
}
