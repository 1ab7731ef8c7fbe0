// GGUF: a file assembled byte by byte from the format's definition is read back exactly; the writer
// round-trips every value and tensor type; each kind of hostile file (truncated anywhere, bad magic,
// big-endian, huge counts and lengths, bad offsets, overlaps, unknown types) gives an lwcl::error, never a
// crash or an out-of-bounds read; lwcl's decoders go to GGUF and back bit for bit (f32), with llama's
// q and k rows in llama.cpp's interleaved RoPE order; shapes llama.cpp cannot hold are refused.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/model/checkpoint/gguf.hpp"
#include "lwcl/model/checkpoint/gguf_model.hpp"
#include "lwcl/model/transformer.hpp"

using namespace lwcl;
namespace gg = checkpoint::gguf;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("lwcl_test_gguf_" + std::to_string(::getpid()) + "_" + name)).string();
}

const std::string tok_dir = LWCL_TEST_DATA_DIR "/tokenizer/bpe";

// Little-endian bytes, as the format defines them.
struct bytes_out {
  std::string b;
  template <class T>
  bytes_out& put(T v) {
    char c[sizeof(T)];
    std::memcpy(c, &v, sizeof(T));
    b.append(c, sizeof(T));
    return *this;
  }
  bytes_out& str(const std::string& s) {
    put<std::uint64_t>(s.size());
    b += s;
    return *this;
  }
  void pad(std::size_t a) { b.resize((b.size() + a - 1) / a * a, '\0'); }
};

std::string write_raw(const std::string& name, const std::string& bytes) {
  const auto path = temp_path(name);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

// A small valid file: two metadata pairs, an F32 [3, 2] tensor and a Q8_0 [32] one.
std::string valid_file() {
  bytes_out o;
  o.put<std::uint32_t>(0x46554747u).put<std::uint32_t>(3).put<std::uint64_t>(2).put<std::uint64_t>(2);
  o.str("general.architecture").put<std::uint32_t>(8).str("llama");
  o.str("a.list").put<std::uint32_t>(9).put<std::uint32_t>(5).put<std::uint64_t>(3).put<std::int32_t>(7).put<std::int32_t>(-1).put<std::int32_t>(9);
  o.str("w").put<std::uint32_t>(2).put<std::uint64_t>(3).put<std::uint64_t>(2).put<std::uint32_t>(0).put<std::uint64_t>(0);
  o.str("q").put<std::uint32_t>(1).put<std::uint64_t>(32).put<std::uint32_t>(8).put<std::uint64_t>(32);
  o.pad(32);
  for (int i = 0; i < 6; ++i) o.put<float>(static_cast<float>(i) - 2.5f);
  o.pad(32);
  o.put<std::uint16_t>(f16_from_float(0.5f));
  for (int j = 0; j < 32; ++j) o.put<std::int8_t>(static_cast<std::int8_t>(j - 16));
  o.pad(32);
  return o.b;
}

void expect_error(const std::string& bytes, const std::string& name, const std::string& words) {
  const auto path = write_raw(name, bytes);
  try {
    gg::file f(path);
    FAIL("no error for ", name);
  } catch (const lwcl::error& e) {
    CHECK_MESSAGE(std::string(e.what()).find(words) != std::string::npos, name, ": ", e.what());
  }
  std::filesystem::remove(path);
}

model::model_config decoder(model::family f, index_t heads, index_t kv, index_t ffn) {
  auto c = model::model_config::uniform(f, 400, 64, 48, 3, 6, f == model::family::gpt2 ? 6 : 2, 72);
  for (auto& l : c.layers) l = {heads, kv, ffn};
  return c;
}

std::vector<float> host_params(const model::transformer<backend::cpu>& net) {
  std::vector<float> p(static_cast<std::size_t>(net.layout().numel()));
  net.backend().to_host(p.data(), net.params().data, p.size() * sizeof(float));
  return p;
}

}  // namespace

