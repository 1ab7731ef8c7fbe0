#pragma once
// exponent_codec: lossless f32/bf16 coding that knows the float layout. Each value splits into its
// exponent byte, Huffman-coded (activations concentrate exponents on a few values), and its sign and
// mantissa bits, close to random and stored as is. Decoding reassembles every bit, so NaN payloads,
// -0.0, infinities and denormals come back unchanged (payload layout: docs/feature-cache.md).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/codec/concept.hpp"
#include "lwcl/codec/huffman.hpp"

namespace lwcl::codec {

namespace codec_detail {

// bf16: s eeeeeeee mmmmmmm -> exponent byte, and one byte sign|mantissa.
struct bf16_planes {
  using bits_t = std::uint16_t;
  static constexpr std::size_t rest_bytes = 1;
  static std::uint8_t exponent(bits_t b) { return static_cast<std::uint8_t>((b >> 7) & 0xffu); }
  static std::uint32_t rest(bits_t b) { return ((b >> 8) & 0x80u) | (b & 0x7fu); }
  static bits_t join(std::uint8_t e, std::uint32_t r) {
    return static_cast<bits_t>(((r & 0x80u) << 8) | (static_cast<std::uint32_t>(e) << 7) | (r & 0x7fu));
  }
};

// f32: s eeeeeeee m(23) -> exponent byte, and three bytes holding sign << 23 | mantissa.
struct f32_planes {
  using bits_t = std::uint32_t;
  static constexpr std::size_t rest_bytes = 3;
  static std::uint8_t exponent(bits_t u) { return static_cast<std::uint8_t>((u >> 23) & 0xffu); }
  static std::uint32_t rest(bits_t u) { return ((u >> 31) << 23) | (u & 0x7fffffu); }
  static bits_t join(std::uint8_t e, std::uint32_t r) {
    return ((r >> 23) << 31) | (static_cast<std::uint32_t>(e) << 23) | (r & 0x7fffffu);
  }
};

struct exponent_layout {
  static constexpr std::uint8_t format = 1;
  static constexpr std::size_t lengths = 16, stream_bytes = 144, header = 152;
};

template <class Planes>
typename Planes::bits_t element_bits(const std::byte* raw, std::size_t i) {
  typename Planes::bits_t b;
  std::memcpy(&b, raw + i * sizeof b, sizeof b);
  return b;
}

template <class Planes>
void exponent_encode(std::span<const std::byte> raw, std::vector<std::byte>& out) {
  using bits_t = typename Planes::bits_t;
  constexpr std::size_t width = sizeof(bits_t);
  check(raw.size() % width == 0, "exponent_codec: ", raw.size(), " bytes are not a whole number of ", width,
        "-byte elements");
  const std::size_t n = raw.size() / width;
  const std::byte* in = raw.data();

  huffman::counts freq{};
  for (std::size_t i = 0; i < n; ++i) ++freq[Planes::exponent(element_bits<Planes>(in, i))];
  const huffman::lengths len = huffman::code_lengths(freq);
  const huffman::code_table codes = huffman::canonical_codes(len);
  const std::size_t stream = static_cast<std::size_t>((huffman::coded_bits(freq, len) + 7) / 8);

  using L = exponent_layout;
  out.assign(L::header + stream + n * Planes::rest_bytes, std::byte{0});
  std::byte* h = out.data();
  int longest = 0;
  for (std::uint8_t l : len) longest = std::max(longest, static_cast<int>(l));
  h[0] = static_cast<std::byte>(L::format);
  h[1] = static_cast<std::byte>(width);
  h[2] = static_cast<std::byte>(longest);
  const std::uint64_t count = n, stream_bytes = stream;
  std::memcpy(h + 8, &count, 8);
  for (std::size_t s = 0; s < huffman::symbols; s += 2)
    h[L::lengths + s / 2] = static_cast<std::byte>(len[s] | (len[s + 1] << 4));
  std::memcpy(h + L::stream_bytes, &stream_bytes, 8);

  huffman::encode(codes, n, [&](std::size_t i) { return Planes::exponent(element_bits<Planes>(in, i)); },
                  h + L::header, stream);
  std::byte* rest = h + L::header + stream;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t r = Planes::rest(element_bits<Planes>(in, i));
    for (std::size_t b = 0; b < Planes::rest_bytes; ++b) rest[i * Planes::rest_bytes + b] = static_cast<std::byte>((r >> (8 * b)) & 0xffu);
  }
}

template <class Planes>
void exponent_decode(std::span<const std::byte> enc, std::span<std::byte> raw) {
  using bits_t = typename Planes::bits_t;
  using L = exponent_layout;
  constexpr std::size_t width = sizeof(bits_t);
  check(enc.size() >= L::header, "exponent_codec: the ", enc.size(), "-byte payload is shorter than its ", L::header,
        "-byte header");
  const std::byte* h = enc.data();
  check(static_cast<std::uint8_t>(h[0]) == L::format, "exponent_codec: payload format ", int(h[0]), ", expected ",
        int(L::format));
  check(static_cast<std::size_t>(h[1]) == width, "exponent_codec: payload holds ", int(h[1]), "-byte elements, expected ",
        width);
  bool reserved_zero = true;
  for (std::size_t i = 3; i < 8; ++i) reserved_zero = reserved_zero && h[i] == std::byte{0};
  check(reserved_zero, "exponent_codec: payload has non-zero reserved header bytes");
  std::uint64_t count = 0, stream = 0;
  std::memcpy(&count, h + 8, 8);
  std::memcpy(&stream, h + L::stream_bytes, 8);
  check(raw.size() % width == 0 && count == raw.size() / width, "exponent_codec: payload holds ", count,
        " elements, expected ", raw.size() / width);
  huffman::lengths len{};
  int longest = 0;
  for (std::size_t s = 0; s < huffman::symbols; s += 2) {
    const auto b = static_cast<std::uint8_t>(h[L::lengths + s / 2]);
    len[s] = b & 15u;
    len[s + 1] = b >> 4;
    longest = std::max({longest, static_cast<int>(len[s]), static_cast<int>(len[s + 1])});
  }
  check(longest == static_cast<int>(h[2]), "exponent_codec: payload declares a longest code of ", int(h[2]),
        " bits, its code lengths say ", longest);
  const std::uint64_t body = enc.size() - L::header;
  check(stream <= body && body - stream == count * Planes::rest_bytes, "exponent_codec: payload of ", enc.size(),
        " bytes does not hold a ", stream, "-byte exponent stream and ", count, " x ", Planes::rest_bytes,
        " sign+mantissa bytes after its header");
  const huffman::decoder dec(len);
  const std::byte* rest = h + L::header + stream;
  std::byte* out = raw.data();
  dec.decode(h + L::header, static_cast<std::size_t>(stream), static_cast<std::size_t>(count),
             [&](std::size_t i, std::uint8_t e) {
               std::uint32_t r = 0;
               for (std::size_t b = 0; b < Planes::rest_bytes; ++b)
                 r |= static_cast<std::uint32_t>(rest[i * Planes::rest_bytes + b]) << (8 * b);
               const bits_t v = Planes::join(e, r);
               std::memcpy(out + i * width, &v, width);
             });
}

}  // namespace codec_detail

class exponent_codec {
 public:
  static constexpr std::string_view name = "exponent";
  static constexpr encoding id = encoding::exponent;

  void encode(dtype type, std::span<const std::byte> raw, std::vector<std::byte>& out) const {
    if (type == dtype::bf16) return codec_detail::exponent_encode<codec_detail::bf16_planes>(raw, out);
    check(type == dtype::f32, "exponent_codec: cannot encode ", dtype_name(type), " features, expected f32 or bf16");
    codec_detail::exponent_encode<codec_detail::f32_planes>(raw, out);
  }

  void decode(dtype type, std::span<const std::byte> encoded, std::span<std::byte> raw) const {
    if (type == dtype::bf16) return codec_detail::exponent_decode<codec_detail::bf16_planes>(encoded, raw);
    check(type == dtype::f32, "exponent_codec: cannot decode ", dtype_name(type), " features, expected f32 or bf16");
    codec_detail::exponent_decode<codec_detail::f32_planes>(encoded, raw);
  }
};
static_assert(lossless_codec<exponent_codec>);

}  // namespace lwcl::codec
