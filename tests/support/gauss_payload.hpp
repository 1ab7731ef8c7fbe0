#pragma once
// Damage for gauss_codec payloads that the header and directory checks cannot see: block 0's lane 0
// declared one byte shorter and lane 1 one longer, so the directory still adds up but neither lane's
// stream holds exactly its codes. Used by the host and the CUDA codec tests.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "lwcl/codec/gauss_codec.hpp"

namespace lwcl::test {

inline std::vector<std::byte> shift_lane_bytes(std::vector<std::byte> payload) {
  const std::size_t lane0 = codec::gauss::layout::header + 2;  // after block 0's u16 info
  std::uint16_t l0, l1;
  std::memcpy(&l0, payload.data() + lane0, 2);
  std::memcpy(&l1, payload.data() + lane0 + 2, 2);
  --l0;
  ++l1;
  std::memcpy(payload.data() + lane0, &l0, 2);
  std::memcpy(payload.data() + lane0 + 2, &l1, 2);
  return payload;
}

}  // namespace lwcl::test
