// Fuzz target: tokenizer files. The input's first byte picks the reader: a byte-level BPE from
// vocab.json + merges.txt, from a tokenizer.json, or a WordPiece vocab.txt; the rest is split into the
// file(s) and a text that the tokenizer, once built, encodes and decodes.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_support.hpp"
#include "lwcl/model/tokenizer/byte_bpe.hpp"
#include "lwcl/model/tokenizer/wordpiece.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const int kind = in.ConsumeIntegralInRange(0, 2);
  const std::string first = in.ConsumeRandomLengthString(1 << 16);
  const std::string second = kind == 0 ? in.ConsumeRandomLengthString(1 << 16) : std::string();
  const std::string text = in.ConsumeRemainingBytesAsString();
  namespace tk = lwcl::tokenizer;
  lwcl::fuzz::refused([&] {
    if (kind == 2) {
      const tk::wordpiece wp(lwcl::fuzz::write_file("vocab.txt", first));
      (void)wp.encode(text);
      return;
    }
    const auto tok = kind == 0 ? tk::byte_bpe::from_files(lwcl::fuzz::write_file("vocab.json", first),
                                                          lwcl::fuzz::write_file("merges.txt", second))
                               : tk::byte_bpe::from_tokenizer_json(lwcl::fuzz::write_file("tokenizer.json", first));
    (void)tok.decode(tok.encode(text));
  });
  return 0;
}
