// lwcl's int8 and int4 codes with groups of 32 and f16 scales go to GGUF's Q8_0 and Q4_0 blocks bit for
// bit: the blocks decode (by the format's definition, gguf::dequantize_row) to exactly quant::dequantize's
// values, and read back to the same codes and scales; other formats are refused unless requantised; a
// quantised llama written with its blocks reads back with the dequantised weights.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/model/checkpoint/gguf_model.hpp"
#include "lwcl/quant/gguf.hpp"
#include "lwcl/quant/rtn.hpp"

using namespace lwcl;
namespace gg = checkpoint::gguf;

namespace {

std::vector<float> random_matrix(index_t rows, index_t cols, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 0.05f);
  std::vector<float> w(static_cast<std::size_t>(rows * cols));
  for (auto& x : w) x = n(rng);
  w[3] = 0.4f;  // one outlier
  return w;
}

}  // namespace

TEST_CASE("int8 and int4 g32 sym f16 codes are Q8_0 and Q4_0 blocks bit for bit") {
  const index_t R = 5, C = 96;
  const auto w = random_matrix(R, C, 7);
  for (const char* spec : {"int8:g32", "int4:g32"}) {
    INFO(spec);
    const auto f = quant::parse_format(spec);
    const auto p = quant::quantize_rtn(w, R, C, f, "w");
    const auto b = quant::to_gguf_blocks(p, "w");
    CHECK(b.type == (f.bits == 8 ? gg::tensor_type::q8_0 : gg::tensor_type::q4_0));
    CHECK(b.bytes.size() == static_cast<std::size_t>(R) * gg::row_bytes(b.type, C));
    // Decoded by the block definition: exactly lwcl's dequantised values.
    const auto want = quant::dequantize(p);
    std::vector<float> got(want.size());
    for (index_t r = 0; r < R; ++r)
      gg::dequantize_row(b.type, b.bytes.data() + r * gg::row_bytes(b.type, C), got.data() + r * C, C);
    CHECK(got == want);
    // Spelled out for one block: the f16 scale first, then the codes.
    std::uint16_t d;
    std::memcpy(&d, b.bytes.data(), 2);
    CHECK(d == p.scales[0]);
    if (f.bits == 8) CHECK(static_cast<int>(static_cast<std::int8_t>(b.bytes[2 + 3])) == quant::code_at(p, 0, 3) - 128);
    else CHECK(((b.bytes[2 + 3] >> 4) & 15) == quant::code_at(p, 0, 19));
    const auto back = quant::from_gguf_blocks(b, "w");
    CHECK(back.codes == p.codes);
    CHECK(back.scales == p.scales);
  }
}

TEST_CASE("formats that are no GGUF block type are refused, or requantised when asked") {
  const index_t R = 4, C = 64;
  const auto w = random_matrix(R, C, 9);
  const auto p = quant::quantize_rtn(w, R, C, quant::parse_format("int4:g64:asym"), "w");
  CHECK_THROWS_WITH_AS(quant::gguf_blocks_of({"w"}, {p}), doctest::Contains("no GGUF block type"), lwcl::error);
  const auto q = quant::gguf_blocks_of({"w"}, {p}, 4);
  REQUIRE(q.requantised == std::vector<std::string>{"w"});
  const auto& b = q.blocks.at("w");
  CHECK(b.type == gg::tensor_type::q4_0);
  // The requantised weight is round to nearest of the stored weight's dequantised values.
  const auto again = quant::quantize_rtn(quant::dequantize(p), R, C, quant::parse_format("int4:g32"), "w");
  CHECK(quant::from_gguf_blocks(b, "w").codes == again.codes);
  CHECK_THROWS_AS(quant::gguf_blocks_of({"w"}, {p}, 3), lwcl::error);
}

TEST_CASE("a quantised llama goes to GGUF with its codes and reads back dequantised") {
  backend::cpu be;
  auto cfg = model::model_config::uniform(model::family::llama, 400, 64, 64, 2, 4, 2, 96);
  model::transformer<backend::cpu> net(be, cfg, dtype::f32);
  net.init(5);
  std::vector<float> params(static_cast<std::size_t>(net.layout().numel()));
  net.backend().to_host(params.data(), net.params().data, params.size() * 4);
  // Quantise every block linear (q8_0 for attention, q4_0 for the MLP) and put the dequantised values in the net.
  std::vector<std::string> names;
  std::vector<quant::packed_weight> packed;
  for (const auto& e : net.layout().entries()) {
    if (e.name.rfind("layers.", 0) != 0 || e.shape.rank() != 2) continue;
    const bool mlp = e.name.find(".mlp.") != std::string::npos;
    const auto p = quant::quantize_rtn(params.data() + e.offset, e.shape[0], e.shape[1],
                                       quant::parse_format(mlp ? "int4:g32" : "int8:g32"), e.name);
    const auto deq = quant::dequantize(p);
    std::memcpy(params.data() + e.offset, deq.data(), deq.size() * 4);
    names.push_back(e.name);
    packed.push_back(p);
  }
  net.backend().from_host(net.params().data, params.data(), params.size() * 4);
  const auto path = (std::filesystem::temp_directory_path() / ("lwcl_test_gguf_q_" + std::to_string(::getpid()) + ".gguf")).string();
  checkpoint::gguf_save_options o;
  o.tokenizer_from = LWCL_TEST_DATA_DIR "/tokenizer/bpe";
  o.blocks = quant::gguf_blocks_of(names, packed).blocks;
  o.quantiser = "rtn";
  checkpoint::save_gguf(net, path, o);
  const gg::file f(path);
  CHECK(f.tensor("blk.0.attn_q.weight").type == static_cast<std::uint32_t>(gg::tensor_type::q8_0));
  CHECK(f.tensor("blk.1.ffn_down.weight").type == static_cast<std::uint32_t>(gg::tensor_type::q4_0));
  CHECK(f.tensor("token_embd.weight").type == 0);
  CHECK(f.get_string("lwcl.quantiser") == "rtn");
  // The most common block type decides the file type: four attention linears a layer (Q8_0) against three
  // MLP ones (Q4_0), so MOSTLY_Q8_0 (7).
  CHECK(f.get_int("general.file_type") == 7);
  // An unpermuted weight's blocks are lwcl's own bytes.
  const auto& down = f.tensor("blk.1.ffn_down.weight");
  const auto mine = quant::to_gguf_blocks(packed[static_cast<std::size_t>(std::find(names.begin(), names.end(), "layers.1.mlp.down.weight") - names.begin())],
                                          "down");
  CHECK(std::memcmp(f.data(down), mine.bytes.data(), mine.bytes.size()) == 0);
  auto [back, c] = checkpoint::load_gguf(be, path);
  std::vector<float> got(params.size());
  back->backend().to_host(got.data(), back->params().data, got.size() * 4);
  CHECK(got == params);
  CHECK(c.types.at("layers.0.attn.k.weight") == gg::tensor_type::q8_0);
  std::filesystem::remove(path);
}
