#pragma once
// zstd_codec: the general-purpose lossless codec of the feature cache, zstd at a level chosen at run
// time (negative levels trade ratio for speed). It sees features as plain bytes; exponent_codec, which
// knows the float layout, compresses activations better (docs/feature-cache.md has measured ratios).

#include <zstd.h>

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/codec/concept.hpp"

namespace lwcl::codec {

namespace codec_detail {
struct zstd_cctx_free {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct zstd_dctx_free {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};
// One context per thread: contexts hold megabytes of tables and are not thread-safe, and prefetch
// workers decode concurrently.
inline ZSTD_CCtx* thread_cctx() {
  thread_local std::unique_ptr<ZSTD_CCtx, zstd_cctx_free> ctx(ZSTD_createCCtx());
  check(ctx != nullptr, "zstd_codec: cannot create a compression context");
  return ctx.get();
}
inline ZSTD_DCtx* thread_dctx() {
  thread_local std::unique_ptr<ZSTD_DCtx, zstd_dctx_free> ctx(ZSTD_createDCtx());
  check(ctx != nullptr, "zstd_codec: cannot create a decompression context");
  return ctx.get();
}
}  // namespace codec_detail

class zstd_codec {
 public:
  static constexpr std::string_view name = "zstd";
  static constexpr encoding id = encoding::zstd;

  explicit zstd_codec(int level = 3) : level_(level) {
    check(level >= ZSTD_minCLevel() && level <= ZSTD_maxCLevel(), "zstd_codec: level ", level,
          " is outside zstd's range [", ZSTD_minCLevel(), ", ", ZSTD_maxCLevel(), "]");
  }
  int level() const { return level_; }

  void encode(dtype, std::span<const std::byte> raw, std::vector<std::byte>& out) const {
    out.resize(ZSTD_compressBound(raw.size()));
    const std::size_t n =
        ZSTD_compressCCtx(codec_detail::thread_cctx(), out.data(), out.size(), raw.data(), raw.size(), level_);
    check(!ZSTD_isError(n), "zstd_codec: compressing ", raw.size(), " bytes failed: ", ZSTD_getErrorName(n));
    out.resize(n);
  }

  void decode(dtype, std::span<const std::byte> encoded, std::span<std::byte> raw) const {
    const unsigned long long declared = ZSTD_getFrameContentSize(encoded.data(), encoded.size());
    check(declared != ZSTD_CONTENTSIZE_ERROR, "zstd_codec: the ", encoded.size(), "-byte payload is not a zstd frame");
    check(declared == raw.size(), "zstd_codec: the frame decodes to ",
          declared == ZSTD_CONTENTSIZE_UNKNOWN ? std::string("an unknown size") : std::to_string(declared) + " bytes",
          ", expected ", raw.size());
    const std::size_t n =
        ZSTD_decompressDCtx(codec_detail::thread_dctx(), raw.data(), raw.size(), encoded.data(), encoded.size());
    check(!ZSTD_isError(n), "zstd_codec: decompressing a ", encoded.size(), "-byte payload failed: ", ZSTD_getErrorName(n));
    check(n == raw.size(), "zstd_codec: the frame decoded to ", n, " bytes, expected ", raw.size());
  }

 private:
  int level_;
};
static_assert(lossless_codec<zstd_codec>);

}  // namespace lwcl::codec
