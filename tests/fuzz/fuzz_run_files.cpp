// Fuzz target: the files a run reads back to resume. The first byte picks the reader, the rest is the
// file:
//   0  a disk feature cache record, opened by disk_store and read (decoded by its codec when encoded),
//      with the CRC-32s the input carries
//   1  the same with both CRC-32s recomputed first, so that the fields behind them are reached
//   2  a pipeline checkpoint's state.json, beside a valid student.bin (read_checkpoint)
//   3  a pipeline checkpoint's student.bin, beside a valid state.json
//   4  AdamW state (a teacher checkpoint's optimizer.bin, a segment's segment.bin), loaded into an
//      optimiser of 24 f32 parameters
//   5  a teacher checkpoint's state.json (read_lm_step)
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz_support.hpp"
#include "lwcl/backend/host/host.hpp"
#include "lwcl/cache/compressed_store.hpp"
#include "lwcl/cache/disk_store.hpp"
#include "lwcl/codec/exponent_codec.hpp"
#include "lwcl/codec/zstd_codec.hpp"
#include "lwcl/distill/pipeline/checkpoint.hpp"
#include "lwcl/optim/adamw.hpp"
#include "lwcl/train/lm_training.hpp"

namespace {

namespace fs = std::filesystem;
using namespace lwcl;

fs::path fresh_dir(const char* name) {
  const fs::path dir = fuzz::scratch_dir() / name;
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir);
  return dir;
}

// A record file under the name of the key its header claims (when it has a header), opened and read
// through a plain store and through both codecs' stores; payloads up to 64 MiB decoded.
void cache_record(std::string bytes, bool reseal) {
  using L = cache::cache_detail::header_layout;
  auto* h = reinterpret_cast<std::byte*>(bytes.data());
  if (reseal && bytes.size() >= cache::feature_record_header_bytes) {
    cache::cache_detail::store_le<std::uint32_t>(
        h, L::payload_crc,
        cache::cache_detail::crc32_of(h + cache::feature_record_header_bytes, bytes.size() - cache::feature_record_header_bytes));
    cache::cache_detail::store_le<std::uint32_t>(h, L::header_crc, cache::cache_detail::crc32_of(h, L::header_crc));
  }
  const fs::path dir = fresh_dir("cache");
  cache::feature_key k{0, cache::source::teacher, 0};
  if (bytes.size() >= L::src + 1) {
    k.boundary = cache::cache_detail::load_le<std::int64_t>(h, L::boundary) & 0xff;
    k.batch = cache::cache_detail::load_le<std::int64_t>(h, L::batch) & 0xff;
    k.src = cache::cache_detail::load_le<std::uint8_t>(h, L::src) == 1 ? cache::source::student : cache::source::teacher;
  }
  {
    const cache::disk_store probe_names(dir);
    fuzz::write_file("cache/" + probe_names.path_of(k).filename().string(), bytes.data(), bytes.size());
  }
  const auto read_all = [&](const auto& store) {
    for (const auto& key : store.keys()) {
      const auto m = store.meta(key);
      if (!m || m->raw_bytes() > (std::uint64_t{64} << 20)) continue;
      std::vector<std::byte> out(m->raw_bytes());
      fuzz::refused([&] { (void)store.read(key, out); });
    }
  };
  fuzz::refused([&] { read_all(cache::disk_store(dir)); });
  fuzz::refused([&] { read_all(cache::compressed_store<cache::disk_store, codec::exponent_codec>(codec::exponent_codec{}, dir)); });
  fuzz::refused([&] { read_all(cache::compressed_store<cache::disk_store, codec::zstd_codec>(codec::zstd_codec(3), dir)); });
}

// A valid pipeline checkpoint of 16 parameters (as write_checkpoint lays it out, written here without its
// fsyncs), one of whose files is then the input.
void pipeline_checkpoint(const std::string& bytes, bool state_file) {
  const fs::path dir = fresh_dir("ck");
  const std::vector<double> params(16, 0.25);
  distill::checkpoint_state st;
  st.student_parameters = params.size();
  st.fingerprint = {{"lr", 0.004}};
  const std::string state = nlohmann::json(st).dump();
  fuzz::write_file("ck/state.json", state_file ? bytes : state);
  if (state_file) fuzz::write_file("ck/student.bin", params.data(), params.size() * sizeof(double));
  else fuzz::write_file("ck/student.bin", bytes);
  std::vector<double> back(params.size());
  fuzz::refused([&] { (void)distill::read_checkpoint(dir, back, st.fingerprint); });
}

void adamw_state(const std::string& bytes) {
  static backend::cpu be;
  static std::vector<float> p(24, 0.5f);
  optim::adamw<backend::cpu> opt(be, tensor(p.data(), {24}), {});
  std::istringstream in(bytes);
  fuzz::refused([&] { opt.load(in); });
}

void lm_state(const std::string& bytes) {
  fuzz::write_file("state.json", bytes.data(), bytes.size());
  fuzz::refused([&] { (void)train::read_lm_step(fuzz::scratch_dir() / "state.json", 1000); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 6) {
    case 0: cache_record(bytes, false); break;
    case 1: cache_record(bytes, true); break;
    case 2: pipeline_checkpoint(bytes, true); break;
    case 3: pipeline_checkpoint(bytes, false); break;
    case 4: adamw_state(bytes); break;
    default: lm_state(bytes); break;
  }
  return 0;
}
