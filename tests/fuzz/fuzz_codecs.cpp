// Fuzz target: every lossless codec of the feature cache. The input picks a codec and a dtype, then
// (a) decodes the rest as an encoded record of a chosen size, which may only be refused with
// lwcl::error, (b) encodes the rest as raw elements and decodes them again, which must give back
// the same bits (NaN payloads, infinities, subnormals and signed zeros included), and (c) damages that
// encoding at a chosen byte and decodes it, which again may only be refused with lwcl::error (a
// payload that passes its header's checks reaches the decoders' stream and bounds checks).
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "fuzz_support.hpp"
#include "lwcl/codec/exponent_codec.hpp"
#include "lwcl/codec/gauss_codec.hpp"
#include "lwcl/codec/zstd_codec.hpp"

namespace {

template <class Codec>
void exercise(const Codec& c, lwcl::dtype type, std::size_t raw_elems, const std::vector<std::byte>& bytes,
              std::size_t damage_at, std::uint8_t damage) {
  const std::size_t elem = lwcl::dtype_size(type);
  std::vector<std::byte> raw(raw_elems * elem);
  lwcl::fuzz::refused([&] { c.decode(type, bytes, raw); });
  std::vector<std::byte> in(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(bytes.size() / elem * elem));
  std::vector<std::byte> encoded, back(in.size());
  c.encode(type, in, encoded);
  c.decode(type, encoded, back);
  if (!in.empty() && std::memcmp(in.data(), back.data(), in.size()) != 0) std::abort();  // not lossless
  if (!encoded.empty() && damage) {
    encoded[damage_at % encoded.size()] ^= std::byte{damage};
    lwcl::fuzz::refused([&] { c.decode(type, encoded, back); });
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const int codec = in.ConsumeIntegralInRange(0, 2);
  const int kind = in.ConsumeIntegralInRange(0, codec == 2 ? 2 : 1);
  const auto type = kind == 0 ? lwcl::dtype::bf16 : kind == 1 ? lwcl::dtype::f32 : lwcl::dtype::f16;
  const auto raw_elems = in.ConsumeIntegralInRange<std::size_t>(0, 1 << 14);
  const auto damage_at = in.ConsumeIntegral<std::uint32_t>();
  const auto damage = in.ConsumeIntegral<std::uint8_t>();
  const auto rest = in.ConsumeRemainingBytes<std::uint8_t>();
  std::vector<std::byte> bytes(rest.size());
  if (!rest.empty()) std::memcpy(bytes.data(), rest.data(), rest.size());
  if (codec == 0)
    exercise(lwcl::codec::exponent_codec{}, type, raw_elems, bytes, damage_at, damage);
  else if (codec == 1)
    exercise(lwcl::codec::zstd_codec{1}, type, raw_elems, bytes, damage_at, damage);
  else
    exercise(lwcl::codec::gauss_codec{1}, type, raw_elems, bytes, damage_at, damage);
  return 0;
}
