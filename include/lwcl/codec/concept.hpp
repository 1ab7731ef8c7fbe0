#pragma once
// The codec kind: a lossless coder of tensor payloads (f32 or bf16 elements as bytes). The feature
// cache's compressed_store wraps a store with one; the collectives will code transfers with the same.

#include <concepts>
#include <cstddef>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "lwcl/codec/encoding.hpp"
#include "lwcl/tensor/dtype.hpp"

namespace lwcl::codec {

// Requires: C::name, a static constexpr std::string_view; C::id, the codec::encoding written into
// records it encodes; c.encode(type, raw, out): replaces `out` (std::vector<std::byte>&) with the
// encoding of `raw` (elements of dtype f32 or bf16); c.decode(type, encoded, raw): writes exactly
// raw.size() bytes, bit-identical to what was encoded, or throws lwcl::error when `encoded` is
// malformed or decodes to another size. Both const and safe to call from several threads at once.
template <class C>
concept lossless_codec = requires(const C& c, dtype t, std::span<const std::byte> in, std::vector<std::byte>& out,
                                  std::span<std::byte> raw) {
  requires std::same_as<std::remove_cv_t<decltype(C::name)>, std::string_view>;
  requires std::same_as<std::remove_cv_t<decltype(C::id)>, encoding>;
  { c.encode(t, in, out) } -> std::same_as<void>;
  { c.decode(t, in, raw) } -> std::same_as<void>;
};

}  // namespace lwcl::codec
