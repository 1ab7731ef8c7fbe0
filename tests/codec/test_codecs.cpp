// The lossless codecs (include/lwcl/codec/): zstd and the exponent codec return f32 and bf16 features bit
// for bit on every kind of input (NaN payloads, -0.0, denormals, infinities, random bit patterns), the
// exponent code's lengths stay a prefix code within their limit, and damaged payloads are errors; the
// compression ratios through a store are in tests/cache, gauss_codec has test_gauss_codec.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "lwcl/codec/exponent_codec.hpp"
#include "lwcl/codec/huffman.hpp"
#include "lwcl/codec/zstd_codec.hpp"
#include "lwcl/core/rng.hpp"
#include "lwcl/core/timer.hpp"
#include "support/activations.hpp"
#include "support/check.hpp"

using namespace lwcl;
using namespace lwcl::codec;
using namespace lwcl::test;

TEST_CASE("codecs are bit-exact on every kind of input") {
  const zstd_codec zstd1(1), zstd19(19), zstd_fast(-5);
  const exponent_codec expo;
  std::vector<std::vector<float>> f32_inputs = {
      activations(2, 8, 96, 21),
      std::vector<float>(1000, 0.0f),
      std::vector<float>(1000, -1.5f),
      {3.0f},
      {},
  };
  // Random bit patterns: every exponent, NaNs and denormals included, incompressible.
  std::vector<float> noise(4096);
  philox_stream rs{99, 1};
  for (std::size_t i = 0; i < noise.size(); ++i) noise[i] = bits_float(rs.bits(i));
  f32_inputs.push_back(noise);

  for (const auto& v : f32_inputs) {
    CAPTURE(v.size());
    codec_round_trip(zstd1, v);
    codec_round_trip(zstd19, v);
    codec_round_trip(zstd_fast, v);
    codec_round_trip(expo, v);
    const std::vector<bf16> h = to_bf16(v);
    codec_round_trip(zstd1, h);
    codec_round_trip(expo, h);
  }

  // Exponents with Fibonacci-like counts would need codes deeper than 12 bits: the limited code still
  // round-trips, and its lengths form a prefix code within the limit.
  std::vector<float> skewed;
  std::uint64_t a = 1, b = 1;
  for (int e = 0; e < 24; ++e) {
    for (std::uint64_t i = 0; i < a; ++i) skewed.push_back(bits_float(static_cast<std::uint32_t>(100 + e) << 23 | static_cast<std::uint32_t>(i)));
    const std::uint64_t c = a + b;
    a = b;
    b = c;
  }
  huffman::counts freq{};
  for (float x : skewed) ++freq[(bits_of(x) >> 23) & 0xff];
  const huffman::lengths len = huffman::code_lengths(freq);
  int longest = 0;
  for (auto l : len) longest = std::max(longest, int(l));
  CHECK(longest <= huffman::max_length);
  CHECK(huffman::is_prefix_code(len));
  codec_round_trip(expo, skewed);

  CHECK_THROWS_WITH_AS(zstd_codec(1000), doctest::Contains("outside zstd's range"), lwcl::error);
  std::vector<std::byte> out;
  const std::vector<std::uint16_t> halfs(4, 0);
  CHECK_THROWS_WITH_AS(expo.encode(dtype::f16, bytes_of(halfs), out), doctest::Contains("cannot encode f16"), lwcl::error);
}

TEST_CASE("malformed codec payloads are errors, not crashes") {
  const exponent_codec expo;
  const zstd_codec zstd;
  const std::vector<float> v = activations(1, 16, 64, 5);
  std::vector<float> back(v.size());
  const auto out = std::as_writable_bytes(std::span<float>(back));
  std::vector<std::byte> enc;
  expo.encode(dtype::f32, bytes_of(v), enc);

  std::vector<std::byte> cut(enc.begin(), enc.begin() + 100);
  CHECK_THROWS_WITH_AS(expo.decode(dtype::f32, cut, out), doctest::Contains("shorter than its 152-byte header"), lwcl::error);
  cut.assign(enc.begin(), enc.end() - 1);
  CHECK_THROWS_WITH_AS(expo.decode(dtype::f32, cut, out), doctest::Contains("does not hold"), lwcl::error);
  CHECK_THROWS_WITH_AS(expo.decode(dtype::bf16, enc, out), doctest::Contains("4-byte elements, expected 2"), lwcl::error);
  std::vector<float> small(v.size() - 1);
  CHECK_THROWS_WITH_AS(expo.decode(dtype::f32, enc, std::as_writable_bytes(std::span<float>(small))),
                       doctest::Contains("expected 1023"), lwcl::error);
  std::vector<std::byte> bad = enc;
  bad[16] = std::byte{0x11};  // every length 1: not a prefix code
  bad[17] = std::byte{0x11};
  CHECK_THROWS_AS(expo.decode(dtype::f32, bad, out), lwcl::error);

  zstd.encode(dtype::f32, bytes_of(v), enc);
  cut.assign(enc.begin(), enc.begin() + static_cast<std::ptrdiff_t>(enc.size() / 2));
  CHECK_THROWS_AS(zstd.decode(dtype::f32, cut, out), lwcl::error);
  CHECK_THROWS_WITH_AS(zstd.decode(dtype::f32, bytes_of(v), out), doctest::Contains("not a zstd frame"), lwcl::error);
}

// Codec throughput on activation-sized features, for docs/feature-cache.md. Skipped by default (speed
// is measured, not asserted); run it with
//   build/host/tests/test_codec -tc='*throughput*' --no-skip
TEST_CASE("codec throughput on activations (measurement)" * doctest::skip()) {
  const std::size_t B = 8, T = 512, C = 1024;
  const std::vector<float> f = activations(B, T, C, 77, false);
  const std::vector<bf16> h = to_bf16(f);
  const auto measure = [&](const auto& codec, auto& v, const char* label) {
    using T_ = typename std::remove_reference_t<decltype(v)>::value_type;
    const auto raw = bytes_of(v);
    std::vector<std::byte> enc;
    std::vector<T_> back(v.size());
    const int reps = 3;
    double te = 1e30, td = 1e30;
    for (int r = 0; r < reps; ++r) {
      timer t;
      codec.encode(dtype_of_v<T_>, raw, enc);
      te = std::min(te, t.seconds());
      t.reset();
      codec.decode(dtype_of_v<T_>, enc, std::as_writable_bytes(std::span<T_>(back)));
      td = std::min(td, t.seconds());
    }
    CHECK(same_bits(v, back));
    std::ostringstream os;
    os.setf(std::ios::fixed);
    os.precision(3);
    os << label << " " << dtype_name(dtype_of_v<T_>) << ": ratio " << static_cast<double>(raw.size()) / static_cast<double>(enc.size());
    os.precision(0);
    os << ", encode " << static_cast<double>(raw.size()) / te / 1e6 << " MB/s, decode "
       << static_cast<double>(raw.size()) / td / 1e6 << " MB/s";
    MESSAGE(os.str());
  };
  for (int level : {-3, 1, 3, 9}) {
    const zstd_codec z(level);
    const std::string label = "zstd level " + std::to_string(level);
    measure(z, f, label.c_str());
    measure(z, h, label.c_str());
  }
  measure(exponent_codec{}, f, "exponent");
  measure(exponent_codec{}, h, "exponent");
}
