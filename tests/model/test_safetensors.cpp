// safetensors: files assembled byte by byte from the format's definition are read back exactly; the
// writer round-trips every dtype; and each kind of malformed file gives an lwcl::error naming the
// problem (never a crash or an out-of-bounds read).
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "lwcl/model/checkpoint/safetensors.hpp"

using namespace lwcl;
using checkpoint::safetensors_file;

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("lwcl_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

// Writes u64 little-endian len(header) + header + data, exactly as the format defines it.
std::string raw_file(const std::string& name, const std::string& header, const std::vector<unsigned char>& data,
                     std::int64_t declared_len = -1) {
  const std::string path = temp_path(name);
  std::ofstream out(path, std::ios::binary);
  const std::uint64_t n = declared_len >= 0 ? static_cast<std::uint64_t>(declared_len) : header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  return path;
}

std::vector<unsigned char> float_bytes(const std::vector<float>& v) {
  std::vector<unsigned char> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

}  // namespace

TEST_CASE("safetensors reads a file assembled from the format definition") {
  // a: F32 [2, 3] at [0, 24); b: BF16 [2] at [24, 28) holding 1.5 (0x3FC0) and -2 (0xC000).
  auto data = float_bytes({1, 2, 3, 4, 5, 6});
  data.insert(data.end(), {0xC0, 0x3F, 0x00, 0xC0});
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[2],"data_offsets":[24,28]},)"
      R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})";
  const auto path = raw_file("ok.safetensors", header, data);
  safetensors_file f(path);
  CHECK(f.entries().size() == 2);
  CHECK(f.metadata().at("format") == "pt");
  std::vector<float> a(6), b(2);
  f.read_f32("a", {2, 3}, a.data());
  f.read_f32("b", {2}, b.data());
  CHECK(a == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(b == std::vector<float>{1.5f, -2.0f});
  const std::string shape_message = "tensor 'a' in '" + path + "' has shape [2, 3], expected [3, 2]";
  CHECK_THROWS_WITH_AS(f.read_f32("a", {3, 2}, a.data()), doctest::Contains(shape_message.c_str()), lwcl::error);
  CHECK_THROWS_WITH_AS(f.entry("c"), doctest::Contains("has no tensor 'c'"), lwcl::error);
  std::filesystem::remove(path);
}

TEST_CASE("safetensors validates integer and BOOL tensors it does not read, and refuses to read them as floats") {
  // ids: I64 [3] at [0, 24) (BERT's position_ids buffer); mask: BOOL [2] at [24, 26); w: F32 [1] at [28, 32).
  std::vector<unsigned char> data(32, 0);
  data[8] = 1;
  data[16] = 2;
  data[24] = 1;
  const float w = 0.25f;
  std::memcpy(data.data() + 28, &w, 4);
  const std::string header =
      R"({"ids":{"dtype":"I64","shape":[3],"data_offsets":[0,24]},"mask":{"dtype":"BOOL","shape":[2],"data_offsets":[24,26]},)"
      R"("pad":{"dtype":"U16","shape":[1],"data_offsets":[26,28]},"w":{"dtype":"F32","shape":[1],"data_offsets":[28,32]}})";
  const auto path = raw_file("ints.safetensors", header, data);
  safetensors_file f(path);
  CHECK(f.entries().size() == 4);
  CHECK(f.entry("ids").skipped == "I64");
  CHECK(f.entry("mask").skipped == "BOOL");
  float out = 0;
  f.read_f32("w", {1}, &out);
  CHECK(out == 0.25f);
  std::vector<float> ids(3);
  CHECK_THROWS_WITH_AS(f.read_f32("ids", {3}, ids.data()), doctest::Contains("has dtype I64, expected a float type"),
                       lwcl::error);
  std::filesystem::remove(path);
  // An I64 tensor whose span does not match its shape is rejected like any other.
  const std::string bad = R"({"ids":{"dtype":"I64","shape":[3],"data_offsets":[0,16]}})";
  const auto bad_path = raw_file("ints_bad.safetensors", bad, std::vector<unsigned char>(16, 0));
  CHECK_THROWS_WITH_AS(safetensors_file{bad_path}, doctest::Contains("spans 16 bytes, but I64[3] needs 24"), lwcl::error);
  std::filesystem::remove(bad_path);
}

