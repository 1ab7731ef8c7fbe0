// The feature cache (include/lwcl/cache/): every store returns f32 and bf16 features
// bit for bit (NaN payloads, -0.0, denormals and infinities included); stale versions, missing keys
// and damaged disk records are errors; a killed write is ignored on reopening; the prefetcher delivers
// its plan in order under any thread count and ring size, surfaces worker errors and counts stalls.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <unistd.h>

#include "lwcl/core/memory.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/cache/compressed_store.hpp"
#include "lwcl/cache/disk_store.hpp"
#include "lwcl/codec/exponent_codec.hpp"
#include "lwcl/codec/gauss_codec.hpp"
#include "lwcl/cache/feature_cache.hpp"
#include "lwcl/cache/host_store.hpp"
#include "lwcl/codec/huffman.hpp"
#include "lwcl/cache/prefetcher.hpp"
#include "lwcl/codec/zstd_codec.hpp"
#include "support/activations.hpp"
#include "support/check.hpp"

using namespace lwcl;
using namespace lwcl::cache;
using namespace lwcl::codec;
using namespace lwcl::test;
namespace fs = std::filesystem;

using host_zstd = compressed_store<host_store<>, zstd_codec>;
using host_exponent = compressed_store<host_store<>, exponent_codec>;
using disk_zstd = compressed_store<disk_store, zstd_codec>;
using disk_exponent = compressed_store<disk_store, exponent_codec>;
using disk_gauss = compressed_store<disk_store, gauss_codec>;

// A wrong policy in a slot does not pass for a store or a codec.
static_assert(!feature_store<int>);
static_assert(!feature_store<zstd_codec>);
static_assert(!lossless_codec<host_store<>>);
static_assert(lossless_codec<zstd_codec> && lossless_codec<exponent_codec>);
static_assert(feature_store<host_zstd> && feature_store<host_exponent> && feature_store<disk_zstd> &&
              feature_store<disk_exponent>);
static_assert(!staging_memory<host_store<>>);
static_assert(host_zstd::name == "compressed<host,zstd>");
static_assert(disk_exponent::name == "compressed<disk,exponent>");
static_assert(disk_exponent::memory_tier == tier::disk);

