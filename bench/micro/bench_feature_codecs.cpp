// The lossless codecs on real boundary features: gauss_codec (closed-form tables, tables picked by
// the rms or searched) and exponent_codec against zstd level 1, f32 and bf16, encode and decode timed
// apart, on one thread and on two (the records shared out, and for gauss also its blocks). The
// features are h_0 .. h_L of a trained GPT-2 teacher on a few (8, 128) batches of the prepared corpus,
// one record per batch as the cache stores them. h_0 (the embeddings) and h_L are timed, since their
// value scales differ; every boundary's ratios and the order-0 entropy bound of its exponents are
// printed after the timings, then each case's ratio and speed and each codec's figures relative to
// zstd-1's on as many threads.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/data/loader.hpp"
#include "lwcl/codec/exponent_codec.hpp"
#include "lwcl/codec/gauss_codec.hpp"
#include "lwcl/codec/zstd_codec.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/model/layer_outputs.hpp"
#include "lwcl/model/transformer.hpp"

using namespace lwcl;

namespace {

namespace fs = std::filesystem;

constexpr index_t batch_rows = 8, seq_len = 128;
constexpr int n_batches = 4;
constexpr std::uint64_t loader_seed = 0x5EED;  // the quickstart's training stream
// The embeddings, which the first segment reads: their scale is far below that of the blocks' outputs.
constexpr index_t shallow_boundary = 0;

struct paths {
  std::string model = "runs/teacher_tiny_gpt2/model", data = "data/prepared";
};

// Cache records: raw[d][b][k] holds the bytes of boundary b, batch k, in f32 (d = 0) or bf16 (d = 1).
struct feature_records {
  index_t layers = 0, width = 0;
  std::array<std::vector<std::vector<std::vector<std::byte>>>, 2> raw;

  const std::vector<std::vector<std::byte>>& of(dtype t, index_t boundary) const {
    return raw[t == dtype::bf16 ? 1 : 0][static_cast<std::size_t>(boundary)];
  }
};

feature_records& features() {
  static feature_records f;
  return f;
}

// Removes "--name VALUE" or "--name=VALUE" from argv (before Google Benchmark sees it) into value.
bool take_flag(int& argc, char** argv, const std::string& name, std::string& value) {
  const std::string flag = "--" + name;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    int used = 0;
    if (a == flag && i + 1 < argc) {
      value = argv[i + 1];
      used = 2;
    } else if (a.rfind(flag + "=", 0) == 0) {
      value = a.substr(flag.size() + 1);
      used = 1;
    }
    if (used > 0) {
      for (int j = i; j + used <= argc; ++j) argv[j] = argv[j + used];
      argc -= used;
      return true;
    }
  }
  return false;
}

