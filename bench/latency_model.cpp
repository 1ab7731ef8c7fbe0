// The decoding latency model (quant/latency.hpp) against whole models: measures the lookup table of
// every block linear's shape x format at one token (batch-1 decoding), hot (the same weights every call)
// and streamed (the calls cycling over copies of the weights that span the model's linear bytes), then,
// for each student architecture x precision assignment, predicts a decoding step as the architecture's
// measured rest (the step with its linears skipped) plus the table's linears in each regime, and
// measures the step itself (the kv_decoder,
// packed linears through the dequantising GEMM). Architectures: the deep llama teacher's shape (width
// 192, 8 layers, 6 heads, FFN 512), a pruned one (4 heads, FFN 256), a LLaMA-1B-like slice (width 2048, 4
// layers, 16 heads, 4 KV heads, FFN 5632) and its pruned half (8 heads, 2 KV heads, FFN 2816); precisions:
// f32, int8, int4, int4 g64, attention int8 + MLP int4 g64, and the first half of the layers int4 g64
// with the rest f32. Weights are random (speed does not depend on them). Prints the CPU and a Markdown
// table with each prediction's error; writes latency_table.json, latency_model.csv, latency_model.json
// and latency_model.png into --out.
//   build/host/bench/latency_model [--out DIR] [--threads N]
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/fs.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/quant/decode.hpp"
#include "lwcl/quant/latency.hpp"
#include "lwcl/quant/rtn.hpp"
#include "lwcl/report/format.hpp"
#include "lwcl/report/plot.hpp"

using namespace lwcl;
using quant::linear_choice;

extern "C" void openblas_set_num_threads(int);

namespace {

struct arch {
  std::string name;
  model::model_config cfg;
};

model::model_config pruned(model::model_config c, index_t heads, index_t kv, index_t ffn) {
  for (auto& l : c.layers) {
    l.n_heads = heads;
    l.n_kv_heads = kv;
    l.ffn = ffn;
  }
  return c;
}

struct assignment {
  std::string name;
  std::function<linear_choice(index_t layer, const std::string& linear, index_t n_layers)> choice;
};


}  // namespace