namespace {

// A fresh directory under the system's temporary directory, removed with everything in it at the end.
struct temp_dir {
  fs::path path;
  explicit temp_dir(const std::string& name) {
    static std::atomic<int> n{0};
    path = fs::temp_directory_path() / ("lwcl_cache_" + std::to_string(::getpid()) + "_" + std::to_string(n++) + "_" + name);
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Builds a feature_cache over store S; disk-backed stores live in `dir`.
template <class S>
std::unique_ptr<feature_cache<S>> make_cache(const fs::path& dir) {
  if constexpr (std::is_same_v<S, disk_store>) {
    return std::make_unique<feature_cache<S>>(dir);
  } else if constexpr (std::is_same_v<S, disk_zstd>) {
    return std::make_unique<feature_cache<S>>(zstd_codec(3), dir);
  } else if constexpr (std::is_same_v<S, disk_exponent>) {
    return std::make_unique<feature_cache<S>>(exponent_codec{}, dir);
  } else if constexpr (std::is_same_v<S, disk_gauss>) {
    return std::make_unique<feature_cache<S>>(gauss_codec(2), dir);
  } else {
    return std::make_unique<feature_cache<S>>();
  }
}

// A host store whose read() first runs a hook: a delay, a gate, or a throw, for the prefetcher tests.
struct hooked_store {
  static constexpr std::string_view name = "hooked";
  static constexpr tier memory_tier = tier::host;

  std::function<void(const feature_key&)> before_read;
  host_store<> inner;

  void put(const feature_key& k, const record_meta& m, std::span<const std::byte> p) { inner.put(k, m, p); }
  std::optional<record_meta> meta(const feature_key& k) const { return inner.meta(k); }
  std::optional<record_view> find(const feature_key& k) const { return inner.find(k); }
  record_meta read(const feature_key& k, std::span<std::byte> out) const {
    if (before_read) before_read(k);
    return inner.read(k, out);
  }
  bool erase(const feature_key& k) { return inner.erase(k); }
  std::size_t invalidate(index_t b, source s) { return inner.invalidate(b, s); }
  std::vector<feature_key> keys() const { return inner.keys(); }
  store_usage usage() const { return inner.usage(); }
};
static_assert(feature_store<hooked_store>);

// The features the prefetcher tests put under key k: distinct per key, so a misdelivery shows.
std::vector<float> content_of(const feature_key& k, std::size_t n) {
  return test::random_normal<float>(n, static_cast<std::uint64_t>(k.boundary * 1000 + static_cast<int>(k.src) * 100 + k.batch));
}

void overwrite(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << bytes;
}
std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE_TEMPLATE("every store returns f32 and bf16 features bit for bit, edge values included", S, host_store<>,
                   disk_store, host_zstd, host_exponent, disk_zstd, disk_exponent, disk_gauss) {
  temp_dir dir("roundtrip");
  auto cache = make_cache<S>(dir.path);
  const shape s{4, 16, 64};
  const std::vector<float> f = activations(4, 16, 64, 11);
  const std::vector<bf16> h = to_bf16(activations(4, 16, 64, 12));
  const feature_key kf{2, source::teacher, 0}, kh{2, source::student, 1}, other{3, source::student, 1};

  cache->put(kf, f.data(), s, 0);
  cache->put(kh, h.data(), s, 41);
  cache->put(other, h.data(), s, 41);
  CHECK(cache->contains(kf));
  CHECK_FALSE(cache->contains(feature_key{2, source::teacher, 1}));
  CHECK(cache->version_of(kh) == 41);
  CHECK(cache->meta_of(kh).type == dtype::bf16);
  CHECK(cache->meta_of(kf).shape == s);

  std::vector<float> f_back(f.size());
  cache->get(kf, f_back.data(), s);
  CHECK(same_bits(f, f_back));

  std::vector<bf16> h_back(h.size());
  cache->get(kh, tensor(h_back.data(), s), 41);
  CHECK(same_bits(h, h_back));

  // A bf16 feature widens exactly into an f32 output.
  std::vector<float> widened(h.size());
  cache->get(kh, widened.data(), s, 41);
  bool exact = true;
  for (std::size_t i = 0; i < h.size(); ++i) exact = exact && bits_of(widened[i]) == (std::uint32_t{h[i].bits} << 16);
  CHECK(exact);

  // Replacing a record keeps one record under the key.
  const std::vector<float> f2 = activations(4, 16, 64, 13);
  cache->put(kf, f2.data(), s, 0);
  cache->get(kf, f_back.data(), s);
  CHECK(same_bits(f2, f_back));

  const cache_stats st = cache->stats();
  CHECK(st.store.records == 3);
  CHECK(st.store.raw_bytes == f.size() * 4 + 2 * h.size() * 2);
  CHECK(st.store.peak_stored_bytes >= st.store.stored_bytes);
  CHECK(st.hits == 4);
  CHECK(st.misses == 0);
  CHECK(st.puts == 4);
  CHECK(st.store.store == S::name);
  MESSAGE(st.summary());

  CHECK(cache->keys() == std::vector<feature_key>{kf, kh, other});
  CHECK(cache->invalidate(2, source::student) == 1);
  CHECK(cache->keys() == std::vector<feature_key>{kf, other});
  CHECK(cache->erase(kf));
  CHECK_FALSE(cache->erase(kf));
  CHECK(cache->stats().store.records == 1);
  CHECK(cache->stats().store.raw_bytes == h.size() * 2);
}

TEST_CASE("exponent coding compresses normal activations; ratios are reported") {
  const std::vector<float> f = activations(8, 64, 256, 31, false);
  const std::vector<bf16> h = to_bf16(f);
  const double raw_f = static_cast<double>(f.size() * 4), raw_h = static_cast<double>(h.size() * 2);
  const double expo_f = raw_f / static_cast<double>(codec_round_trip(exponent_codec{}, f));
  const double expo_h = raw_h / static_cast<double>(codec_round_trip(exponent_codec{}, h));
  const double zstd_f = raw_f / static_cast<double>(codec_round_trip(zstd_codec(3), f));
  const double zstd_h = raw_h / static_cast<double>(codec_round_trip(zstd_codec(3), h));
  std::ostringstream os;
  os << "compression ratio on N(0, s_c^2) activations (8x64x256): exponent f32 " << expo_f << ", bf16 " << expo_h
     << "; zstd-3 f32 " << zstd_f << ", bf16 " << zstd_h;
  MESSAGE(os.str());
  CHECK(expo_f > 1.1);
  CHECK(expo_h > 1.3);
  // Through a store: the usage reflects the same ratio.
  feature_cache<host_exponent> cache;
  cache.put({0, source::teacher, 0}, h.data(), shape{8, 64, 256}, 0);
  CHECK(cache.stats().compression_ratio() == doctest::Approx(expo_h).epsilon(0.01));
  CHECK(cache.stats().store.codec.encoded_raw_bytes == h.size() * 2);
  // Incompressible input is kept raw rather than grown.
  std::vector<float> noise(4096);
  philox_stream rs{7, 3};
  for (std::size_t i = 0; i < noise.size(); ++i) noise[i] = bits_float(rs.bits(i));
  feature_cache<host_zstd> zc;
  zc.put({0, source::teacher, 1}, noise.data(), shape{1, 4, 1024}, 0);
  CHECK(zc.meta_of({0, source::teacher, 1}).enc == encoding::raw);
  CHECK(zc.stats().store.codec.kept_raw == 1);
  std::vector<float> back(noise.size());
  zc.get({0, source::teacher, 1}, back.data(), shape{1, 4, 1024});
  CHECK(same_bits(noise, back));
}

TEST_CASE("a read with another weights version is a stale-feature error") {
  feature_cache<host_store<>> cache;
  const shape s{2, 4, 8};
  const std::vector<float> v = activations(2, 4, 8, 1);
  std::vector<float> out(v.size());
  const feature_key st{1, source::student, 0}, te{1, source::teacher, 0};
  cache.put(st, v.data(), s, 7);
  cache.put(te, v.data(), s, 0);

  cache.get(st, out.data(), s, 7);
  CHECK_THROWS_WITH_AS(cache.get(st, out.data(), s, 8),
                       doctest::Contains("stale feature boundary 1, student, batch 0: stored from weights version 7, "
                                         "expected version 8"),
                       lwcl::error);
  CHECK_THROWS_WITH_AS(cache.get(st, out.data(), s), doctest::Contains("is a student feature"), lwcl::error);
  CHECK_THROWS_WITH_AS(cache.try_get(st, tensor(out.data(), s), 3), doctest::Contains("stale feature"), lwcl::error);
  std::vector<std::byte> raw(v.size() * 4);
  CHECK_THROWS_WITH_AS(cache.read_raw(st, raw, 6), doctest::Contains("stale feature"), lwcl::error);
  cache.get(te, out.data(), s);  // teacher features need no version
  CHECK_THROWS_WITH_AS(cache.get(te, out.data(), s, 1), doctest::Contains("stale feature"), lwcl::error);

  // A refresh: the upstream segment changed, the boundary's student features are recomputed.
  CHECK(cache.invalidate(1, source::student) == 1);
  cache.put(st, v.data(), s, 8);
  cache.get(st, out.data(), s, 8);
  CHECK(cache.version_of(st) == 8);
}

TEST_CASE("missing keys, wrong shapes and wrong dtypes are errors; hits and misses are counted") {
  temp_dir dir("missing");
  feature_cache<disk_exponent> cache(exponent_codec{}, dir.path);
  const shape s{2, 3, 4};
  std::vector<float> out(24);
  const feature_key k{1, source::teacher, 2};
  CHECK_THROWS_WITH_AS(cache.get(k, out.data(), s),
                       doctest::Contains("no feature for boundary 1, teacher, batch 2 in the compressed<disk,exponent> store"),
                       lwcl::error);
  CHECK_FALSE(cache.try_get(k, tensor(out.data(), s)));
  CHECK_THROWS_WITH_AS(cache.version_of(k), doctest::Contains("no feature"), lwcl::error);

  const std::vector<float> v = activations(2, 3, 4, 3, false);
  cache.put(k, v.data(), s, 0);
  CHECK(cache.try_get(k, tensor(out.data(), s)));
  CHECK_THROWS_WITH_AS(cache.get(k, out.data(), shape{2, 12}), doctest::Contains("holds f32[2, 3, 4], the output is f32[2, 12]"),
                       lwcl::error);
  std::vector<bf16> h(24);
  CHECK_THROWS_WITH_AS(cache.get(k, tensor(h.data(), s)), doctest::Contains("without rounding"), lwcl::error);
  std::vector<std::uint16_t> halfs(24);
  CHECK_THROWS_WITH_AS(cache.put(k, tensor(halfs.data(), dtype::f16, s), 0), doctest::Contains("expected f32, bf16 or f64"),
                       lwcl::error);
  CHECK_THROWS_WITH_AS(cache.put({-1, source::teacher, 0}, v.data(), s, 0), doctest::Contains("non-negative"), lwcl::error);

  const cache_stats st = cache.stats();
  CHECK(st.hits == 1);
  CHECK(st.misses == 2);
  CHECK(st.hit_rate() == doctest::Approx(1.0 / 3.0));
}

TEST_CASE("stores report their bytes to the memory tracker's tiers") {
  const std::vector<float> v = activations(4, 8, 32, 9);
  const shape s{4, 8, 32};
  const std::size_t bytes = v.size() * 4;
  {
    const std::size_t before = memory().current(tier::host);
    feature_cache<host_store<>> cache;
    cache.put({0, source::teacher, 0}, v.data(), s, 0);
    cache.put({0, source::teacher, 1}, v.data(), s, 0);
    CHECK(memory().current(tier::host) == before + 2 * bytes);
    cache.erase({0, source::teacher, 0});
    CHECK(memory().current(tier::host) == before + bytes);
    CHECK(cache.stats().store.peak_stored_bytes == 2 * bytes);
    CHECK(cache.stats().store.stored_bytes == bytes);
  }
  temp_dir dir("tracker");
  const std::size_t before = memory().current(tier::disk);
  {
    feature_cache<disk_store> cache(dir.path);
    cache.put({0, source::teacher, 0}, v.data(), s, 0);
    CHECK(memory().current(tier::disk) == before + bytes + feature_record_header_bytes);
    CHECK(fs::file_size(cache.store().path_of({0, source::teacher, 0})) == bytes + feature_record_header_bytes);
  }
  CHECK(memory().current(tier::disk) == before);
  {
    feature_cache<disk_store> reopened(dir.path);  // counted again when the directory is reopened
    CHECK(memory().current(tier::disk) == before + bytes + feature_record_header_bytes);
  }
}

TEST_CASE("disk records written earlier are reopened, compressed ones too") {
  temp_dir dir("reopen");
  const std::vector<bf16> h = to_bf16(activations(3, 5, 64, 17));
  const shape s{3, 5, 64};
  {
    feature_cache<disk_exponent> cache(exponent_codec{}, dir.path);
    cache.put({4, source::student, 9}, h.data(), s, 123);
  }
  feature_cache<disk_exponent> cache(exponent_codec{}, dir.path);
  CHECK(cache.keys() == std::vector<feature_key>{{4, source::student, 9}});
  CHECK(cache.meta_of({4, source::student, 9}).enc == encoding::exponent);
  std::vector<bf16> back(h.size());
  cache.get({4, source::student, 9}, tensor(back.data(), s), 123);
  CHECK(same_bits(h, back));
  // The plain disk tier sees the encoded record and says how to read it.
  feature_cache<disk_store> plain(dir.path);
  CHECK_THROWS_WITH_AS(plain.get({4, source::student, 9}, tensor(back.data(), s), 123),
                       doctest::Contains("is stored with encoding exponent"), lwcl::error);
}

// The record with both CRC-32s recomputed, as a writer that meant these bytes would have sealed it: the
// field checks behind the checksums are reached.
std::string reseal(std::string b) {
  using L = cache_detail::header_layout;
  auto* h = reinterpret_cast<std::byte*>(b.data());
  REQUIRE(b.size() >= feature_record_header_bytes);
  cache_detail::store_le<std::uint32_t>(h, L::payload_crc, cache_detail::crc32_of(h + feature_record_header_bytes,
                                                                                 b.size() - feature_record_header_bytes));
  cache_detail::store_le<std::uint32_t>(h, L::header_crc, cache_detail::crc32_of(h, L::header_crc));
  return b;
}

TEST_CASE("the records' checksum is CRC-32 (ISO-HDLC), whose check value is 0xCBF43926") {
  const std::string check = "123456789";  // the catalogue's check input for every CRC
  CHECK(cache_detail::crc32_of(reinterpret_cast<const std::byte*>(check.data()), check.size()) == 0xCBF43926u);
  CHECK(cache_detail::crc32_of(nullptr, 0) == 0u);
}

TEST_CASE("a record changed on the disk fails its checksum rather than being trained on") {
  temp_dir dir("checksum");
  const shape s{2, 4, 16};
  const std::vector<float> v = activations(2, 4, 16, 29);
  std::vector<float> out(v.size());
  const feature_key k{1, source::student, 3};
  feature_cache<disk_store> cache(dir.path);
  cache.put(k, v.data(), s, 7);
  const fs::path p = cache.store().path_of(k);
  const std::string good = slurp(p);
  // One bit of one activation, anywhere in the payload: still a well-formed record, with a wrong value.
  for (const std::size_t at : {feature_record_header_bytes, feature_record_header_bytes + 301, good.size() - 1}) {
    CAPTURE(at);
    std::string b = good;
    b[at] = static_cast<char>(b[at] ^ 0x04);
    overwrite(p, b);
    CHECK_THROWS_WITH_AS(cache.get(k, out.data(), s, 7), doctest::Contains("has a corrupted payload: its CRC-32 is"),
                         lwcl::error);
  }
  // A header field that still passes every range check (the weights version 7 -> 6).
  std::string b = good;
  b[40] = 6;
  overwrite(p, b);
  CHECK_THROWS_WITH_AS(cache.get(k, out.data(), s, 7), doctest::Contains("has a corrupted header"), lwcl::error);
  CHECK_THROWS_WITH_AS(disk_store(dir.path), doctest::Contains("has a corrupted header"), lwcl::error);
  // Restored, it reads back bit for bit.
  overwrite(p, good);
  cache.get(k, out.data(), s, 7);
  CHECK(same_bits(v, out));
}

TEST_CASE("truncated or corrupt disk records are errors naming the file") {
  temp_dir dir("corrupt");
  const shape s{2, 4, 16};
  const std::vector<float> v = activations(2, 4, 16, 23);
  std::vector<float> out(v.size());
  const feature_key k{0, source::teacher, 0}, k2{0, source::teacher, 1};
  feature_cache<disk_store> cache(dir.path);
  cache.put(k, v.data(), s, 0);
  cache.put(k2, v.data(), s, 0);
  const fs::path p = cache.store().path_of(k);
  const std::string good = slurp(p);
  REQUIRE(good.size() == feature_record_header_bytes + v.size() * 4);

  auto expect = [&](std::string bytes, const char* message) {
    CAPTURE(message);
    overwrite(p, bytes);
    CHECK_THROWS_WITH_AS(cache.get(k, out.data(), s), doctest::Contains(message), lwcl::error);
    CHECK_THROWS_WITH_AS(cache.get(k, out.data(), s), doctest::Contains(p.filename().string().c_str()), lwcl::error);
  };
  expect(good.substr(0, good.size() - 10), "declares a 512-byte payload but holds 502 bytes after the header");
  expect(good + "xyz", "but holds 515 bytes");
  expect(good.substr(0, 10), "is truncated: 10 bytes, fewer than the 128-byte header");
  expect("", "is truncated: 0 bytes");
  std::string b = good;
  b[0] = 'X';
  expect(b, "is not a feature record");
  b = good;
  b[8] = 1;
  expect(b, "has format version 1, expected 2");
  b = good;
  b[33] = 4;  // dtype code of i32
  expect(reseal(b), "has dtype code 4");
  b = good;
  b[35] = 7;
  expect(reseal(b), "has rank 7");
  b = good;
  b[48] = 3;  // first extent 2 -> 3 without the byte counts following
  expect(reseal(b), "declares 512 raw bytes, but f32[3, 4, 16] needs 768");
  b = good;
  b[118] = 1;
  expect(reseal(b), "has non-zero reserved header bytes");
  expect(reseal(slurp(cache.store().path_of(k2)).replace(24, 1, 1, '\x05')),
         "holds the record of boundary 0, teacher, batch 5");

  // Reopening a directory with a damaged record fails at once, naming it.
  overwrite(p, good.substr(0, 50));
  const std::string truncated = p.filename().string() + "' is truncated";
  CHECK_THROWS_WITH_AS(disk_store(dir.path), doctest::Contains(truncated.c_str()), lwcl::error);

  // A compressed record cut short: the header no longer matches the file.
  temp_dir dir2("corrupt_compressed");
  feature_cache<disk_exponent> cc(exponent_codec{}, dir2.path);
  const shape big{4, 16, 64};
  const std::vector<float> vb = activations(4, 16, 64, 24);
  std::vector<float> out_big(vb.size());
  cc.put(k, vb.data(), big, 0);
  REQUIRE(cc.meta_of(k).enc == encoding::exponent);
  const fs::path pc = cc.store().inner().path_of(k);
  const std::string cg = slurp(pc);
  overwrite(pc, cg.substr(0, cg.size() - 1));
  CHECK_THROWS_WITH_AS(cc.get(k, out_big.data(), big), doctest::Contains("bytes after the header"), lwcl::error);
  // A damaged payload fails its checksum; sealed as if meant, the codec's own bounds catch it.
  std::string bad = cg;
  bad[feature_record_header_bytes + 8] = '\x01';  // element count inside the exponent payload
  overwrite(pc, bad);
  CHECK_THROWS_WITH_AS(cc.get(k, out_big.data(), big), doctest::Contains("has a corrupted payload"), lwcl::error);
  overwrite(pc, reseal(bad));
  CHECK_THROWS_WITH_AS(cc.get(k, out_big.data(), big), doctest::Contains("exponent_codec: payload holds 4097 elements"),
                       lwcl::error);
}

TEST_CASE("a write killed before its rename leaves a temporary file that reopening ignores") {
  temp_dir dir("killed");
  const shape s{1, 2, 8};
  const std::vector<float> v1 = activations(1, 2, 8, 1, false), v2 = activations(1, 2, 8, 2, false);
  const feature_key a{0, source::teacher, 0}, b{0, source::teacher, 1};
  fs::path pa, pb;
  {
    feature_cache<disk_store> cache(dir.path);
    cache.put(a, v1.data(), s, 0);
    cache.put(b, v2.data(), s, 0);
    pa = cache.store().path_of(a);
    pb = cache.store().path_of(b);
    // What a killed overwrite of a and a killed first write of c leave behind: complete or partial
    // records under temporary names.
    fs::copy_file(pb, pa.string() + ".tmp.4242.0");
    const std::string partial = slurp(pb).substr(0, 70);
    overwrite(cache.store().path_of({0, source::teacher, 2}).string() + ".tmp.4242.1", partial);
    fs::remove(pb);  // b was never written, in this story
  }
  disk_store reopened(dir.path);
  CHECK(reopened.removed_temporaries() == 2);
  CHECK(reopened.keys() == std::vector<feature_key>{a});
  std::vector<float> back(v1.size());
  CHECK(reopened.read(a, std::as_writable_bytes(std::span<float>(back))).version == 0);
  CHECK(same_bits(v1, back));
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) {
    ++files;
    CHECK(e.path().extension() == ".lwfc");
  }
  CHECK(files == 1);
}

TEST_CASE("the prefetcher delivers its plan in order and complete, for 1 to 4 threads and rings of 1 to 3") {
  const shape s{2, 8, 32};
  const auto n = static_cast<std::size_t>(s.numel());
  feature_cache<hooked_store> cache;
  // Reads take uneven times, so workers finish out of order.
  cache.store().before_read = [](const feature_key& k) {
    std::this_thread::sleep_for(std::chrono::microseconds(150 * ((k.batch * 7 + k.boundary) % 4)));
  };
  std::vector<prefetch_item> plan;
  for (index_t boundary = 0; boundary < 2; ++boundary)
    for (index_t batch = 0; batch < 6; ++batch) {
      const feature_key t{boundary, source::teacher, batch}, st{boundary, source::student, batch};
      cache.put(t, content_of(t, n).data(), s, 0);
      cache.put(st, to_bf16(content_of(st, n)).data(), s, 5 + static_cast<std::uint64_t>(boundary));
      plan.emplace_back(st, 5 + static_cast<std::uint64_t>(boundary));
      plan.emplace_back(t);
    }
  const prefetch_item again0 = plan[0], again3 = plan[3];  // a key may come again (another epoch)
  plan.push_back(again0);
  plan.push_back(again3);

  for (int threads = 1; threads <= 4; ++threads)
    for (int ring = 1; ring <= 3; ++ring) {
      CAPTURE(threads);
      CAPTURE(ring);
      prefetcher<hooked_store> pf(cache, plan, {threads, ring});
      std::size_t i = 0;
      bool all_match = true;
      while (auto f = pf.next()) {
        const prefetch_item& want = plan[i];
        all_match = all_match && f->index == i && f->key == want.key;
        if (want.key.src == source::teacher) {
          const std::vector<float> got(f->data.ptr<float>(), f->data.ptr<float>() + n);
          all_match = all_match && same_bits(got, content_of(want.key, n)) && f->meta.version == 0;
        } else {
          const std::vector<bf16> got(f->data.ptr<bf16>(), f->data.ptr<bf16>() + n);
          all_match = all_match && same_bits(got, to_bf16(content_of(want.key, n))) && f->meta.version == *want.expected_version;
        }
        all_match = all_match && f->data.shape == s;
        ++i;
      }
      CHECK(all_match);
      CHECK(i == plan.size());
      CHECK_FALSE(pf.next().has_value());
      const prefetch_stats st = pf.stats();
      CHECK(st.delivered == plan.size());
      CHECK(st.planned == plan.size());
      CHECK(st.max_depth <= static_cast<std::size_t>(ring));
      CHECK(st.ready == 0);
      CHECK(st.bytes_delivered == (plan.size() / 2) * n * 6 + (plan.size() % 2) * n * 2);
    }
}

TEST_CASE("a prefetcher holding several delivered features keeps them intact while it stages ahead") {
  const shape s{1, 8, 16};
  const auto n = static_cast<std::size_t>(s.numel());
  feature_cache<hooked_store> cache;
  std::vector<prefetch_item> plan;
  for (index_t batch = 0; batch < 12; ++batch) {
    const feature_key k{1, source::teacher, batch};
    cache.put(k, content_of(k, n).data(), s, 0);
    plan.emplace_back(k);
  }
  // hold 3 and 2 more buffers: the trainer keeps its last three features (say, while copies out of
  // them run), and workers still stage two ahead.
  prefetcher<hooked_store> pf(cache, plan, {2, 5, 3});
  std::vector<staged_feature> held;
  bool intact = true;
  std::size_t most_ready = 0;
  while (auto f = pf.next()) {
    held.push_back(*f);
    if (held.size() > 3) held.erase(held.begin());  // the oldest was given back by this next()
    if (held.size() == 3 && f->index + 2 < plan.size()) {
      const timer wait;
      while (pf.ready() < 2 && wait.seconds() < 10) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // room to overstep, were it allowed
      most_ready = std::max(most_ready, pf.ready());
    }
    for (const auto& h : held) {
      const std::vector<float> got(h.data.ptr<float>(), h.data.ptr<float>() + n);
      intact = intact && same_bits(got, content_of(h.key, n));
    }
  }
  CHECK(intact);
  CHECK(most_ready == 2);  // never more than ring - hold staged ahead
  CHECK(pf.stats().delivered == plan.size());
  CHECK_THROWS_WITH_AS(prefetcher<hooked_store>(cache, plan, {1, 2, 3}), doctest::Contains("hold 3 staged features"),
                       lwcl::error);
}

TEST_CASE("prefetch workers' errors surface as lwcl::error from next() at the failing item") {
  const shape s{1, 4, 8};
  const auto n = static_cast<std::size_t>(s.numel());
  feature_cache<hooked_store> cache;
  std::vector<prefetch_item> plan;
  for (index_t b = 0; b < 6; ++b) {
    const feature_key k{0, source::student, b};
    cache.put(k, content_of(k, n).data(), s, 1);
    plan.emplace_back(k, 1);
  }

  SUBCASE("a missing key") {
    plan[3] = prefetch_item({0, source::student, 99}, 1);
    prefetcher<hooked_store> pf(cache, plan, {3, 2});
    for (int i = 0; i < 3; ++i) CHECK(pf.next().has_value());
    CHECK_THROWS_WITH_AS(pf.next(), doctest::Contains("prefetcher: item 3 of 6 (boundary 0, student, batch 99): feature_cache: no feature"),
                         lwcl::error);
    CHECK_THROWS_WITH_AS(pf.next(), doctest::Contains("item 3 of 6"), lwcl::error);  // and again
  }
  SUBCASE("a stale version") {
    plan[1].expected_version = 2;
    prefetcher<hooked_store> pf(cache, plan, {2, 3});
    CHECK(pf.next().has_value());
    CHECK_THROWS_WITH_AS(pf.next(), doctest::Contains("stale feature"), lwcl::error);
  }
  SUBCASE("a student key without a version") {
    plan[0].expected_version.reset();
    prefetcher<hooked_store> pf(cache, plan, {1, 1});
    CHECK_THROWS_WITH_AS(pf.next(), doctest::Contains("is a student feature"), lwcl::error);
  }
  SUBCASE("an exception of another type from the store") {
    cache.store().before_read = [](const feature_key& k) {
      if (k.batch == 4) throw std::runtime_error("disk on fire");
    };
    prefetcher<hooked_store> pf(cache, plan, {4, 3});
    for (int i = 0; i < 4; ++i) CHECK(pf.next().has_value());
    CHECK_THROWS_WITH_AS(pf.next(), doctest::Contains("item 4 of 6 (boundary 0, student, batch 4): disk on fire"), lwcl::error);
  }
  CHECK_THROWS_WITH_AS(prefetcher<hooked_store>(cache, plan, {0, 2}), doctest::Contains("0 threads"), lwcl::error);
  CHECK_THROWS_WITH_AS(prefetcher<hooked_store>(cache, plan, {1, 0}), doctest::Contains("a ring of 0 buffers"), lwcl::error);
}

TEST_CASE("the prefetcher counts the trainer's stalls and the ring's depth") {
  const shape s{1, 4, 8};
  const auto n = static_cast<std::size_t>(s.numel());
  feature_cache<hooked_store> cache;
  std::mutex m;
  std::condition_variable cv;
  bool open = false;
  cache.store().before_read = [&](const feature_key&) {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return open; });
  };
  std::vector<prefetch_item> plan;
  for (index_t b = 0; b < 5; ++b) {
    const feature_key k{1, source::teacher, b};
    cache.put(k, content_of(k, n).data(), s, 0);
    plan.emplace_back(k);
  }
  prefetcher<hooked_store> pf(cache, plan, {2, 3});
  // The ring's buffers are sized before any worker starts, so a memory sample never catches one half
  // counted (the pipeline's step records once did, under load).
  CHECK(pf.stats().staging_bytes == 3 * n * 4);
  // Nothing can be staged while the gate is shut: the first next() waits until it opens.
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    std::lock_guard lock(m);
    open = true;
    cv.notify_all();
  });
  const timer t;
  CHECK(pf.next().has_value());
  const double waited = t.seconds();
  opener.join();
  prefetch_stats st = pf.stats();
  CHECK(st.stalls == 1);
  CHECK(st.stall_seconds >= 0.04);
  CHECK(st.stall_seconds <= waited + 1e-6);

  // Once the ring has filled (the item held by the trainer aside), next() does not stall.
  pf.release();
  const timer deadline;
  while (pf.ready() < 3 && deadline.seconds() < 10) std::this_thread::yield();
  REQUIRE(pf.ready() == 3);
  CHECK(pf.next().has_value());
  CHECK(pf.next().has_value());
  st = pf.stats();
  CHECK(st.stalls == 1);
  CHECK(st.max_depth == 3);
  CHECK(st.mean_depth > 1.0);
  CHECK(st.staging_bytes == 3 * n * 4);
  CHECK(st.work_seconds > 0);
}

TEST_CASE("a prefetcher stopped with work pending shuts down cleanly") {
  const shape s{1, 2, 4};
  feature_cache<host_store<>> cache;
  std::vector<prefetch_item> plan;
  for (index_t b = 0; b < 40; ++b) {
    const feature_key k{0, source::teacher, b};
    cache.put(k, content_of(k, 8).data(), s, 0);
    plan.emplace_back(k);
  }
  for (int threads = 1; threads <= 4; ++threads) {
    { prefetcher<host_store<>> untouched(cache, plan, {threads, 2}); }
    prefetcher<host_store<>> pf(cache, plan, {threads, 2});
    CHECK(pf.next().has_value());
    CHECK(pf.next().has_value());
  }
  // An empty plan ends at once.
  prefetcher<host_store<>> empty(cache, {}, {2, 2});
  CHECK_FALSE(empty.next().has_value());
}
