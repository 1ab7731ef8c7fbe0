#pragma once
// How a payload is stored: as the element bytes themselves, or encoded by one of the lossless codecs.
// The values are written into feature-cache records on disk, so they never change meaning.

#include <cstdint>
#include <string_view>

namespace lwcl::codec {

enum class encoding : std::uint8_t { raw = 0, zstd = 1, exponent = 2, gauss = 3 };

inline constexpr std::string_view encoding_name(encoding e) {
  switch (e) {
    case encoding::raw: return "raw";
    case encoding::zstd: return "zstd";
    case encoding::exponent: return "exponent";
    case encoding::gauss: return "gauss";
  }
  return "?";
}

}  // namespace lwcl::codec