template <class E>
std::vector<std::byte> as_bytes_of(const std::vector<E>& v) {
  std::vector<std::byte> out(v.size() * sizeof(E));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// The hidden state entering each layer and leaving the last one, h_0 .. h_L, of one batch, as the
// layer-wise trainer computes its teacher features: the embeddings, then one block at a time.
std::vector<std::vector<float>> boundary_features(model::transformer<backend::cpu>& net,
                                                  const std::vector<std::int32_t>& ids) {
  std::vector<std::vector<float>> out;
  model::for_each_layer_output(net, ids, batch_rows, seq_len, [&](index_t, const tensor& h) {
    out.emplace_back(static_cast<std::size_t>(h.numel()));
    net.backend().to_host(out.back().data(), h.data, h.bytes());
  });
  return out;
}

// Loads the teacher and the batches, and computes every boundary feature of every batch.
void load_features(const paths& p) {
  const fs::path model_dir(p.model), train = fs::path(p.data) / "train.bin";
  check(fs::exists(model_dir / "config.json") && fs::exists(model_dir / "model.safetensors"),
        "bench_feature_codecs: no trained teacher in '", p.model,
        "' (config.json + model.safetensors). Create it with `bash tools/quickstart.sh` (trains the tiny teacher "
        "into runs/teacher_tiny_gpt2 and prepares data/prepared) or `build/host/experiments/train_teacher --data "
        "data/prepared`, or point --model / LWCL_BENCH_MODEL at a gpt2 model folder");
  check(fs::exists(train), "bench_feature_codecs: no prepared data '", train.string(),
        "'. Create it with `bash tools/quickstart.sh` (fetches and tokenises the corpus into data/prepared), or "
        "point --data / LWCL_BENCH_DATA at a folder written by experiments/prepare_data");

  backend::cpu be;
  model::transformer<backend::cpu> net(be, checkpoint::read_hf_config(p.model), dtype::f32);
  checkpoint::load_hf_weights(net, p.model);
  const auto& cfg = net.config();
  check(seq_len <= cfg.max_seq, "bench_feature_codecs: sequences of ", seq_len, " exceed the model's ", cfg.max_seq,
        " positions");
  const data::shard shard(train.string());
  check(shard.vocab_size() <= static_cast<std::uint64_t>(cfg.vocab), "bench_feature_codecs: the data's vocabulary of ",
        shard.vocab_size(), " tokens is larger than the model's ", cfg.vocab);
  const data::batch_loader loader(shard, batch_rows, seq_len, loader_seed);

  auto& f = features();
  f.layers = cfg.n_layers();
  f.width = cfg.d_model;
  for (auto& d : f.raw) d.assign(static_cast<std::size_t>(f.layers + 1), {});
  std::vector<std::int32_t> ids, targets;
  for (int k = 0; k < n_batches; ++k) {
    loader.batch(static_cast<std::uint64_t>(k), ids, targets);
    const auto h = boundary_features(net, ids);
    for (std::size_t b = 0; b < h.size(); ++b) {
      std::vector<bf16> y(h[b].size());
      std::transform(h[b].begin(), h[b].end(), y.begin(), [](float v) { return bf16::from_float(v); });
      f.raw[0][b].push_back(as_bytes_of(h[b]));
      f.raw[1][b].push_back(as_bytes_of(y));
    }
  }
}

std::size_t total_bytes(const std::vector<std::vector<std::byte>>& records) {
  std::size_t n = 0;
  for (const auto& r : records) n += r.size();
  return n;
}

// Encodes every record into enc and decodes it back; false when a record does not return bit for bit.
template <class Codec>
bool round_trip(const Codec& codec, dtype t, const std::vector<std::vector<std::byte>>& records,
                std::vector<std::vector<std::byte>>& enc) {
  enc.resize(records.size());
  for (std::size_t k = 0; k < records.size(); ++k) {
    codec.encode(t, records[k], enc[k]);
    std::vector<std::byte> back(records[k].size());
    codec.decode(t, enc[k], back);
    if (back != records[k]) return false;
  }
  return true;
}

struct case_key {
  std::string codec;
  dtype type;
  index_t boundary;
  auto operator<=>(const case_key&) const = default;
};
// Every run of a case: its iteration count and rate in raw bytes per second.
using run_rates = std::vector<std::pair<benchmark::IterationCount, double>>;
struct case_result {
  double ratio = 0;
  run_rates encode, decode;
};
std::map<case_key, case_result>& results() {
  static std::map<case_key, case_result> m;
  return m;
}

enum class direction { encode, decode };

// One case. Each iteration encodes (or decodes) every batch's record of the boundary, as the cache does
// one put (or read) per record. Output buffers are reused across iterations.
template <class Codec>
void codec_case(benchmark::State& state, const Codec codec, const std::string codec_name, direction dir, dtype t,
                index_t boundary, int record_threads) {
  const auto& records = features().of(t, boundary);
  const std::size_t raw = total_bytes(records);
  std::vector<std::vector<std::byte>> enc;
  std::vector<std::vector<std::byte>> dec(records.size());
  for (std::size_t k = 0; k < records.size(); ++k) dec[k].resize(records[k].size());
  try {
    // Checked outside the timing, before each run: every record must come back bit for bit.
    if (!round_trip(codec, t, records, enc)) {
      state.SkipWithError("decoding did not return the encoded bits");
      return;
    }
    const double ratio = static_cast<double>(raw) / static_cast<double>(total_bytes(enc));
    const auto n_records = static_cast<std::ptrdiff_t>(records.size());
    auto one = [&](std::ptrdiff_t k) {
      const auto i = static_cast<std::size_t>(k);
      if (dir == direction::encode) {
        codec.encode(t, records[i], enc[i]);
        benchmark::DoNotOptimize(enc[i].data());
      } else {
        codec.decode(t, enc[i], dec[i]);
        benchmark::DoNotOptimize(dec[i].data());
      }
    };
    timer clock;
    for (auto _ : state) {
      if (record_threads > 1) {
#pragma omp parallel for num_threads(record_threads) schedule(static)
        for (std::ptrdiff_t k = 0; k < n_records; ++k) one(k);
      } else {
        for (std::ptrdiff_t k = 0; k < n_records; ++k) one(k);
      }
      benchmark::ClobberMemory();
    }
    const double seconds = clock.seconds();
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(raw));
    state.counters["ratio"] = ratio;
    auto& r = results()[{codec_name, t, boundary}];
    r.ratio = ratio;
    (dir == direction::encode ? r.encode : r.decode)
        .emplace_back(state.iterations(), static_cast<double>(raw) * static_cast<double>(state.iterations()) / seconds);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// A table cell: the value to three decimals, or "-" for a case that was not run (filtered out, or skipped).
std::string cell(double v) {
  if (!(v > 0)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", v);
  return buf;
}

// n (H + plane bits) / 8 over the records: the size of an ideal order-0 coder of the exponent byte
// with the sign and mantissa bits stored raw, the bound exponent coders are measured against.
double entropy_bound(dtype t, const std::vector<std::vector<std::byte>>& records) {
  std::array<double, 256> count{};
  double n = 0;
  const std::size_t width = t == dtype::f32 ? 4 : 2;
  for (const auto& rec : records)
    for (std::size_t i = 0; i < rec.size() / width; ++i) {
      std::uint32_t u = 0;
      std::memcpy(&u, rec.data() + i * width, width);
      ++count[t == dtype::f32 ? (u >> 23) & 0xffu : (u >> 7) & 0xffu];
      ++n;
    }
  double h = 0;
  for (double c : count)
    if (c > 0) h -= c / n * std::log2(c / n);
  return n * (h + (t == dtype::f32 ? 24 : 8)) / 8;
}

// Per boundary: value scale, the entropy of the exponent byte, and each codec's ratio (one encoding
// each, untimed) beside the entropy bound's, so the timed boundaries can be placed among the others.
void print_boundary_profile(const codec::exponent_codec& ex, const codec::zstd_codec& zs, const codec::gauss_codec& ga,
                            const codec::gauss_codec& gs) {
  const auto& f = features();
  std::printf("\nboundaries (%d batches of (%lld, %lld, %lld), one record each); ratios, bound = order-0 entropy bound:\n",
              n_batches, static_cast<long long>(batch_rows), static_cast<long long>(seq_len),
              static_cast<long long>(f.width));
  std::printf("%-8s %8s %9s %8s | %-6s %7s %7s %7s %8s %7s\n", "boundary", "rms", "max|x|", "exp bits", "dtype",
              "bound", "gauss", "search", "exponent", "zstd-1");
  for (index_t b = 0; b <= f.layers; ++b) {
    std::array<double, 256> count{};
    double sq = 0, top = 0, n = 0;
    for (const auto& rec : f.of(dtype::f32, b)) {
      const std::size_t m = rec.size() / sizeof(float);
      for (std::size_t i = 0; i < m; ++i) {
        float x;
        std::memcpy(&x, rec.data() + i * sizeof x, sizeof x);
        sq += static_cast<double>(x) * x;
        top = std::max(top, static_cast<double>(std::fabs(x)));
        ++count[(float_bits(x) >> 23) & 0xffu];
      }
      n += static_cast<double>(m);
    }
    double entropy = 0;
    for (double c : count)
      if (c > 0) entropy -= c / n * std::log2(c / n);
    // "fail" where a record does not round-trip (the timed case reports it too).
    auto ratio = [&](const auto& codec, dtype t) {
      std::vector<std::vector<std::byte>> enc;
      if (!round_trip(codec, t, f.of(t, b), enc)) return std::string("fail");
      return cell(static_cast<double>(total_bytes(f.of(t, b))) / static_cast<double>(total_bytes(enc)));
    };
    for (dtype t : {dtype::f32, dtype::bf16}) {
      const double bound = static_cast<double>(total_bytes(f.of(t, b))) / entropy_bound(t, f.of(t, b));
      if (t == dtype::f32)
        std::printf("h%-7lld %8.4f %9.3f %8.2f | ", static_cast<long long>(b), std::sqrt(sq / n), top, entropy);
      else
        std::printf("%-8s %8s %9s %8s | ", "", "", "", "");
      std::printf("%-6s %7s %7s %7s %8s %7s\n", dtype_name(t).data(), cell(bound).c_str(), ratio(ga, t).c_str(),
                  ratio(gs, t).c_str(), ratio(ex, t).c_str(), ratio(zs, t).c_str());
    }
  }
}

// Google Benchmark first runs a case with growing iteration counts until one run lasts the minimum
// time; that run and every further repetition (which reuse its count) are the ones it reports, so the
// runs with the largest count are the measured ones. Their median is the figure, so that one slow run
// on a shared machine does not decide it.
std::vector<double> reported(const run_rates& runs) {
  benchmark::IterationCount most = 0;
  for (const auto& [iters, bps] : runs) most = std::max(most, iters);
  std::vector<double> v;
  for (const auto& [iters, bps] : runs)
    if (iters == most) v.push_back(bps);
  return v;
}

double median(const run_rates& runs) {
  std::vector<double> v = reported(runs);
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// The codecs timed, by name, and the threads each case runs on.
const std::vector<std::string> codec_names = {"gauss", "gauss-search", "exponent", "zstd-1"};
const std::vector<int> thread_counts = {1, 2};

std::string case_name(const std::string& codec, int threads) {
  return codec + (threads > 1 ? "/" + std::to_string(threads) + "t" : "");
}

void print_summary() {
  const auto& r = results();
  std::printf("\n%-22s %-5s %-8s %7s %7s %12s %12s %5s\n", "codec", "dtype", "boundary", "ratio", "/bound", "encode GB/s",
              "decode GB/s", "runs");
  auto rel = [](double x, double y) { return x > 0 && y > 0 ? x / y : 0.0; };
  for (dtype t : {dtype::f32, dtype::bf16})
    for (index_t b : {shallow_boundary, features().layers}) {
      const double bound =
          static_cast<double>(total_bytes(features().of(t, b))) / entropy_bound(t, features().of(t, b));
      for (int threads : thread_counts) {
        const auto zs = r.find({case_name("zstd-1", threads), t, b});
        for (const auto& codec : codec_names) {
          const auto it = r.find({case_name(codec, threads), t, b});
          if (it == r.end()) continue;
          std::printf("%-22s %-5s h%-7lld %7s %7s %12s %12s %5zu\n", it->first.codec.c_str(), dtype_name(t).data(),
                      static_cast<long long>(b), cell(it->second.ratio).c_str(), cell(it->second.ratio / bound).c_str(),
                      cell(median(it->second.encode) / 1e9).c_str(), cell(median(it->second.decode) / 1e9).c_str(),
                      std::max(reported(it->second.encode).size(), reported(it->second.decode).size()));
        }
        if (zs == r.end()) continue;
        for (const auto& codec : codec_names) {
          const auto it = r.find({case_name(codec, threads), t, b});
          if (codec == "zstd-1" || it == r.end()) continue;
          std::printf("%-22s %-5s h%-7lld %7s %7s %12s %12s\n", (case_name(codec, threads) + " / zstd-1").c_str(),
                      dtype_name(t).data(), static_cast<long long>(b), cell(rel(it->second.ratio, zs->second.ratio)).c_str(),
                      "", cell(rel(median(it->second.encode), median(zs->second.encode))).c_str(),
                      cell(rel(median(it->second.decode), median(zs->second.decode))).c_str());
        }
      }
    }
  std::printf("GB = 10^9 raw bytes, the median of the runs; /bound: the ratio over the order-0 entropy bound's\n"
              "(1 = the bound); <codec> / zstd-1 rows: its ratio and rates divided by zstd-1's on as many threads;\n"
              "/2t: two threads, gauss sharing out each record's blocks, the others the records; - where a case was\n"
              "not run\n");
}

}  // namespace

int main(int argc, char** argv) {
  paths p;
  if (const char* e = std::getenv("LWCL_BENCH_MODEL")) p.model = e;
  if (const char* e = std::getenv("LWCL_BENCH_DATA")) p.data = e;
  take_flag(argc, argv, "model", p.model);
  take_flag(argc, argv, "data", p.data);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  const codec::exponent_codec exponent;
  const codec::zstd_codec zstd1(1);
  const codec::gauss_codec gauss1(1), gauss2(2), search1(1, codec::gauss::fit::search),
      search2(2, codec::gauss::fit::search);
  try {
    load_features(p);
  } catch (const lwcl::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  const auto& f = features();

  for (dtype t : {dtype::f32, dtype::bf16})
    for (index_t b : {shallow_boundary, f.layers})
      for (direction dir : {direction::encode, direction::decode})
        for (int threads : thread_counts) {
          const std::string suffix = std::string(dir == direction::encode ? "encode" : "decode") + "/" +
                                     std::string(dtype_name(t)) + "/h" + std::to_string(b);
          auto add = [&](const std::string& codec, auto c, int record_threads) {
            const std::string name = case_name(codec, threads);
            benchmark::RegisterBenchmark((name + "/" + suffix).c_str(),
                                         [=](benchmark::State& s) { codec_case(s, c, name, dir, t, b, record_threads); })
                ->Unit(benchmark::kMicrosecond)
                ->UseRealTime();
          };
          // gauss on two threads shares each record's blocks out; the others share out the records.
          add("gauss", threads > 1 ? gauss2 : gauss1, 1);
          add("gauss-search", threads > 1 ? search2 : search1, 1);
          add("exponent", exponent, threads);
          add("zstd-1", zstd1, threads);
        }

  const std::string shape = std::to_string(f.layers) + " layers, C=" + std::to_string(f.width);
  benchmark::AddCustomContext("model", p.model + " (" + shape + ")");
  benchmark::AddCustomContext("features", std::to_string(n_batches) + " batches of (8, 128, C) from " + p.data +
                                              "/train.bin; one cache record per batch; one thread, or two (/2t)");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  print_boundary_profile(exponent, zstd1, gauss1, search1);
  print_summary();
  return 0;
}
