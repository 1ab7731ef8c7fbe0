// gauss_codec (include/lwcl/codec/gauss_codec.hpp, gauss_tables.hpp): the closed-form exponent law
// against sampled normals; the code tables against their own encoder; bf16, f16 and f32 round trips
// bit for bit over sizes, scales, heavy tails, every bit pattern and the pretrained all-MiniLM-L6-v2's
// hidden states; the same bytes under any thread count; the size against the order-0 entropy bound;
// and damaged payloads refused by name, never read past their end (the sanitizer stage runs these).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/codec/gauss_codec.hpp"
#include "lwcl/codec/zstd_codec.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/model/encoder.hpp"
#include "lwcl/model/tokenizer/wordpiece.hpp"
#include "lwcl/tensor/dtype.hpp"
#include "support/gauss_payload.hpp"
#include "support/minilm.hpp"

using namespace lwcl;
using namespace lwcl::codec;
namespace fs = std::filesystem;

namespace {

using bytes = std::vector<std::byte>;

// Element bits of a dtype as a byte buffer: bf16 and f16 from their 16-bit patterns, f32 from floats.
bytes pack16(const std::vector<std::uint16_t>& v) {
  bytes b(2 * v.size());
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}
bytes pack32(const std::vector<float>& v) {
  bytes b(4 * v.size());
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// IEEE binary16 of a float, rounded to nearest even (the test's own conversion, not lwcl's).
std::uint16_t to_half(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const float a = std::fabs(f);
  if (std::isnan(f)) return static_cast<std::uint16_t>(sign | 0x7e00u);
  if (a >= 65520.0f) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (a < 6.103515625e-05f) {  // subnormal: a multiple of 2^-24
    const auto q = static_cast<std::uint32_t>(std::nearbyint(a * 16777216.0f));
    return static_cast<std::uint16_t>(sign | q);
  }
  int e = 0;
  const float m = std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1)
  auto q = static_cast<std::uint32_t>(std::nearbyint(m * 2048.0f));  // 11 significant bits
  if (q == 2048) {
    q = 1024;
    ++e;
  }
  return static_cast<std::uint16_t>(sign | (static_cast<std::uint32_t>(e + 14) << 10) | (q - 1024));
}

std::vector<float> normals(std::size_t n, double sigma, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> d(0.0, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(d(g));
  return v;
}

bytes as_type(dtype t, const std::vector<float>& v) {
  if (t == dtype::f32) return pack32(v);
  std::vector<std::uint16_t> h(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) h[i] = t == dtype::bf16 ? bf16(v[i]).bits : to_half(v[i]);
  return pack16(h);
}

bytes round_trip(const gauss_codec& c, dtype t, const bytes& raw) {
  bytes enc;
  c.encode(t, raw, enc);
  bytes back(raw.size(), std::byte{0x5a});
  c.decode(t, enc, back);
  CHECK(back == raw);
  return enc;
}

// n (H + plane bits) / 8: the bytes of an ideal order-0 coder of the exponents with the other bits raw.
double entropy_bound(dtype t, const bytes& raw) {
  const std::size_t width = t == dtype::f32 ? 4 : 2, n = raw.size() / width;
  std::vector<double> count(256, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t b = 0;
    std::memcpy(&b, raw.data() + i * width, width);
    const std::uint32_t e = t == dtype::f32 ? (b >> 23) & 0xffu : t == dtype::bf16 ? (b >> 7) & 0xffu : (b >> 10) & 0x1fu;
    ++count[e];
  }
  double h = 0;
  for (double c : count)
    if (c > 0) h -= c / static_cast<double>(n) * std::log2(c / static_cast<double>(n));
  const double plane_bits = t == dtype::f32 ? 24 : t == dtype::bf16 ? 8 : 11;
  return static_cast<double>(n) * (h + plane_bits) / 8.0;
}

}  // namespace

TEST_CASE("the closed-form exponent laws match the exponents of sampled normal and Laplace values") {
  // Normal: P(2^k <= |x| < 2^(k+1)) for x ~ N(0, sigma^2) is erf(2^(k+1) / (sigma sqrt 2)) - erf(2^k / (sigma sqrt 2));
  // Laplace of rms sigma (scale sigma / sqrt 2): exp(-2^k sqrt 2 / sigma) - exp(-2^(k+1) sqrt 2 / sigma).
  // Both counted directly on a million draws each.
  for (const gauss::law l : {gauss::law::normal, gauss::law::laplace})
    for (const int f : {0, 1, 2, 3}) {
      const double sigma = std::exp2(f / 4.0);  // log2 sigma = f/4: table fraction f with base exponent 0
      constexpr std::size_t n = 1'000'000;
      std::mt19937_64 g(100 + static_cast<std::uint64_t>(f) + 10 * static_cast<std::uint64_t>(l));
      std::normal_distribution<double> normal(0.0, sigma);
      std::exponential_distribution<double> laplace_magnitude(std::sqrt(2.0) / sigma);
      std::vector<double> freq(gauss::window, 0.0);
      for (std::size_t i = 0; i < n; ++i) {
        const double x = l == gauss::law::normal ? normal(g) : laplace_magnitude(g);
        const int r = std::ilogb(x) + gauss::below;  // floor(log2 |x|), relative to base 0
        if (r >= 0 && r < gauss::window) ++freq[static_cast<std::size_t>(r)];
      }
      double total = 0;
      for (int r = 0; r < gauss::window; ++r) {
        const double p = gauss::symbol_probability(l, f, r), got = freq[static_cast<std::size_t>(r)] / n;
        total += p;
        CAPTURE(static_cast<int>(l));
        CAPTURE(f);
        CAPTURE(r);
        CHECK(std::fabs(got - p) <= 5.0 * std::sqrt(p * (1 - p) / n) + 1e-6);
      }
      CHECK(total == doctest::Approx(1.0).epsilon(1e-8));
    }
}

TEST_CASE("the code tables are complete prefix codes near the model's entropy, and decode what they encode") {
  const auto& tables = gauss::code_tables();
  for (int f = 0; f < gauss::classes; ++f) {
    const auto& t = tables.by_class[static_cast<std::size_t>(f)];
    std::uint64_t kraft = 0;
    double expected_bits = 0, entropy = 0, p_max = 0;
    for (int r = 0; r < gauss::alphabet; ++r) {
      const int l = t.codes[static_cast<std::size_t>(r)].length;
      REQUIRE(l >= 1);
      REQUIRE(l <= gauss::table_bits);
      kraft += std::uint64_t{1} << (gauss::table_bits - l);
      if (r < gauss::window) {
        const double p = gauss::symbol_probability(static_cast<gauss::law>(f / gauss::fractions), f % gauss::fractions, r);
        expected_bits += p * l;
        p_max = std::max(p_max, p);
        if (p > 0) entropy -= p * std::log2(p);
      }
    }
    CAPTURE(f);
    CHECK(kraft == (std::uint64_t{1} << gauss::table_bits));
    MESSAGE("table ", f, ": model entropy ", entropy, " bits, expected code length ", expected_bits);
    CHECK(expected_bits >= entropy);
    // Gallager (1978): a Huffman code's redundancy is below p_max + 0.086 bits.
    CHECK(expected_bits <= entropy + p_max + 0.086);
    // Every multi-symbol entry: re-encoding its symbols with the encoder's codes gives back the low
    // bits of the index it sits at.
    for (std::size_t v = 0; v < t.multi.size(); ++v) {
      const gauss::entry x = t.multi[v];
      std::uint64_t bits = 0;
      unsigned used = 0;
      for (std::uint32_t k = 0; k < gauss::entry_count(x); ++k) {
        const auto s = static_cast<std::size_t>((x >> (8 * k)) & 0xffu);
        REQUIRE(s < static_cast<std::size_t>(gauss::window));
        bits |= static_cast<std::uint64_t>(t.codes[s].bits) << used;
        used += t.codes[s].length;
      }
      if (gauss::entry_escapes(x)) {
        bits |= static_cast<std::uint64_t>(t.codes[gauss::escape].bits) << used;
        used += t.codes[gauss::escape].length;
      }
      REQUIRE(used == gauss::entry_bits(x));
      REQUIRE(used >= 1);
      REQUIRE(used <= static_cast<unsigned>(gauss::table_bits));
      REQUIRE(bits == (v & ((std::uint64_t{1} << used) - 1)));
    }
  }
}

TEST_CASE("gauss_codec returns bf16, f16 and f32 bit for bit over sizes, scales and tails") {
  const gauss_codec one(1), two(2);
  for (const dtype t : {dtype::bf16, dtype::f16, dtype::f32}) {
    for (const std::size_t n : {0, 1, 7, 1023, 1024, 1025, 4095, 4096, 4097, 3 * 4096 + 1000, 20000}) {
      for (const double sigma : {1e-3, 0.05, 1.0, 300.0}) {
        CAPTURE(dtype_name(t));
        CAPTURE(n);
        CAPTURE(sigma);
        const bytes raw = as_type(t, normals(n, sigma, n * 31 + static_cast<std::uint64_t>(sigma * 1000)));
        const bytes a = round_trip(one, t, raw), b = round_trip(two, t, raw);
        CHECK(a == b);  // the bytes do not depend on the thread count
      }
    }
    // bf16 and f32 reach exponents a half cannot hold.
    if (t != dtype::f16)
      for (const double sigma : {1e-35, 1e-20, 1e20, 1e35}) round_trip(two, t, as_type(t, normals(9000, sigma, 7)));
  }
  // Heavy tails and mixtures: Student t with 2 degrees of freedom, scales jumping between blocks, a
  // block of zeros, a lone outlier, tokens of very different norms.
  std::mt19937_64 g(5);
  std::student_t_distribution<double> st(2.0);
  std::vector<float> mixed(5 * 4096);
  for (std::size_t i = 0; i < mixed.size(); ++i) {
    const std::size_t block = i / 4096;
    mixed[i] = block == 0   ? static_cast<float>(st(g))
               : block == 1 ? static_cast<float>(st(g) * ((i / 384) % 2 ? 1e-4 : 30.0))
               : block == 2 ? 0.0f
               : block == 3 ? (i % 4096 == 77 ? 6.0e4f : static_cast<float>(st(g) * 1e-3))
                            : static_cast<float>(st(g) * std::exp2(static_cast<double>(i % 97) - 48));
  }
  for (const dtype t : {dtype::bf16, dtype::f16, dtype::f32}) {
    CAPTURE(dtype_name(t));
    round_trip(one, t, as_type(t, mixed));
    round_trip(two, t, as_type(t, mixed));
  }
}

TEST_CASE("gauss_codec returns every bit pattern: NaN payloads, infinities, subnormals, signed zeros") {
  const gauss_codec c(2);
  std::vector<std::uint16_t> all(65536 * 2);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i * 40503u);  // each twice, scattered
  for (const dtype t : {dtype::bf16, dtype::f16}) {
    CAPTURE(dtype_name(t));
    const bytes enc = round_trip(c, t, pack16(all));
    // Random bits: every block raw, so the size is the data's plus the header, the 10-byte directory
    // entries and each lane's last partial byte.
    const std::size_t blocks = (all.size() + 4095) / 4096;
    CHECK(enc.size() <= 2 * all.size() + 24 + blocks * (10 + 4));
  }
  std::mt19937 g(3);
  std::vector<float> f(50000);
  for (auto& x : f) {
    const std::uint32_t u = g();
    std::memcpy(&x, &u, 4);
  }
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, 1e-45f, -1e-45f, 1.17e-38f};
  for (std::size_t i = 0; i < f.size(); i += 7) f[i] = specials[i % 7];
  std::uint32_t quiet_payload = 0x7fc12345u, signalling = 0xff800001u;
  std::memcpy(&f[3], &quiet_payload, 4);
  std::memcpy(&f[5], &signalling, 4);
  round_trip(c, dtype::f32, pack32(f));
  // The same specials inside normal data, where the blocks are coded rather than raw.
  std::vector<float> n = normals(30000, 0.5, 9);
  for (std::size_t i = 0; i < n.size(); i += 101) n[i] = specials[i % 7];
  std::memcpy(&n[202], &quiet_payload, 4);
  std::memcpy(&n[404], &signalling, 4);
  for (const dtype t : {dtype::bf16, dtype::f32}) round_trip(c, t, as_type(t, n));
  std::vector<std::uint16_t> h(30000);
  std::mt19937_64 gh(11);
  std::normal_distribution<double> d(0.0, 1e-3);  // a half's subnormals start below 6.1e-5
  for (auto& x : h) x = to_half(static_cast<float>(d(gh)));
  for (std::size_t i = 0; i < h.size(); i += 97) h[i] = static_cast<std::uint16_t>(0x7c01u + i);  // NaN payloads
  round_trip(c, dtype::f16, pack16(h));
}

