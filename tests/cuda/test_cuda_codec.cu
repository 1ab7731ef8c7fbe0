// cuda_gauss_codec (backend/cuda/codec/gauss_codec.cuh) against the host's gauss_codec: for bf16, f16 and
// f32 over sizes, scales, specials and random bits, the device's payload is the host's byte for byte,
// the device decodes the host's payload and the host the device's, bit for bit; a damaged payload is
// refused on the device with the host's message.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "lwcl/backend/cuda/codec/gauss_codec.cuh"
#include "lwcl/backend/cuda/cuda.cuh"
#include "lwcl/codec/gauss_codec.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/tensor/dtype.hpp"
#include "lwcl/tensor/tensor.hpp"
#include "support/gauss_payload.hpp"

using namespace lwcl;
using namespace lwcl::codec;

namespace {

using bytes = std::vector<std::byte>;

// n elements of `type` from N(0, sigma^2), every 53rd replaced by a special value or a random pattern.
bytes sample(dtype type, std::size_t n, double sigma, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> d(0.0, sigma);
  const std::size_t width = type == dtype::f32 ? 4 : 2;
  bytes out(n * width);
  for (std::size_t i = 0; i < n; ++i) {
    const auto x = static_cast<float>(d(g));
    std::uint32_t u = 0;
    if (type == dtype::f32) {
      std::memcpy(&u, &x, 4);
    } else if (type == dtype::bf16) {
      u = bf16(x).bits;
    } else {
      u = static_cast<std::uint32_t>(g() & 0x7bffu);  // any finite half pattern
      if (i % 3) u = (u & 0x83ffu) | ((12u + static_cast<std::uint32_t>(g() % 6)) << 10);  // mostly near 2^-3..2^2
    }
    if (i % 53 == 7) u = static_cast<std::uint32_t>(g());  // random bits: NaNs, infinities, subnormals
    std::memcpy(out.data() + i * width, &u, width);
  }
  return out;
}

}  // namespace

TEST_CASE("cuda gauss codec writes the host's payload and reads it back bit for bit, every element type") {
  backend::cuda gpu;
  const cuda_gauss_codec dev(gpu);
  const gauss_codec host(1);
  std::uint64_t seed = 1;
  for (const dtype t : {dtype::bf16, dtype::f16, dtype::f32})
    for (const std::size_t n : {1, 9, 1024, 4095, 4096, 4097, 3 * 4096 + 777, 65536 + 5})
      for (const double sigma : {1e-3, 0.1, 20.0}) {
        CAPTURE(dtype_name(t));
        CAPTURE(n);
        CAPTURE(sigma);
        const bytes raw = sample(t, n, sigma, seed++);
        bytes want;
        host.encode(t, raw, want);

        buffer<backend::cuda> in(gpu, raw.size()), out;
        gpu.from_host(in.data(), raw.data(), raw.size());
        const std::size_t size = dev.encode(t, in.data(), n, out);
        bytes got(size);
        gpu.to_host(got.data(), out.data(), size);
        CHECK(got == want);

        // The device decodes the host's payload ...
        buffer<backend::cuda> payload(gpu, want.size()), back(gpu, raw.size());
        gpu.from_host(payload.data(), want.data(), want.size());
        dev.decode(t, payload.data(), want.size(), back.data(), n);
        bytes decoded(raw.size());
        gpu.to_host(decoded.data(), back.data(), raw.size());
        CHECK(decoded == raw);
        // ... and the host the device's.
        bytes host_back(raw.size());
        host.decode(t, got, host_back);
        CHECK(host_back == raw);
      }
}

TEST_CASE("cuda gauss codec refuses a damaged payload with the host's message") {
  backend::cuda gpu;
  const cuda_gauss_codec dev(gpu);
  const bytes raw = sample(dtype::bf16, 3 * 4096 + 10, 0.1, 99);
  bytes enc;
  gauss_codec(1).encode(dtype::bf16, raw, enc);
  buffer<backend::cuda> payload(gpu, enc.size()), back(gpu, raw.size());
  auto decode = [&](const bytes& p, std::size_t n) {
    gpu.from_host(payload.data(), p.data(), p.size());
    dev.decode(dtype::bf16, payload.data(), p.size(), back.data(), n);
  };
  CHECK_THROWS_WITH_AS(decode(enc, raw.size() / 2 - 1), doctest::Contains("payload holds 12298 elements, expected 12297"),
                       lwcl::error);
  bytes d = enc;
  d[24 + 1] ^= std::byte{0x40};
  CHECK_THROWS_WITH_AS(decode(d, raw.size() / 2), doctest::Contains("not a known mode and table"), lwcl::error);
  // The directory adds up, the streams do not.
  CHECK_THROWS_WITH_AS(decode(test::shift_lane_bytes(enc), raw.size() / 2), doctest::Contains("exponent stream of block 0"),
                       lwcl::error);
  CHECK_THROWS_WITH_AS(dev.decode(dtype::i32, payload.data(), enc.size(), back.data(), 1),
                       doctest::Contains("cannot decode i32"), lwcl::error);
}
