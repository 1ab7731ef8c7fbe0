// Philox4x32-10: the Random123 known-answer vectors, the stream's layout over blocks, uniform and
// normal draws within statistical bounds, and values that do not depend on evaluation order.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <numeric>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/rng.hpp"

using namespace lwcl;

namespace {

void check_kat(philox_block counter, std::uint32_t k0, std::uint32_t k1, philox_block expected) {
  const philox_block got = philox4x32_10(counter, k0, k1);
  for (int w = 0; w < 4; ++w) {
    CAPTURE(w);
    CHECK(got.v[w] == expected.v[w]);
  }
}

}  // namespace

TEST_CASE("philox4x32_10 reproduces the Random123 known-answer vectors") {
  check_kat({{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}});
  check_kat({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu,
            {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}});
  check_kat({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u,
            {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}});
}

TEST_CASE("philox_stream: counter = (block index, stream), key = seed; draw i is word i % 4 of block i / 4") {
  const philox_stream s{0x0123456789abcdefull, 0xfedcba9876543210ull};
  for (std::uint64_t b : {0ull, 1ull, 0xffffffffull, 0x100000000ull, 0x123456789abull}) {
    CAPTURE(b);
    const philox_block want = philox4x32_10(
        {{static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(b >> 32), 0x76543210u, 0xfedcba98u}}, 0x89abcdefu, 0x01234567u);
    const philox_block got = s.block(b);
    for (int w = 0; w < 4; ++w) CHECK(got.v[w] == want.v[w]);
    for (std::uint64_t w = 0; w < 4; ++w) CHECK(s.bits(4 * b + w) == want.v[w]);
  }
  // Every half of seed and stream matters.
  const std::uint32_t base = philox_stream{1, 1}.bits(0);
  CHECK(philox_stream{1 + (1ull << 32), 1}.bits(0) != base);
  CHECK(philox_stream{1, 1 + (1ull << 32)}.bits(0) != base);
  CHECK(philox_stream{2, 1}.bits(0) != base);
  CHECK(philox_stream{1, 2}.bits(0) != base);
}

TEST_CASE("philox_stream::uniform lies in [0, 1) with 24 random bits, mean 1/2 and variance 1/12") {
  const philox_stream s{2024, 3};
  constexpr std::size_t n = 100000;
  double sum = 0, sum_sq = 0;
  float lo = 1, hi = 0;
  std::size_t not_from_bits = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float u = s.uniform(i);
    not_from_bits += u != static_cast<float>(s.bits(i) >> 8) / 16777216.0f;
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    sum += u;
    sum_sq += static_cast<double>(u) * u;
  }
  CHECK(not_from_bits == 0);
  CHECK(lo >= 0.0f);
  CHECK(hi < 1.0f);
  // The largest value the formula can produce still rounds below 1.
  CHECK(static_cast<float>(0xffffffffu >> 8) * (1.0f / 16777216.0f) < 1.0f);
  const double mean = sum / n, var = sum_sq / n - mean * mean;
  // Five standard errors: sd(mean) = sqrt(1/12 / n), sd(var) = sqrt((1/80 - 1/144) / n).
  CHECK(std::abs(mean - 0.5) < 5 * std::sqrt(1.0 / 12 / n));
  CHECK(std::abs(var - 1.0 / 12) < 5 * std::sqrt((1.0 / 80 - 1.0 / 144) / n));
}

TEST_CASE("philox_stream::normal has mean 0, variance 1 and normal tails") {
  const philox_stream s{7, 0};
  constexpr std::size_t n = 100000;
  double sum = 0, sum_sq = 0;
  std::size_t beyond = 0, finite = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double x = s.normal(i);
    finite += std::isfinite(x);
    sum += x;
    sum_sq += x * x;
    beyond += std::abs(x) > 1.959963984540054;
  }
  CHECK(finite == n);
  const double mean = sum / n, var = sum_sq / n - mean * mean, tail = static_cast<double>(beyond) / n;
  CHECK(std::abs(mean) < 5 / std::sqrt(static_cast<double>(n)));
  CHECK(std::abs(var - 1) < 5 * std::sqrt(2.0 / n));
  CHECK(std::abs(tail - 0.05) < 5 * std::sqrt(0.05 * 0.95 / n));
}

TEST_CASE("philox_stream values do not depend on evaluation order or threads") {
  const philox_stream s{99, 5};
  constexpr std::size_t n = 50000;
  std::vector<float> forward(n), backward(n), shuffled(n), parallel(n);
  for (std::size_t i = 0; i < n; ++i) forward[i] = s.normal(i);
  for (std::size_t i = n; i-- > 0;) backward[i] = s.normal(i);
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  for (std::size_t i = n - 1; i > 0; --i) std::swap(order[i], order[s.bits(1000000 + i) % (i + 1)]);
  for (std::size_t i : order) shuffled[i] = s.normal(i);
  backend::cpu be;
  float* out = parallel.data();
  be.for_each(static_cast<index_t>(n), [=](index_t i) { out[i] = s.normal(static_cast<std::uint64_t>(i)); }, 1000);
  CHECK(std::memcmp(forward.data(), backward.data(), n * sizeof(float)) == 0);
  CHECK(std::memcmp(forward.data(), shuffled.data(), n * sizeof(float)) == 0);
  CHECK(std::memcmp(forward.data(), parallel.data(), n * sizeof(float)) == 0);
  // A different stream gives different numbers.
  const philox_stream other{99, 6};
  std::size_t same = 0;
  for (std::size_t i = 0; i < 1000; ++i) same += other.normal(i) == forward[i];
  CHECK(same < 5);
}