TEST_CASE("gguf reads a file assembled from the format definition") {
  const auto path = write_raw("valid.gguf", valid_file());
  gg::file f(path);
  CHECK(f.file_version() == 3);
  CHECK(f.alignment() == 32);
  CHECK(f.get_string("general.architecture") == "llama");
  CHECK(f.get_per_layer("a.list", 3) == std::vector<std::int64_t>{7, -1, 9});
  CHECK_THROWS_AS(f.get_per_layer("a.list", 4), lwcl::error);
  CHECK_THROWS_AS(f.get_int("general.architecture"), lwcl::error);
  REQUIRE(f.tensors().size() == 2);
  const auto w = f.read_f32("w");
  CHECK(f.tensor("w").dims == std::vector<std::uint64_t>{3, 2});
  for (int i = 0; i < 6; ++i) CHECK(w[static_cast<std::size_t>(i)] == static_cast<float>(i) - 2.5f);
  const auto q = f.read_f32("q");
  for (int j = 0; j < 32; ++j) CHECK(q[static_cast<std::size_t>(j)] == 0.5f * static_cast<float>(j - 16));
  std::filesystem::remove(path);
}

TEST_CASE("gguf writer round-trips every value type and tensor type") {
  using gg::value_type;
  std::vector<std::pair<std::string, gg::value>> kv = {
      {"u8", gg::integer(value_type::u8, 200)},        {"i8", gg::integer(value_type::i8, -100)},
      {"u16", gg::integer(value_type::u16, 60000)},    {"i16", gg::integer(value_type::i16, -30000)},
      {"u32", gg::integer(value_type::u32, 4000000000)}, {"i32", gg::integer(value_type::i32, -2000000000)},
      {"u64", gg::integer(value_type::u64, 1ll << 40)}, {"i64", gg::integer(value_type::i64, -(1ll << 50))},
      {"f32", gg::real(value_type::f32, 0.1f)},         {"f64", gg::real(value_type::f64, 0.1)},
      {"yes", gg::boolean(true)},                        {"s", gg::text("caf\xc3\xa9")},
      {"ss", gg::texts({"a", "", "b c"})},               {"ii", gg::integers(value_type::i32, {1, -2, 3})}};
  std::vector<gg::tensor_out> ts;
  const std::vector<float> vals = {1.0f, -2.0f, 0.375f, -3.5f};  // exact in F16 and BF16
  for (auto t : {gg::tensor_type::f32, gg::tensor_type::f16, gg::tensor_type::bf16}) {
    gg::tensor_out o{std::string(gg::tensor_type_name(t)), t, {2, 2}, {}};
    o.data.resize(t == gg::tensor_type::f32 ? 16 : 8);
    checkpoint::gguf_detail::encode_row(vals.data(), 4, t, o.data.data());
    ts.push_back(o);
  }
  gg::tensor_out q4{"q4", gg::tensor_type::q4_0, {64}, std::vector<unsigned char>(36, 0)};
  const std::uint16_t d = f16_from_float(0.25f);
  std::memcpy(q4.data.data(), &d, 2);
  std::memcpy(q4.data.data() + 18, &d, 2);
  for (int j = 0; j < 16; ++j) q4.data[static_cast<std::size_t>(2 + j)] = static_cast<unsigned char>(j | ((15 - j) << 4));
  ts.push_back(q4);
  const auto path = temp_path("roundtrip.gguf");
  gg::write(path, kv, ts, 64);
  gg::file f(path);
  CHECK(f.alignment() == 64);
  CHECK(f.get_int("u8") == 200);
  CHECK(f.get_int("i8") == -100);
  CHECK(f.get_int("u16") == 60000);
  CHECK(f.get_int("i16") == -30000);
  CHECK(f.get_int("u32") == 4000000000);
  CHECK(f.get_int("i32") == -2000000000);
  CHECK(f.get_int("u64") == (1ll << 40));
  CHECK(f.get_int("i64") == -(1ll << 50));
  CHECK(f.get_real("f32") == static_cast<double>(0.1f));
  CHECK(f.get_real("f64") == 0.1);
  CHECK(f.get_int("yes") == 1);
  CHECK(f.get_string("s") == "caf\xc3\xa9");
  CHECK(f.get("ss").strings == std::vector<std::string>{"a", "", "b c"});
  CHECK(f.get("ii").ints == std::vector<std::int64_t>{1, -2, 3});
  CHECK(f.get("ii").type == value_type::i32);
  for (const auto& t : f.tensors()) CHECK(t.offset % 64 == 0);
  CHECK(f.bytes() % 64 == 0);  // the last tensor padded too
  for (auto name : {"F32", "F16", "BF16"}) {
    const auto v = f.read_f32(name);
    for (std::size_t i = 0; i < 4; ++i) CHECK(v[i] == vals[i]);
  }
  const auto v = f.read_f32("q4");
  for (int j = 0; j < 16; ++j) {
    CHECK(v[static_cast<std::size_t>(j)] == 0.25f * static_cast<float>(j - 8));
    CHECK(v[static_cast<std::size_t>(j + 16)] == 0.25f * static_cast<float>(15 - j - 8));
  }
  std::filesystem::remove(path);

  CHECK_THROWS_AS(gg::write(path, {{"k", gg::text("a")}, {"k", gg::text("b")}}, {}), lwcl::error);
  CHECK_THROWS_AS(gg::write(path, {}, {{"t", gg::tensor_type::q8_0, {16}, std::vector<unsigned char>(17)}}), lwcl::error);
  CHECK_THROWS_AS(gg::write(path, {}, {{"t", gg::tensor_type::f32, {4}, std::vector<unsigned char>(15)}}), lwcl::error);
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("hostile gguf files give lwcl::error naming the problem") {
  const std::string good = valid_file();
  // Cut anywhere before the end of the last tensor: an error, never a crash.
  for (std::size_t n = 0; n + 32 < good.size(); n += (n < 300 ? 1 : 7)) {
    const auto path = write_raw("cut.gguf", good.substr(0, n));
    CHECK_THROWS_AS(gg::file{path}, lwcl::error);
    std::filesystem::remove(path);
  }
  auto with = [&](std::size_t at, auto v) {
    std::string b = good;
    std::memcpy(b.data() + at, &v, sizeof(v));
    return b;
  };
  expect_error(with(0, std::uint32_t{0x46554746u}), "magic.gguf", "not a GGUF file");
  expect_error(with(4, std::uint32_t{0x03000000u}), "bigendian.gguf", "big-endian");
  expect_error(with(4, std::uint32_t{1}), "v1.gguf", "version 1");
  expect_error(with(8, std::uint64_t{1} << 60), "tensors.gguf", "tensors");
  expect_error(with(16, std::uint64_t{1} << 60), "kv.gguf", "metadata pairs");
  expect_error(with(24, std::uint64_t{1} << 62), "keylen.gguf", "truncated");
  // Offsets inside the valid file: the first key's type sits after the 24-byte header and its key.
  const std::size_t type0 = 24 + 8 + std::string("general.architecture").size();
  expect_error(with(type0, std::uint32_t{13}), "vtype.gguf", "unknown value type 13");
  expect_error(with(type0 + 4, std::uint64_t{1} << 61), "strlen.gguf", "truncated");
  const std::size_t list = type0 + 4 + 8 + 5 + 8 + std::string("a.list").size();
  expect_error(with(list + 4, std::uint32_t{9}), "nested.gguf", "array of arrays");
  expect_error(with(list + 8, std::uint64_t{1} << 59), "arraylen.gguf", "elements");
  const std::size_t w = list + 4 + 4 + 8 + 12;  // tensor 'w': name, then its dimension count
  const std::size_t wdims = w + 8 + 1;  // its dimension count; the extents follow
  expect_error(with(wdims, std::uint32_t{5}), "ndims.gguf", "dimensions");
  expect_error(with(wdims + 4, std::uint64_t{0}), "extent.gguf", "extent 0");
  expect_error(with(wdims + 4 + 16, std::uint32_t{2}), "qtype.gguf", "not a multiple");  // Q4_0 rows of 3
  expect_error(with(wdims + 4 + 16 + 4, std::uint64_t{8}), "unaligned.gguf", "alignment");
  expect_error(with(wdims + 4 + 16 + 4, std::uint64_t{1} << 40), "offset.gguf", "data area");
  const std::size_t q = wdims + 4 + 16 + 4 + 8;  // tensor 'q'
  expect_error(with(q + 8 + 1 + 4 + 8 + 4, std::uint64_t{0}), "overlap.gguf", "overlap");
  // An unknown tensor type is read, and its data refused when asked for.
  {
    const auto path = write_raw("unknowntype.gguf", with(wdims + 4 + 16, std::uint32_t{12}));
    gg::file f(path);
    CHECK_THROWS_WITH_AS(f.read_f32("w"), doctest::Contains("ggml type 12"), lwcl::error);
    std::filesystem::remove(path);
  }
  // A key given twice, and an alignment that is not a power of two.
  {
    bytes_out o;
    o.put<std::uint32_t>(0x46554747u).put<std::uint32_t>(3).put<std::uint64_t>(0).put<std::uint64_t>(2);
    o.str("k").put<std::uint32_t>(4).put<std::uint32_t>(1);
    o.str("k").put<std::uint32_t>(4).put<std::uint32_t>(2);
    expect_error(o.b, "dupkey.gguf", "twice");
  }
  {
    bytes_out o;
    o.put<std::uint32_t>(0x46554747u).put<std::uint32_t>(3).put<std::uint64_t>(0).put<std::uint64_t>(1);
    o.str("general.alignment").put<std::uint32_t>(4).put<std::uint32_t>(48);
    expect_error(o.b, "align.gguf", "power of two");
  }
}

TEST_CASE("lwcl decoders go to GGUF and back bit for bit, in llama.cpp's layout") {
  using model::family;
  backend::cpu be;
  struct cls {
    const char* name;
    model::model_config cfg;
    const char* arch;
  };
  auto per_layer = decoder(family::llama, 6, 2, 72);
  per_layer.layers = {{6, 2, 50}, {2, 1, 72}, {4, 2, 16}};
  auto bias = decoder(family::llama, 6, 2, 72);
  bias.output_bias = true;
  auto untied = decoder(family::qwen2, 6, 2, 72);
  untied.tie_embeddings = false;
  const std::vector<cls> classes = {{"gpt2", decoder(family::gpt2, 6, 6, 72), "gpt2"},
                                    {"gpt2_ffn_pruned", decoder(family::gpt2, 6, 6, 36), "gpt2"},
                                    {"llama", decoder(family::llama, 6, 2, 72), "llama"},
                                    {"llama_heads_pruned", decoder(family::llama, 4, 2, 40), "llama"},
                                    {"llama_per_layer", per_layer, "deci"},
                                    {"llama_output_bias", bias, "llama"},
                                    {"qwen2", decoder(family::qwen2, 6, 2, 72), "qwen2"},
                                    {"qwen2_untied", untied, "qwen2"}};
  std::uint64_t seed = 11;
  for (const auto& c : classes) {
    INFO(c.name);
    model::transformer<backend::cpu> net(be, c.cfg, dtype::f32);
    net.init(seed++);
    const auto path = temp_path(std::string(c.name) + ".gguf");
    checkpoint::gguf_save_options o;
    o.tokenizer_from = tok_dir;
    checkpoint::save_gguf(net, path, o);
    const gg::file f(path);
    CHECK(f.get_string("general.architecture") == c.arch);
    CHECK(f.get_string("tokenizer.ggml.model") == "gpt2");
    CHECK(f.get("tokenizer.ggml.tokens").strings.size() == 400);
    CHECK(f.contains("output.weight") == !c.cfg.tie_embeddings);
    auto [back, contents] = checkpoint::load_gguf(be, path);
    CHECK(back->config().n_layers() == c.cfg.n_layers());
    for (std::size_t l = 0; l < c.cfg.layers.size(); ++l) {
      CHECK(back->config().layers[l].n_heads == c.cfg.layers[l].n_heads);
      CHECK(back->config().layers[l].n_kv_heads == c.cfg.layers[l].n_kv_heads);
      CHECK(back->config().layers[l].ffn == c.cfg.layers[l].ffn);
    }
    CHECK(back->config().tie_embeddings == c.cfg.tie_embeddings);
    CHECK(back->config().output_bias == c.cfg.output_bias);
    CHECK(back->config().norm_eps == static_cast<double>(static_cast<float>(c.cfg.norm_eps)));
    CHECK(host_params(*back) == host_params(net));
    REQUIRE(contents.tokenizer);
    const auto want = tokenizer::byte_bpe_of_folder(tok_dir);
    CHECK(contents.tokenizer->tokens() == want.tokens());
    CHECK(contents.tokenizer->merges() == want.merges());
    const std::vector<std::int32_t> ids = {5, 77, 301, 12, 9, 250};
    const tensor a = net.forward_logits(tensor(const_cast<std::int32_t*>(ids.data()), {1, 6}));
    std::vector<float> la(static_cast<std::size_t>(a.numel()));
    std::memcpy(la.data(), a.data, la.size() * 4);
    const tensor b = back->forward_logits(tensor(const_cast<std::int32_t*>(ids.data()), {1, 6}));
    std::vector<float> lb(static_cast<std::size_t>(b.numel()));
    std::memcpy(lb.data(), b.data, lb.size() * 4);
    CHECK(la == lb);

    // llama.cpp's order: row 2i + s of a head holds lwcl's row s D/2 + i (llama and deci); qwen2 and gpt2 keep lwcl's.
    if (c.cfg.fam == family::llama) {
      const auto gq = f.read_f32("blk.1.attn_q.weight");
      const auto& e = net.layout().find("layers.1.attn.q.weight");
      const auto p = host_params(net);
      const index_t D = c.cfg.head_dim, C = c.cfg.d_model;
      for (index_t r : {index_t{0}, index_t{1}, index_t{2}, D + 1, D + 3})
        for (index_t col : {index_t{0}, C - 1}) {
          const index_t h = r / D, j = r % D, src = h * D + (j % 2) * (D / 2) + j / 2;
          CHECK(gq[static_cast<std::size_t>(r * C + col)] == p[static_cast<std::size_t>(e.offset + src * C + col)]);
        }
    }
    std::filesystem::remove(path);
  }
}

TEST_CASE("GGUF f16 and bf16 weights hold the rounded values; vectors stay f32") {
  backend::cpu be;
  model::transformer<backend::cpu> net(be, decoder(model::family::llama, 6, 2, 72), dtype::f32);
  net.init(3);
  const auto p = host_params(net);
  for (auto t : {gg::tensor_type::f16, gg::tensor_type::bf16}) {
    const auto path = temp_path("half.gguf");
    checkpoint::gguf_save_options o;
    o.tokenizer_from = tok_dir;
    o.weights = t;
    checkpoint::save_gguf(net, path, o);
    const gg::file f(path);
    CHECK(f.get_int("general.file_type") == (t == gg::tensor_type::f16 ? 1 : 32));
    CHECK(f.tensor("blk.0.attn_norm.weight").type == 0);
    CHECK(f.tensor("blk.0.ffn_up.weight").type == static_cast<std::uint32_t>(t));
    auto [back, c] = checkpoint::load_gguf(be, path);
    const auto q = host_params(*back);
    const auto& e = net.layout().find("layers.0.mlp.up.weight");
    for (index_t i = 0; i < e.shape.numel(); ++i) {
      const float v = p[static_cast<std::size_t>(e.offset + i)];
      const float want = t == gg::tensor_type::f16 ? f16_to_float(f16_from_float(v)) : bf16(v).to_float();
      CHECK(q[static_cast<std::size_t>(e.offset + i)] == want);
    }
    const auto& n = net.layout().find("layers.0.norm1.weight");
    for (index_t i = 0; i < n.shape.numel(); ++i) CHECK(q[static_cast<std::size_t>(n.offset + i)] == p[static_cast<std::size_t>(n.offset + i)]);
    std::filesystem::remove(path);
  }
}

TEST_CASE("shapes llama.cpp cannot hold are refused before anything is written") {
  using model::family;
  backend::cpu be;
  const auto path = temp_path("refused.gguf");
  checkpoint::gguf_save_options o;
  o.tokenizer_from = tok_dir;
  auto refuse = [&](const model::model_config& cfg, const std::string& words) {
    model::transformer<backend::cpu> net(be, cfg, dtype::f32);
    net.init(1);
    CHECK_THROWS_WITH_AS(checkpoint::save_gguf(net, path, o), doctest::Contains(words.c_str()), lwcl::error);
    CHECK_FALSE(std::filesystem::exists(path));
  };
  auto q = decoder(family::qwen2, 6, 2, 72);
  q.layers[1].ffn = 40;
  refuse(q, "layer 1 has feed_forward_length 40");
  auto g = decoder(family::gpt2, 6, 6, 72);
  g.layers[2].n_heads = g.layers[2].n_kv_heads = 3;
  refuse(g, "layer 2 has head_count 3");
  refuse(decoder(family::gpt2, 3, 3, 72), "head_count x head width");
  refuse(decoder(family::qwen2, 4, 2, 72), "head_count x head width");
  auto qb = decoder(family::qwen2, 6, 2, 72);
  qb.output_bias = true;
  refuse(qb, "output projections");
  auto small = decoder(family::llama, 6, 2, 72);
  small.vocab = 300;  // the tokenizer has 400 tokens: ids past the model's vocabulary
  refuse(small, "past the model's vocabulary");
  model::transformer<backend::cpu> net(be, decoder(family::llama, 6, 2, 72), dtype::f32);
  net.init(1);
  o.weights = gg::tensor_type::q8_0;
  CHECK_THROWS_WITH_AS(checkpoint::save_gguf(net, path, o), doctest::Contains("expected F32, F16 or BF16"), lwcl::error);
  o.weights = gg::tensor_type::f32;
  o.blocks["layers.0.attn.q.weight"] = {gg::tensor_type::q8_0, 6, 48, std::vector<unsigned char>(6 * 2 * 34)};
  CHECK_THROWS_WITH_AS(checkpoint::save_gguf(net, path, o), doctest::Contains("quantised"), lwcl::error);
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("a vocabulary that is not one token per id is refused") {
  const auto dir = std::filesystem::path(temp_path("vocab"));
  std::filesystem::create_directories(dir);
  auto load = [&](const std::string& vocab) {
    std::ofstream(dir / "vocab.json") << vocab;
    std::ofstream(dir / "merges.txt") << "#version: 0.2\n";
    return tokenizer::byte_bpe::from_files((dir / "vocab.json").string(), (dir / "merges.txt").string());
  };
  CHECK(load(R"({"a": 0, "b": 1, "c": 2})").vocab_size() == 3);
  CHECK_THROWS_WITH_AS(load(R"({"a": 0, "b": 0, "c": 2})"), doctest::Contains("share id 0"), lwcl::error);
  CHECK_THROWS_WITH_AS(load(R"({"a": 0, "b": 1, "c": 3})"), doctest::Contains("past the vocabulary"), lwcl::error);
  CHECK_THROWS_WITH_AS(load(R"({"a": 0, "": 1})"), doctest::Contains("empty token"), lwcl::error);
  CHECK_THROWS_WITH_AS(tokenizer::byte_bpe::from_lists({"a", "b", "a"}, {}, "list"), doctest::Contains("has ids 0 and 2"), lwcl::error);
  std::filesystem::remove_all(dir);
}
