#pragma once
// Counter-based random numbers (Philox4x32-10, Salmon et al. 2011). The value at (key, counter) is a pure
// function, so the host and a CUDA kernel that ask for the same position draw the same numbers in any
// order or thread mapping; seeding is just choosing the key.

#include <cmath>
#include <cstdint>

#include "lwcl/core/config.hpp"

namespace lwcl {

struct philox_block {
  std::uint32_t v[4];
};

LWCL_HD_INLINE void philox_mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi, std::uint32_t& lo) {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(p >> 32);
  lo = static_cast<std::uint32_t>(p);
}

// Ten rounds of Philox4x32 over counter c with key k.
LWCL_HD_INLINE philox_block philox4x32_10(philox_block c, std::uint32_t k0, std::uint32_t k1) {
  constexpr std::uint32_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u;
  constexpr std::uint32_t w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    std::uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(m0, c.v[0], hi0, lo0);
    philox_mulhilo(m1, c.v[2], hi1, lo1);
    c = philox_block{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
    k0 += w0;
    k1 += w1;
  }
  return c;
}

// A stream of random numbers identified by (seed, stream id). Element i of the stream is a pure
// function of (seed, stream, i): draw i is word i%4 of block i/4.
struct philox_stream {
  std::uint64_t seed = 0;
  std::uint64_t stream = 0;

  LWCL_HD_INLINE philox_block block(std::uint64_t block_index) const {
    philox_block c{{static_cast<std::uint32_t>(block_index), static_cast<std::uint32_t>(block_index >> 32),
                    static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32)}};
    return philox4x32_10(c, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  }
  LWCL_HD_INLINE std::uint32_t bits(std::uint64_t i) const { return block(i >> 2).v[i & 3]; }

  // Uniform in [0, 1) with 24 random bits (every value exactly representable as float).
  LWCL_HD_INLINE float uniform(std::uint64_t i) const {
    return static_cast<float>(bits(i) >> 8) * (1.0f / 16777216.0f);
  }
  // Standard normal by Box-Muller over draws 2i and 2i+1.
  LWCL_HD_INLINE float normal(std::uint64_t i) const {
    const float u1 = (static_cast<float>(bits(2 * i) >> 8) + 1.0f) * (1.0f / 16777216.0f);  // (0, 1]
    const float u2 = static_cast<float>(bits(2 * i + 1) >> 8) * (1.0f / 16777216.0f);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530717958647692f * u2);
  }
};

}  // namespace lwcl