TEST_CASE("gauss_codec codes normal values within 1% of the order-0 entropy bound and beats zstd") {
  const gauss_codec c(1);
  for (const dtype t : {dtype::bf16, dtype::f32}) {
    const bytes raw = as_type(t, normals(1 << 20, 0.02, 21));
    const bytes enc = round_trip(c, t, raw);
    const double bound = entropy_bound(t, raw);
    bytes z;
    zstd_codec(1).encode(t, raw, z);
    MESSAGE(dtype_name(t), " N(0, 0.02^2): ratio ", static_cast<double>(raw.size()) / enc.size(), ", entropy bound ",
            static_cast<double>(raw.size()) / bound, ", zstd level 1 ", static_cast<double>(raw.size()) / z.size());
    CAPTURE(dtype_name(t));
    CHECK(static_cast<double>(enc.size()) <= 1.01 * bound);
    CHECK(enc.size() < z.size());
  }
}

TEST_CASE("gauss_codec on the pretrained all-MiniLM-L6-v2's hidden states: lossless, near the entropy bound") {
  const auto dir = test::minilm_dir();
  REQUIRE_MESSAGE(fs::exists(fs::path(dir) / "model.safetensors"),
                  "the pretrained all-MiniLM-L6-v2 is not installed ('" << dir << "'): run tools/install_deps.sh --minilm");
  const tokenizer::wordpiece wp((fs::path(dir) / "vocab.txt").string());
  const std::string text =
      "Layer-wise distillation recovers a pruned student one segment at a time from cached teacher features, "
      "and the features are sent between ranks through a lossless exponent code when the link is slow.";
  std::vector<std::int32_t> ids = wp.encode(text);
  ids.resize(std::min<std::size_t>(ids.size(), 32));
  const auto T = static_cast<index_t>(ids.size());
  std::vector<std::int32_t> batch;
  for (int b = 0; b < 8; ++b)  // eight rotations of the sentence: different positions, same model
    for (index_t i = 0; i < T; ++i) batch.push_back(ids[static_cast<std::size_t>((i + b) % T)]);
  backend::cpu be;
  model::encoder<backend::cpu> enc(be, checkpoint::read_hf_encoder_config(dir), dtype::f32);
  checkpoint::load_hf_weights(enc, dir);
  const tensor hidden = enc.forward(tensor(batch.data(), {8, T}));
  const auto* h = hidden.ptr<float>();
  const std::vector<float> values(h, h + hidden.numel());
  const gauss_codec by_rms(2), searched(2, gauss::fit::search);
  for (const dtype t : {dtype::bf16, dtype::f32}) {
    const bytes raw = as_type(t, values);
    const bytes coded = round_trip(by_rms, t, raw), best = round_trip(searched, t, raw);
    const double bound = entropy_bound(t, raw);
    MESSAGE("all-MiniLM-L6-v2 last hidden states, ", dtype_name(t), ": ratio ", static_cast<double>(raw.size()) / coded.size(),
            " (tables searched: ", static_cast<double>(raw.size()) / best.size(), "), order-0 entropy bound ",
            static_cast<double>(raw.size()) / bound);
    CAPTURE(dtype_name(t));
    CHECK(static_cast<double>(coded.size()) <= 1.03 * bound);
    CHECK(best.size() <= coded.size());
    CHECK(static_cast<double>(best.size()) <= 1.01 * bound);
  }
}

