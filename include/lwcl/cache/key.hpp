#pragma once
// Keys and record descriptions of the feature cache (DESIGN.md section 6). A cached feature is the
// (B, T, C) hidden state at one segment boundary, from the teacher or the student, for one batch;
// student features carry the version of the weights that produced them, so a stale read is caught.

#include <cstdint>
#include <string>
#include <string_view>

#include "lwcl/core/config.hpp"
#include "lwcl/codec/encoding.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/tensor/dtype.hpp"
#include "lwcl/tensor/shape.hpp"

namespace lwcl::cache {

// Records store payloads in one of the codec room's encodings.
using codec::encoding;
using codec::encoding_name;

enum class source : std::uint8_t { teacher = 0, student = 1 };

inline constexpr std::string_view source_name(source s) {
  switch (s) {
    case source::teacher: return "teacher";
    case source::student: return "student";
  }
  return "?";
}

struct feature_key {
  index_t boundary = 0;
  source src = source::teacher;
  index_t batch = 0;

  // Written out, not defaulted: nvcc's front end drops the definition of a defaulted comparison.
  friend bool operator==(const feature_key& a, const feature_key& b) {
    return a.boundary == b.boundary && a.src == b.src && a.batch == b.batch;
  }
  friend bool operator<(const feature_key& a, const feature_key& b) {
    if (a.boundary != b.boundary) return a.boundary < b.boundary;
    if (a.src != b.src) return a.src < b.src;
    return a.batch < b.batch;
  }
  std::string str() const {
    return lwcl::detail::concat("boundary ", boundary, ", ", source_name(src), ", batch ", batch);
  }
};

// Features are kept as f32 or bf16, the activation formats lwcl trains with, or f64, the host backend's
// reference precision (exactness checks run the whole pipeline in f64). The exponent codec takes f32
// and bf16 only.
inline constexpr bool is_feature_dtype(dtype t) { return t == dtype::f32 || t == dtype::bf16 || t == dtype::f64; }

// What a store knows about one record without reading its payload.
struct record_meta {
  lwcl::dtype type = dtype::f32;  // of the decoded elements
  lwcl::shape shape;              // usually (B, T, C)
  std::uint64_t version = 0;      // of the weights that produced the feature
  encoding enc = encoding::raw;   // of the payload as stored
  std::uint64_t stored_bytes = 0; // payload size as stored (equals raw_bytes() when enc is raw)

  std::uint64_t raw_bytes() const { return static_cast<std::uint64_t>(shape.numel()) * dtype_size(type); }
};

namespace cache_detail {

// The checks every store applies before accepting a record; `who` names the store for the message.
inline void check_record(std::string_view who, const feature_key& k, const record_meta& m, std::size_t payload_bytes) {
  check(k.boundary >= 0 && k.batch >= 0, who, ": key (", k.str(), ") needs a non-negative boundary and batch");
  check(k.src == source::teacher || k.src == source::student, who, ": key has source ", static_cast<int>(k.src),
        ", expected teacher (0) or student (1)");
  check(is_feature_dtype(m.type), who, ": feature ", k.str(), " has dtype ", dtype_name(m.type), ", expected f32, bf16 or f64");
  check(m.shape.rank() >= 1, who, ": feature ", k.str(), " has an empty shape, expected (B, T, C)");
  check(m.enc == encoding::raw || m.enc == encoding::zstd || m.enc == encoding::exponent || m.enc == encoding::gauss, who, ": feature ", k.str(),
        " has unknown encoding ", static_cast<int>(m.enc));
  check(m.stored_bytes == payload_bytes, who, ": feature ", k.str(), " declares ", m.stored_bytes,
        " stored bytes but the payload holds ", payload_bytes);
  check(m.enc != encoding::raw || m.stored_bytes == m.raw_bytes(), who, ": raw feature ", k.str(), " of ",
        dtype_name(m.type), m.shape.str(), " needs ", m.raw_bytes(), " bytes, the payload holds ", m.stored_bytes);
}

}  // namespace cache_detail
}  // namespace lwcl::cache
