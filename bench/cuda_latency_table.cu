// The decoding latency table on the GPU (backend/cuda/quant/latency.cuh): every block linear's shape of
// a few LLaMA-shaped architectures, at f32 (cuBLAS), int8 and int4 g128 (the dequantising GEMM), one
// token, hot and streamed from the architecture's linear bytes in that format (at most 2 GiB). Prints each
// architecture's predicted linear time per decoding step in each format, and writes the table
// (latency_table.json, threads 0 = the GPU) and the sums (cuda_latency.md, cuda_latency.json) into --out.
//   build/cuda/bench/cuda_latency_table [--out DIR]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/backend/cuda/cuda.cuh"
#include "lwcl/backend/cuda/quant/latency.cuh"
#include "lwcl/core/fs.hpp"
#include "lwcl/model/config.hpp"
#include "lwcl/quant/latency.hpp"
#include "lwcl/report/format.hpp"

using namespace lwcl;

int main(int argc, char** argv) {
  std::string out = "runs/cuda_latency_table";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--out") == 0 && i + 1 < argc) out = argv[++i];
    else {
      std::fprintf(stderr, "error: cuda_latency_table: unknown argument '%s' (expected --out DIR)\n", argv[i]);
      return 2;
    }
  }
  try {
    if (backend::cuda_device_count() == 0) {
      std::printf("cuda_latency_table: no CUDA device found; nothing to measure\n");
      return 0;
    }
    backend::cuda gpu;
    cudaDeviceProp prop{};
    LWCL_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    struct arch {
      std::string name;
      model::model_config cfg;
    };
    // One layer stands for the stack: every layer has the same shapes, and streaming is set by the
    // whole model's bytes.
    const std::vector<std::pair<arch, index_t>> archs = {
        {{"LLaMA-3.1-8B-like (4096, 32 heads, 8 KV, FFN 14336)",
          model::model_config::uniform(model::family::llama, 128256, 2048, 4096, 1, 32, 8, 14336)}, 32},
        {{"1B-like (2048, 16 heads, 4 KV, FFN 5632)", model::model_config::uniform(model::family::llama, 32000, 2048, 2048, 1, 16, 4, 5632)},
         22}};
    const std::vector<std::pair<std::string, quant::linear_choice>> formats = {
        {"f32", {32, 0, 32}}, {"int8 g128", {8, 128, 32}}, {"int4 g128", {4, 128, 32}}};
    quant::latency_table table;
    nlohmann::ordered_json sums = nlohmann::ordered_json::array();
    std::string md = report::format("# Decoding latency table on %s (one token)\n\n", prop.name);
    md += "| architecture | layers | format | linear MiB | hot ms | streamed ms |\n|---|---|---|---|---|---|\n";
    for (const auto& [a, layers] : archs) {
      for (const auto& [fname, c] : formats) {
        const auto one_layer = quant::linear_weight_bytes(a.cfg, [&](index_t, const std::string&) { return c; });
        const std::size_t model_bytes = one_layer * static_cast<std::size_t>(layers);
        // Streamed from the model's bytes, at most 2 GiB: far past the L2 cache (50 MiB on an H100), so
        // every call reads its weights from HBM as a decoding step does.
        const std::size_t stream = std::min(model_bytes, std::size_t{2} << 30);
        double hot = 0, streamed = 0;
        for (const auto& [name, rows, cols] : quant::block_linears(a.cfg, 0)) {
          for (const std::size_t sb : {std::size_t{0}, stream}) {
            const quant::linear_key k{rows, cols, c.weight_bits, c.weight_bits == 32 ? 0 : c.group, 32, 1, 0, sb};
            if (!table.contains(k)) table.set(k, quant::measure_linear(gpu, k, 0.02));
            (sb == 0 ? hot : streamed) += table.at(k) * static_cast<double>(layers);
          }
        }
        std::printf("cuda_latency_table: %s, %s: %.3f ms hot, %.3f ms streamed\n", a.name.c_str(), fname.c_str(), 1e3 * hot,
                    1e3 * streamed);
        md += report::format("| %s | %lld | %s | %.1f | %.3f | %.3f |\n", a.name.c_str(), static_cast<long long>(layers),
                             fname.c_str(), static_cast<double>(model_bytes) / (1 << 20), 1e3 * hot, 1e3 * streamed);
        sums.push_back({{"architecture", a.name}, {"layers", layers}, {"format", fname}, {"linear_bytes", model_bytes},
                        {"hot_seconds", hot}, {"streamed_seconds", streamed}});
      }
    }
    std::printf("\n%s", md.c_str());
    std::filesystem::create_directories(out);
    write_text_atomic((std::filesystem::path(out) / "latency_table.json").string(), table.to_json().dump(1) + "\n");
    write_text_atomic((std::filesystem::path(out) / "cuda_latency.json").string(), sums.dump(1) + "\n");
    write_text_atomic((std::filesystem::path(out) / "cuda_latency.md").string(), md);
    std::printf("cuda_latency_table: wrote %s/{latency_table.json,cuda_latency.json,cuda_latency.md}\n", out.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_latency_table: %s\n", e.what());
    return 1;
  }
  return 0;
}