TEST_CASE("gauss_codec refuses damaged payloads by name and never reads past them") {
  const gauss_codec c(2);
  const bytes raw = as_type(dtype::bf16, normals(3 * 4096 + 100, 0.1, 4));
  bytes enc;
  c.encode(dtype::bf16, raw, enc);
  bytes out(raw.size());
  CHECK_THROWS_WITH_AS(c.decode(dtype::f16, enc, out), doctest::Contains("element kind 1, expected 2 (f16)"), lwcl::error);
  CHECK_THROWS_WITH_AS(c.decode(dtype::i32, enc, out), doctest::Contains("cannot decode i32"), lwcl::error);
  bytes small(raw.size() - 2);
  CHECK_THROWS_WITH_AS(c.decode(dtype::bf16, enc, small), doctest::Contains("payload holds 12388 elements, expected 12387"),
                       lwcl::error);
  CHECK_THROWS_WITH_AS(c.decode(dtype::bf16, std::span(enc).first(10), out), doctest::Contains("shorter than its 24-byte header"),
                       lwcl::error);
  bytes odd(3);
  bytes e2;
  CHECK_THROWS_WITH_AS(c.encode(dtype::bf16, odd, e2), doctest::Contains("not a whole number of 2-byte bf16"), lwcl::error);
  auto damaged = [&](std::size_t at, std::uint8_t x) {
    bytes d = enc;
    d[at] ^= std::byte{x};
    return d;
  };
  CHECK_THROWS_WITH_AS(c.decode(dtype::bf16, damaged(4, 1), out), doctest::Contains("tables of fingerprint"), lwcl::error);
  CHECK_THROWS_WITH_AS(c.decode(dtype::bf16, damaged(24 + 1, 0x40), out), doctest::Contains("not a known mode and table"),
                       lwcl::error);
  CHECK_THROWS_WITH_AS(c.decode(dtype::bf16, damaged(24 + 2, 1), out), doctest::Contains("the directory's streams take"),
                       lwcl::error);
  // A lane's stream cut short while the directory still adds up.
  CHECK_THROWS_WITH_AS(c.decode(dtype::bf16, test::shift_lane_bytes(enc), out),
                       doctest::Contains("exponent stream of block 0"), lwcl::error);
  // Every truncation, and single-bit damage anywhere: a clear error or some output, never a read
  // out of bounds (which the sanitizer stage would stop).
  for (std::size_t cut = 0; cut < enc.size(); cut += 97) {
    CAPTURE(cut);
    CHECK_THROWS_AS(c.decode(dtype::bf16, std::span(enc).first(cut), out), lwcl::error);
  }
  std::mt19937_64 g(8);
  int refused = 0, decoded = 0;
  for (int trial = 0; trial < 400; ++trial) {
    bytes d = enc;
    d[g() % d.size()] ^= std::byte{static_cast<std::uint8_t>(1u << (g() % 8))};
    try {
      c.decode(dtype::bf16, d, out);
      ++decoded;
    } catch (const lwcl::error&) {
      ++refused;
    }
  }
  MESSAGE("single-bit damage: ", refused, " refused, ", decoded, " decoded (planes carry no check)");
  CHECK(refused > 0);
}
