// Fuzz target: a GGUF file (header, metadata, tensor descriptions, data area) opened, every metadata value
// read through the typed getters, and every tensor of at most a million elements read as f32.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "lwcl/model/checkpoint/gguf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto path = lwcl::fuzz::write_file("model.gguf", data, size);
  lwcl::fuzz::refused([&] {
    const lwcl::checkpoint::gguf::file f(path);
    for (const auto& kv : f.metadata()) {
      const std::string& key = kv.first;
      lwcl::fuzz::refused([&] { (void)f.get_int(key); });
      lwcl::fuzz::refused([&] { (void)f.get_real(key); });
      lwcl::fuzz::refused([&] { (void)f.get_string(key); });
      lwcl::fuzz::refused([&] { (void)f.get_per_layer(key, 2); });
    }
    for (const auto& t : f.tensors()) {
      if (t.numel() > (1u << 20)) continue;
      lwcl::fuzz::refused([&] { (void)f.read_f32(t.name); });
    }
  });
  return 0;
}
