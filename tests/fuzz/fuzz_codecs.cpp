// Fuzz target: every lossless codec of the feature cache. The input picks a codec and a dtype, then
// (a) decodes the rest as an encoded record of a chosen size, which may only be refused with
// lwcl::error, and (b) encodes the rest as raw elements and decodes them again, which must give back
// the same bits (NaN payloads, infinities, subnormals and signed zeros included).
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "fuzz_support.hpp"
#include "lwcl/codec/exponent_codec.hpp"
#include "lwcl/codec/zstd_codec.hpp"

namespace {

template <class Codec>
void exercise(const Codec& c, lwcl::dtype type, std::size_t raw_elems, const std::vector<std::byte>& bytes) {
  const std::size_t elem = lwcl::dtype_size(type);
  std::vector<std::byte> raw(raw_elems * elem);
  lwcl::fuzz::refused([&] { c.decode(type, bytes, raw); });
  std::vector<std::byte> in(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(bytes.size() / elem * elem));
  std::vector<std::byte> encoded, back(in.size());
  c.encode(type, in, encoded);
  c.decode(type, encoded, back);
  if (!in.empty() && std::memcmp(in.data(), back.data(), in.size()) != 0) std::abort();  // not lossless
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const int codec = in.ConsumeIntegralInRange(0, 1);
  const auto type = in.ConsumeBool() ? lwcl::dtype::bf16 : lwcl::dtype::f32;
  const auto raw_elems = in.ConsumeIntegralInRange<std::size_t>(0, 1 << 14);
  const auto rest = in.ConsumeRemainingBytes<std::uint8_t>();
  std::vector<std::byte> bytes(rest.size());
  if (!rest.empty()) std::memcpy(bytes.data(), rest.data(), rest.size());
  if (codec == 0)
    exercise(lwcl::codec::exponent_codec{}, type, raw_elems, bytes);
  else
    exercise(lwcl::codec::zstd_codec{1}, type, raw_elems, bytes);
  return 0;
}
