#pragma once
// Activation-like features, byte views and a codec round trip for the cache and codec tests (tests/cache,
// tests/codec).

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <span>
#include <vector>

#include "lwcl/tensor/dtype.hpp"
#include "support/check.hpp"

namespace lwcl::test {

inline std::uint32_t bits_of(float f) { return float_bits(f); }

// Activation-like f32 features: normal per channel, channel scales from 0.25 to 4, two outlier
// channels 40x larger (as transformer residual streams have), and edge values spliced in.
inline std::vector<float> activations(std::size_t B, std::size_t T, std::size_t C, std::uint64_t seed, bool edges = true) {
  std::vector<float> v = random_normal<float>(B * T * C, seed);
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::size_t c = i % C;
    const float scale = (c == 3 || c == C / 2) ? 40.0f : 0.25f + 3.75f * static_cast<float>(c) / static_cast<float>(C);
    v[i] *= scale;
  }
  if (edges) {
    const std::uint32_t special[] = {
        0x00000000u,  // +0
        0x80000000u,  // -0
        0x00000001u,  // smallest denormal
        0x007fffffu,  // largest denormal
        0x80000003u,  // negative denormal
        0x00800000u,  // FLT_MIN
        0x7f7fffffu,  // FLT_MAX
        0x7f800000u,  // +inf
        0xff800000u,  // -inf
        0x7fc12345u,  // quiet NaN with a payload
        0x7f800001u,  // signalling NaN
        0xffc00abcu,  // negative NaN with a payload
    };
    for (std::size_t j = 0; j < std::size(special) && j * 7 < v.size(); ++j) v[j * 7] = bits_float(special[j]);
  }
  return v;
}

inline std::vector<bf16> to_bf16(const std::vector<float>& f) {
  std::vector<bf16> out(f.size());
  for (std::size_t i = 0; i < f.size(); ++i) out[i] = bf16::from_float(f[i]);
  // bf16's own edge cases, whose bits from_float would not produce (signalling NaN, payloads).
  const std::uint16_t special[] = {0x0000, 0x8000, 0x0001, 0x807f, 0x7f80, 0xff80, 0x7fc1, 0x7f81, 0xffff, 0x7f7f};
  for (std::size_t j = 0; j < std::size(special) && j * 5 + 1 < out.size(); ++j) out[j * 5 + 1] = bf16::from_bits(special[j]);
  return out;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

template <class T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

// Runs the encode/decode pair of a codec and checks the round trip is bit-exact.
template <class Codec, class T>
std::size_t codec_round_trip(const Codec& codec, const std::vector<T>& v) {
  std::vector<std::byte> enc;
  codec.encode(dtype_of_v<T>, bytes_of(v), enc);
  std::vector<T> back(v.size());
  codec.decode(dtype_of_v<T>, enc, std::as_writable_bytes(std::span<T>(back)));
  CHECK(same_bits(v, back));
  return enc.size();
}

}  // namespace lwcl::test