TEST_CASE("safetensors writer round-trips every dtype bit for bit") {
  const std::vector<float> f32{1.0f, -0.0f, 3.25f, 1e-30f};
  const std::vector<double> f64{1.0 / 3, -2.5};
  const std::vector<std::uint16_t> b16{0x3F80, 0x7FC0, 0x0001};
  const std::vector<std::uint16_t> h16{0x3C00, 0x0001, 0xFC00};
  const std::vector<std::int32_t> i32{7, -1, 0};
  const auto path = temp_path("rt.safetensors");
  checkpoint::write_safetensors(path,
                                {{"x.f32", dtype::f32, {2, 2}, f32.data()},
                                 {"x.f64", dtype::f64, {2}, f64.data()},
                                 {"x.bf16", dtype::bf16, {3}, b16.data()},
                                 {"x.f16", dtype::f16, {3}, h16.data()},
                                 {"x.i32", dtype::i32, {3}, i32.data()},
                                 {"empty", dtype::f32, {0, 4}, nullptr}},
                                {{"lwcl", "test"}});
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  safetensors_file f(path);
  CHECK(f.metadata().at("lwcl") == "test");
  CHECK(std::memcmp(f.bytes("x.f32"), f32.data(), 16) == 0);
  CHECK(std::memcmp(f.bytes("x.f64"), f64.data(), 16) == 0);
  CHECK(std::memcmp(f.bytes("x.bf16"), b16.data(), 6) == 0);
  CHECK(std::memcmp(f.bytes("x.f16"), h16.data(), 6) == 0);
  CHECK(std::memcmp(f.bytes("x.i32"), i32.data(), 12) == 0);
  CHECK(f.entry("empty").dims == shape{0, 4});
  // The header is padded so the data area starts 8-byte aligned.
  CHECK(reinterpret_cast<std::uintptr_t>(f.bytes("x.f32")) % 8 == 0);
  std::vector<float> h(3);
  f.read_f32("x.f16", {3}, h.data());
  CHECK(h[0] == 1.0f);
  CHECK(h[1] == doctest::Approx(5.960464477539063e-08).epsilon(1e-12));
  CHECK(h[2] == -INFINITY);
  std::filesystem::remove(path);
}

TEST_CASE("malformed safetensors files raise lwcl::error naming the problem") {
  const auto data = float_bytes({1, 2, 3, 4});
  const std::string good = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  struct bad_case {
    const char* name;
    std::string header;
    std::vector<unsigned char> data;
    std::int64_t declared;
    const char* message;
  };
  const std::vector<bad_case> cases = {
      {"truncated", "", {}, -2, "fewer than the 8-byte header length"},
      {"header_past_end", good, data, 1000, "declares a 1000-byte header"},
      {"bad_json", R"({"w":{"dtype":"F32",)", data, -1, "malformed JSON header"},
      {"not_object", R"([1,2])", data, -1, "not a JSON object"},
      {"unknown_dtype", R"({"w":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,16]}})", data, -1, "unknown dtype 'F8_E4M3'"},
      {"out_of_bounds", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,32]}})", data, -1, "outside the 16-byte data area"},
      {"reversed", R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[16,0]}})", data, -1, "outside the 16-byte data area"},
      {"size_mismatch", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", data, -1, "needs 12"},
      {"overlap",
       R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", data,
       -1, "overlaps the tensor before it"},
      {"gap", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", data, -1, "bytes [0, 8) of the data area belong to no tensor"},
      {"tail", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data, -1, "bytes [8, 16) of the data area belong to no tensor"},
      {"negative_extent", R"({"w":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", data, -1, "negative or non-integer extent"},
      {"missing_field", R"({"w":{"dtype":"F32","shape":[4]}})", data, -1, "needs dtype, shape and data_offsets"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    std::string path;
    if (c.declared == -2) {
      path = temp_path(std::string(c.name) + ".safetensors");
      std::ofstream(path, std::ios::binary) << "abc";
    } else {
      path = raw_file(std::string(c.name) + ".safetensors", c.header, c.data, c.declared);
    }
    CHECK_THROWS_WITH_AS(safetensors_file{path}, doctest::Contains(c.message), lwcl::error);
    std::filesystem::remove(path);
  }
  CHECK_THROWS_WITH_AS(safetensors_file{temp_path("does_not_exist.safetensors")}, doctest::Contains("cannot open"), lwcl::error);
}
