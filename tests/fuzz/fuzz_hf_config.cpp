// Fuzz target: a Hugging Face config.json of any family lwcl reads (gpt2, llama, qwen2, bert, lwcl's own
// form), read as a decoder's config and as an encoder's.
#include <cstddef>
#include <cstdint>

#include "fuzz_support.hpp"
#include "lwcl/model/checkpoint/hf.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  lwcl::fuzz::write_file("config.json", data, size);
  const auto dir = lwcl::fuzz::scratch_dir().string();
  lwcl::fuzz::refused([&] { (void)lwcl::checkpoint::read_hf_config(dir); });
  lwcl::fuzz::refused([&] { (void)lwcl::checkpoint::read_hf_encoder_config(dir); });
  return 0;
}