int main(int argc, char** argv) {
  std::string out = "bench/results/latency_model";
  int threads = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
      out = argv[++i];
    } else if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "error: latency_model: unknown argument '%s' (expected --out DIR, --threads N)\n", argv[i]);
      return 2;
    }
  }
  if (threads < 1) {
    std::fprintf(stderr, "error: latency_model: --threads %d (expected at least 1)\n", threads);
    return 2;
  }
  try {
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
    const std::string cpu = quant::host_cpu_line();
    std::printf("cpu: %s; threads %d\n", cpu.c_str(), threads);
    const auto deep = model::model_config::uniform(model::family::llama, 1024, 128, 192, 8, 6, 6, 512);
    const auto big = model::model_config::uniform(model::family::llama, 1024, 128, 2048, 4, 16, 4, 5632);
    const std::vector<arch> archs = {{"deep llama (192, FFN 512)", deep},
                                     {"deep llama pruned (4 heads, FFN 256)", pruned(deep, 4, 4, 256)},
                                     {"1B-like slice (2048, FFN 5632)", big},
                                     {"1B-like slice pruned (8 heads, 2 KV, FFN 2816)", pruned(big, 8, 2, 2816)}};
    const std::vector<assignment> assigns = {
        {"f32", [](index_t, const std::string&, index_t) { return linear_choice{32, 0}; }},
        {"int8", [](index_t, const std::string&, index_t) { return linear_choice{8, 0}; }},
        {"int4", [](index_t, const std::string&, index_t) { return linear_choice{4, 0}; }},
        {"int4 g64", [](index_t, const std::string&, index_t) { return linear_choice{4, 64}; }},
        {"attn int8, MLP int4 g64",
         [](index_t, const std::string& n, index_t) {
           return n.rfind("attn.", 0) == 0 ? linear_choice{8, 0} : linear_choice{4, 64};
         }},
        {"first half int4 g64, rest f32",
         [](index_t l, const std::string&, index_t L) { return l < L / 2 ? linear_choice{4, 64} : linear_choice{32, 0}; }}};

    // The lookup table: every (shape, format) the assignments use, at one token, in two regimes: hot
    // (the same weights every call, in the caches) and streamed (the calls cycle through copies of the
    // weights spanning the model's linear bytes under the assignment, as a decoding step reads them).
    quant::latency_table table;
    const auto working_set = [](const arch& a, const assignment& as) {
      return quant::linear_weight_bytes(a.cfg, [&](index_t l, const std::string& n) { return as.choice(l, n, a.cfg.n_layers()); });
    };
    for (const auto& a : archs)
      for (const auto& as : assigns) {
        const std::size_t ws = working_set(a, as);
        for (index_t l = 0; l < a.cfg.n_layers(); ++l)
          for (const auto& [name, rows, cols] : quant::block_linears(a.cfg, l)) {
            const auto c = as.choice(l, name, a.cfg.n_layers());
            for (const std::size_t sb : {std::size_t{0}, ws}) {
              const quant::linear_key k{rows, cols, c.weight_bits, c.weight_bits == 32 ? 0 : c.group, 32, 1, threads, sb};
              if (!table.contains(k)) table.set(k, quant::measure_linear(k));
            }
          }
        std::printf("latency_model: %s, %s: %zu table entries so far\n", a.name.c_str(), as.name.c_str(), table.size());
        std::fflush(stdout);
      }
    std::printf("latency_model: measured %zu table entries\n", table.size());

    backend::cpu be;
    std::string md = "| architecture | precision | working set MiB | rest ms | linears ms (hot) | linears ms (streamed) | "
                     "predicted ms (hot) | predicted ms (streamed) | measured ms | error (hot) | error (streamed) |\n"
                     "|---|---|---|---|---|---|---|---|---|---|---|\n";
    std::string csv = "architecture,precision,working_set_bytes,rest_ms,linears_hot_ms,linears_streamed_ms,predicted_hot_ms,"
                      "predicted_streamed_ms,measured_ms,error_hot,error_streamed\n";
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    report::chart ch;
    ch.title = "decoding step: latency model against measurement";
    ch.x_label = "measured ms per token";
    ch.y_label = "predicted ms per token";
    double max_ms = 0, abs_err = 0, abs_err_hot = 0;
    int n = 0;
    for (const auto& a : archs) {
      model::transformer<backend::cpu> net(be, a.cfg, dtype::f32);
      net.init(3);
      const double rest = quant::measure_decode_step(net, 16, 32, [](model::kv_decoder<backend::cpu>& d) {
        d.set_linear([](index_t, std::string_view, const tensor&, const tensor&, const tensor&, const tensor&) {});
      });
      report::series pts;
      pts.label = a.name;
      pts.points = true;
      for (const auto& as : assigns) {
        std::vector<std::string> names;
        std::vector<quant::packed_weight> packed;
        for (index_t l = 0; l < a.cfg.n_layers(); ++l)
          for (const auto& [name, r, c] : quant::block_linears(a.cfg, l)) {
            const auto ch_ = as.choice(l, name, a.cfg.n_layers());
            if (ch_.weight_bits == 32) continue;
            const std::string full = model::layer_prefix(l) + name;
            const tensor w = net.param(full);
            quant::weight_format f;
            f.bits = ch_.weight_bits;
            f.group = ch_.group;
            packed.push_back(quant::quantize_rtn(static_cast<const float*>(w.data), r, c, f, full));
            names.push_back(full);
          }
        const quant::packed_linears pl(names, packed);
        const double measured = quant::measure_decode_step(net, 16, 32, [&](model::kv_decoder<backend::cpu>& d) {
          if (!names.empty()) pl.attach(d, net);
        });
        const auto choice = [&](index_t l, const std::string& nm) { return as.choice(l, nm, a.cfg.n_layers()); };
        const std::size_t ws = working_set(a, as);
        const double lin_hot = table.linear_seconds(a.cfg, 1, threads, choice);
        const double lin = table.linear_seconds(a.cfg, 1, threads, choice, [&](const linear_choice&) { return ws; });
        const double pred_hot = rest + lin_hot, err_hot = (pred_hot - measured) / measured;
        const double pred = rest + lin, err = (pred - measured) / measured;
        abs_err += std::abs(err);
        abs_err_hot += std::abs(err_hot);
        ++n;
        md += report::format("| %s | %s | %.1f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %+.1f%% | %+.1f%% |\n", a.name.c_str(),
                             as.name.c_str(), static_cast<double>(ws) / (1 << 20), 1e3 * rest, 1e3 * lin_hot, 1e3 * lin,
                             1e3 * pred_hot, 1e3 * pred, 1e3 * measured, 100 * err_hot, 100 * err);
        csv += report::format("\"%s\",\"%s\",%zu,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.5f,%.5f\n", a.name.c_str(), as.name.c_str(), ws,
                              1e3 * rest, 1e3 * lin_hot, 1e3 * lin, 1e3 * pred_hot, 1e3 * pred, 1e3 * measured, err_hot, err);
        rows.push_back({{"architecture", a.name}, {"precision", as.name}, {"working_set_bytes", ws}, {"rest_seconds", rest},
                        {"linear_seconds_hot", lin_hot}, {"linear_seconds_streamed", lin}, {"predicted_seconds_hot", pred_hot},
                        {"predicted_seconds_streamed", pred}, {"measured_seconds", measured}, {"error_hot", err_hot},
                        {"error_streamed", err}});
        pts.x.push_back(1e3 * measured);
        pts.y.push_back(1e3 * pred);
        max_ms = std::max({max_ms, 1e3 * measured, 1e3 * pred});
        std::printf("%s, %s: predicted %.3f ms, measured %.3f ms (%+.1f%%)\n", a.name.c_str(), as.name.c_str(), 1e3 * pred,
                    1e3 * measured, 100 * err);
      }
      ch.lines.push_back(pts);
    }
    report::series diag;
    diag.label = "predicted = measured";
    diag.x = {0, max_ms};
    diag.y = {0, max_ms};
    ch.lines.push_back(diag);
    md += report::format("\nmean |error| %.1f%% streamed, %.1f%% hot, over %d models; cpu: %s; threads %d\n", 100 * abs_err / n,
                         100 * abs_err_hot / n, n, cpu.c_str(), threads);
    std::printf("\n%s", md.c_str());
    namespace fs = std::filesystem;
    fs::create_directories(out);
    write_text_atomic((fs::path(out) / "latency_table.json").string(), table.to_json().dump(1) + "\n");
    write_text_atomic((fs::path(out) / "latency_model.md").string(), md);
    write_text_atomic((fs::path(out) / "latency_model.csv").string(), csv);
    write_text_atomic((fs::path(out) / "latency_model.json").string(),
                      nlohmann::ordered_json{{"cpu", cpu}, {"threads", threads}, {"rows", rows}}.dump(1) + "\n");
    report::write_png(ch, fs::path(out) / "latency_model.png");
    std::printf("latency_model: wrote %s/{latency_table.json,latency_model.md,.csv,.json,.png}\n", out.c_str());
    return 0;
  } catch (const lwcl::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
