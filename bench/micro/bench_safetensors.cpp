// Checkpoint load throughput: a 167 MB f32 gpt2 checkpoint (GPT-2-small width, 4 layers, vocab 16384)
// written once by checkpoint::save_hf, then read in one process: the whole file with read() (the
// baseline) and through a memory map (the copy alone), safetensors_file (map + header check + every
// tensor converted into a float buffer), and read_hf_config + load_hf_weights into a
// transformer<backend::cpu>. The file is read once before timing, so every variant reads from the
// page cache; rates are file bytes per second, and the end prints each variant's rate against read()'s.
#include <benchmark/benchmark.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/core/program.hpp"

using namespace lwcl;

namespace {

namespace fs = std::filesystem;

// The checkpoint folder, written on first use and removed at exit.
struct checkpoint_dir {
  std::string dir, file;
  std::size_t bytes = 0;

  checkpoint_dir() {
    dir = (fs::temp_directory_path() / ("lwcl_bench_safetensors_" + std::to_string(::getpid()))).string();
    file = dir + "/model.safetensors";
    backend::cpu be;
    const auto cfg = model::model_config::uniform(model::family::gpt2, 16384, 1024, 768, 4, 12, 12, 3072);
    model::transformer<backend::cpu> net(be, cfg);
    net.init(1);
    checkpoint::save_hf(net, dir);
    bytes = static_cast<std::size_t>(fs::file_size(file));
  }
  ~checkpoint_dir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

checkpoint_dir& ckpt() {
  static checkpoint_dir c;
  return c;
}

// Reads the whole file into buf with read(2); returns the bytes read.
std::size_t read_all(const std::string& path, std::vector<char>& buf) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  check(fd >= 0, "bench_safetensors: cannot open '", path, "': ", std::strerror(errno));
  std::size_t at = 0;
  while (at < buf.size()) {
    const ssize_t n = ::read(fd, buf.data() + at, buf.size() - at);
    if (n <= 0) break;
    at += static_cast<std::size_t>(n);
  }
  ::close(fd);
  check(at == buf.size(), "bench_safetensors: read ", at, " of ", buf.size(), " bytes of '", path, "'");
  return at;
}

// Seconds per iteration of each variant's last (longest) run, for the ratios printed at the end.
std::map<std::string, double>& seconds_per_load() {
  static std::map<std::string, double> m;
  return m;
}

void finish(benchmark::State& state, const std::string& variant, double seconds) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(ckpt().bytes));
  seconds_per_load()[variant] = seconds / static_cast<double>(state.iterations());
}

// (a) The baseline: the file's bytes copied from the page cache into a buffer, nothing interpreted.
void plain_read(benchmark::State& state) {
  std::vector<char> buf(ckpt().bytes);
  timer t;
  for (auto _ : state) benchmark::DoNotOptimize(read_all(ckpt().file, buf));
  finish(state, "plain_read", t.seconds());
}

// The same copy through a read-only mapping, as safetensors_file reads: separates the cost of
// mapping (page faults on cached pages) from the cost of converting tensors.
void mapped_copy(benchmark::State& state) {
  std::vector<char> buf(ckpt().bytes);
  timer t;
  for (auto _ : state) {
    const int fd = ::open(ckpt().file.c_str(), O_RDONLY | O_CLOEXEC);
    check(fd >= 0, "bench_safetensors: cannot open '", ckpt().file, "'");
    void* p = ::mmap(nullptr, buf.size(), PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    check(p != MAP_FAILED, "bench_safetensors: cannot map '", ckpt().file, "'");
    std::memcpy(buf.data(), p, buf.size());
    ::munmap(p, buf.size());
    benchmark::DoNotOptimize(buf.data());
  }
  finish(state, "mapped_copy", t.seconds());
}

// (b) safetensors_file: map the file, validate the header, convert every tensor into one float buffer.
void safetensors_read(benchmark::State& state) {
  std::size_t numel = 0;
  {
    const checkpoint::safetensors_file f(ckpt().file);
    for (const auto& e : f.entries()) numel += static_cast<std::size_t>(e.dims.numel());
  }
  std::vector<float> out(numel);
  timer t;
  for (auto _ : state) {
    const checkpoint::safetensors_file f(ckpt().file);
    float* p = out.data();
    for (const auto& e : f.entries()) {
      f.read<float>(e.name, e.dims, p);
      p += e.dims.numel();
    }
    benchmark::DoNotOptimize(out.data());
  }
  finish(state, "safetensors_read", t.seconds());
}

// (c) The whole checkpoint load into a model: config.json, then load_hf_weights (name mapping, GPT-2's
// transposes and q/k/v slices, the copy into the parameter buffer). The model is built once, outside
// the timing: its allocation is not part of reading a checkpoint.
void load_hf(benchmark::State& state) {
  backend::cpu be;
  model::transformer<backend::cpu> net(be, checkpoint::read_hf_config(ckpt().dir));
  timer t;
  for (auto _ : state) {
    const auto cfg = checkpoint::read_hf_config(ckpt().dir);
    benchmark::DoNotOptimize(cfg.d_model);
    checkpoint::load_hf_weights(net, ckpt().dir);
    benchmark::DoNotOptimize(net.params().data);
  }
  finish(state, "load_hf", t.seconds());
}

}  // namespace

BENCHMARK(plain_read)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK(mapped_copy)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK(safetensors_read)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
BENCHMARK(load_hf)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  try {
    // Write the checkpoint and read it once, so that every variant reads from the page cache.
    std::vector<char> warm(ckpt().bytes);
    read_all(ckpt().file, warm);
  } catch (const lwcl::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    return lwcl::report_failure(e);
  }
  benchmark::AddCustomContext("checkpoint", "gpt2 C=768 L=4 V=16384, f32, " + std::to_string(ckpt().bytes) + " bytes");
  benchmark::AddCustomContext("page cache", "file read once before timing: every variant reads from memory");
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  const auto& s = seconds_per_load();
  const auto base = s.find("plain_read");
  if (base != s.end())
    for (const auto& [name, sec] : s)
      if (name != "plain_read")
        std::printf("%s: %.2f of plain_read's bytes/s (time ratio %.2f)\n", name.c_str(), base->second / sec,
                    sec / base->second);
  return 0;
}
