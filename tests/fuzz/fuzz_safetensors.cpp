// Fuzz target: a safetensors file (header length, JSON header, data spans) opened and every float
// tensor of at most a million elements read as f32.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz_support.hpp"
#include "lwcl/model/checkpoint/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = lwcl::fuzz::write_file("model.safetensors", data, size);
  lwcl::fuzz::refused([&] {
    lwcl::checkpoint::safetensors_file f(path);
    for (const auto& e : f.entries()) {
      if (!e.skipped.empty() || e.dims.numel() > (1 << 20)) continue;
      std::vector<float> out(static_cast<std::size_t>(e.dims.numel()));
      f.read(e.name, e.dims, out.data());
    }
  });
  return 0;
}
