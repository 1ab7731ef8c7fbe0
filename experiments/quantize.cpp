// quantize: weight-only quantisation of a checkpoint's linear layers (quant/model.hpp), every method x
// format of a sweep, each scored by held-out perplexity on the validation and test samples against the
// f32 model. Round-to-nearest needs no data and runs once; GPTQ (and GPTQ with act-order) runs once per
// calibration seed (the seed picks the calibration batches from the training split), reported as
// mean +- sample sd. Writes table.md, results.csv, results.json and perplexity.png into --out; with --save,
// one setting's model as a packed folder and as a dequantised Hugging Face folder.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/fs.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/data/loader.hpp"
#include "lwcl/data/shards.hpp"
#include "lwcl/eval/held_out.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/policies/quantiser/gptq.hpp"
#include "lwcl/policies/quantiser/rtn.hpp"
#include "lwcl/quant/checkpoint.hpp"
#include "lwcl/quant/model.hpp"
#include "lwcl/report/format.hpp"
#include "lwcl/report/plot.hpp"
#include "lwcl/report/stats.hpp"

#include "host_instances.hpp"
#include "lwcl/core/program.hpp"
#include "studies/cli.hpp"
#include "studies/validators.hpp"

using namespace lwcl;
namespace qz = lwcl::policies::quantisers;

namespace {

using net_t = model::transformer<backend::cpu>;


struct row {
  std::string method;  // f32, rtn, gptq, gptq_act
  quant::weight_format format;
  bool quantised = false;
  double bits_per_weight = 32;  // of the quantised linears, scales and zero points included
  double model_bytes = 0;
  std::vector<std::vector<double>> ppl;  // per split, per seed
  std::vector<double> error, seconds;
};

using studies::split_list;

// The command line.
struct settings {
  std::string model, data = "data/prepared", out, methods = "rtn,gptq,gptq_act", bits = "8,4", groups = "0,64,32",
                     schemes = "sym", scale_type = "f16", splits = "validation,test", save;
  int seeds = 3, first_seed = 0, calib_batches = 16, batch = 8, seq = 0, eval_tokens = 32768, block = 128;
  double damp = 0.01;
};

void add_options(CLI::App& app, settings& st) {
  app.add_option("--model", st.model, "checkpoint folder (config.json, model.safetensors, tokenizer)")->required();
  app.add_option("--data", st.data, "prepared data (train.bin for calibration; the --splits scored)");
  app.add_option("--splits", st.splits, "comma-separated held-out splits scored (their .bin files in --data)");
  app.add_option("--save", st.save, "with one method and one format: write the first seed's model here, packed (packed/, "
                                 "quant/checkpoint.hpp) and dequantised as a Hugging Face folder (hf/)");
  app.add_option("--out", st.out, "output folder (default runs/quantize_<model folder's parent>)");
  app.add_option("--methods", st.methods, "comma-separated: rtn, gptq, gptq_act (GPTQ with act-order)");
  app.add_option("--bits", st.bits, "comma-separated weight bits: 8, 4");
  app.add_option("--groups", st.groups, "comma-separated group sizes (0: per output channel; else a multiple of 32 "
                                          "dividing every layer's input width)");
  app.add_option("--schemes", st.schemes, "comma-separated: sym, asym");
  app.add_option("--scale-type", st.scale_type, "how scales are stored: f16 or bf16")->check(CLI::IsMember({"f16", "bf16"}));
  app.add_option("--seeds", st.seeds, "calibration seeds of each GPTQ setting")->check(studies::positive);
  app.add_option("--first-seed", st.first_seed, "the first calibration seed (seeds --first-seed, --first-seed + 1, ...)")
      ->check(studies::non_negative);
  app.add_option("--calib-batches", st.calib_batches, "calibration batches from the training split")->check(studies::positive);
  app.add_option("--batch", st.batch, "sequences per calibration batch")->check(studies::positive);
  app.add_option("--seq", st.seq, "tokens per sequence (default: the model's max_seq)")->check(studies::non_negative);
  app.add_option("--eval-tokens", st.eval_tokens, "predicted tokens of each held-out sample")->check(studies::positive);
  app.add_option("--damp", st.damp, "GPTQ dampening, a fraction of mean(diag H)")->check(studies::within(0.0, 1.0));
  app.add_option("--block", st.block, "GPTQ lazy-batch width in columns")->check(studies::positive);
}

// The sweep: the model (reloaded at f32 before every run), its formats and methods, the held-out samples
// and the calibration batches of a seed.
struct quant_sweep {
  const settings& st;
  backend::cpu be;
  model::model_config cfg;
  std::unique_ptr<net_t> net;
  index_t T = 0;
  std::string out, protocols;
  std::vector<quant::weight_format> formats;
  std::vector<std::string> methods;
  std::vector<eval::held_out_sample> samples;
  std::unique_ptr<data::shard> train_shard;
  double f32_bytes = 0;

  explicit quant_sweep(const settings& s) : st(s) {
    namespace fs = std::filesystem;
    cfg = checkpoint::read_hf_config(st.model);
    net = std::make_unique<net_t>(be, cfg, dtype::f32);
    checkpoint::load_hf_weights(*net, st.model);
    T = st.seq ? st.seq : cfg.max_seq;
    out = !st.out.empty() ? st.out
                          : "runs/quantize_" + fs::path(st.model).lexically_normal().parent_path().filename().string();
    fs::create_directories(out);
    for (const auto& b : split_list(st.bits))
      for (const auto& g : split_list(st.groups))
        for (const auto& sc : split_list(st.schemes)) {
          check(sc == "sym" || sc == "asym", "quantize: scheme '", sc, "' (expected sym or asym)");
          quant::weight_format f;
          f.bits = std::stoi(b);
          f.group = std::stoll(g);
          f.sym = sc == "sym" ? quant::symmetry::symmetric : quant::symmetry::asymmetric;
          f.scale_type = st.scale_type == "bf16" ? dtype::bf16 : dtype::f16;
          formats.push_back(f);
        }
    methods = split_list(st.methods);
    for (const auto& m : methods)
      check(m == "rtn" || m == "gptq" || m == "gptq_act", "quantize: method '", m, "' (expected rtn, gptq or gptq_act)");
    check(!formats.empty() && !methods.empty(), "quantize: nothing to run (no formats or no methods)");
    for (const auto& sp : split_list(st.splits)) samples.push_back(eval::held_out_split(st.data, sp, T, st.eval_tokens));
    check(!samples.empty(), "quantize: no held-out split to score (--splits)");
    check(st.save.empty() || (formats.size() == 1 && methods.size() == 1), "quantize: --save writes one model; give one "
          "method and one format (", methods.size(), " methods and ", formats.size(), " formats given)");
    for (const auto& sm : samples) protocols += (protocols.empty() ? "" : "; ") + sm.protocol();
    train_shard = std::make_unique<data::shard>((fs::path(st.data) / "train.bin").string());
    f32_bytes = static_cast<double>(net->num_parameters()) * 4.0;
    std::printf("quantize: %s (%s, %lld layers, %lld parameters); calibration %d x %d x %lld tokens from train; "
                "held-out samples: %s\n",
                st.model.c_str(), std::string(model::family_name(cfg.fam)).c_str(), static_cast<long long>(cfg.n_layers()),
                static_cast<long long>(net->num_parameters()), st.calib_batches, st.batch, static_cast<long long>(T),
                protocols.c_str());
  }

  // The model's perplexity on every sample, appended to the row.
  void score(row& r) {
    r.ppl.resize(samples.size());
    for (std::size_t k = 0; k < samples.size(); ++k) r.ppl[k].push_back(eval::perplexity(*net, samples[k]).perplexity());
  }
  std::string scores(const row& r) const {
    std::string t;
    for (std::size_t k = 0; k < samples.size(); ++k)
      t += report::format("%s%s %.3f", k ? ", " : "", samples[k].split.c_str(), r.ppl[k].back());
    return t;
  }
  // The calibration batches of a seed, from the training split.
  std::vector<std::vector<std::int32_t>> calibration(int seed) const {
    return data::batch_loader(*train_shard, st.batch, T, 0x51ed2701ULL + static_cast<std::uint64_t>(seed))
        .first_batches(st.calib_batches);
  }

  row f32_row() {
    row r;
    r.method = "f32";
    r.model_bytes = f32_bytes;
    score(r);
    std::printf("f32: %s\n", scores(r).c_str());
    return r;
  }

  // One method at one format: once for rtn, once per calibration seed for the GPTQ methods; with --save,
  // the first seed's model written packed and as a dequantised Hugging Face folder.
  row run(const quant::weight_format& f, const std::string& m) {
    namespace fs = std::filesystem;
    row r;
    r.method = m;
    r.format = f;
    r.quantised = true;
    const int n = m == "rtn" ? 1 : st.seeds;
    for (int s = 0; s < n; ++s) {
      checkpoint::load_hf_weights(*net, st.model);  // every run starts from the f32 weights
      const auto calib = calibration(st.first_seed + s);
      quant::quantized_model qm;
      if (m == "rtn") {
        qm = quant::quantize_model(*net, qz::rtn{}, f, calib, st.batch, T);
      } else {
        qz::gptq g;
        g.options.damp = st.damp;
        g.options.block = st.block;
        g.options.act_order = m == "gptq_act";
        qm = quant::quantize_model(*net, g, f, calib, st.batch, T);
      }
      const double packed = static_cast<double>(qm.packed_bytes()), replaced = static_cast<double>(qm.replaced_f32_bytes());
      r.bits_per_weight = 32.0 * packed / replaced;
      r.model_bytes = f32_bytes - replaced + packed;
      score(r);
      r.error.push_back(qm.mean_relative_output_error());
      r.seconds.push_back(qm.seconds);
      std::printf("%s %s seed %d: %s, mean relative output error %.3e, %.1f s\n", m.c_str(), f.describe().c_str(),
                  st.first_seed + s, scores(r).c_str(), r.error.back(), qm.seconds);
      if (s == 0 && !st.save.empty()) {
        quant::save_packed(*net, qm, (fs::path(st.save) / "packed").string(), st.model);
        checkpoint::save_hf(*net, (fs::path(st.save) / "hf").string(), {std::nullopt, st.model});
        std::printf("quantize: wrote %s/packed (%s) and %s/hf (dequantised, f32)\n", st.save.c_str(),
                    report::human_bytes(static_cast<double>(fs::file_size(fs::path(st.save) / "packed" / quant::packed_file))).c_str(),
                    st.save.c_str());
      }
    }
    return r;
  }
};

// table.md, results.csv, results.json and perplexity.png (validation perplexity against bits per weight:
// one series per method, f32 as a level line).
void write_results(const quant_sweep& sw, const std::vector<row>& rows) {
  namespace fs = std::filesystem;
  const settings& st = sw.st;
  const auto& cfg = sw.cfg;
  const auto& samples = sw.samples;
  const auto& method_list = sw.methods;
  const auto& net = *sw.net;
  const std::string &model_dir = st.model, &protocols = sw.protocols, &out = sw.out;
  const int calib_batches = st.calib_batches, batch = st.batch, seeds = st.seeds, first_seed = st.first_seed,
            block = st.block;
  const double damp = st.damp;
  const index_t T = sw.T;
  std::string md = "# Weight-only quantisation of " + model_dir + "\n\n";
  md += report::format("%s, %lld layers, %lld parameters. Calibration: %d batches x %d x %lld tokens from train "
                       "(GPTQ: %d seeds, damp %.3g, block %d). Held-out: %s. Embeddings, norms, biases and the LM "
                       "head stay f32; bits/weight counts codes, scales and zero points of the quantised linears.\n\n",
                       std::string(model::family_name(cfg.fam)).c_str(), static_cast<long long>(cfg.n_layers()),
                       static_cast<long long>(net.num_parameters()), calib_batches, batch, static_cast<long long>(T), seeds,
                       damp, block, protocols.c_str());
  md += "| method | format | bits/weight | model size |";
  std::string csv = "method,format,bits,group,scheme,bits_per_weight,model_bytes,";
  for (const auto& sm : samples) {
    md += " " + sm.split + " ppl |";
    csv += sm.split + "_ppl," + sm.split + "_ppl_sd,";
  }
  md += " rel. output error | seconds | n |\n|---|---|---|---|";
  for (std::size_t k = 0; k < samples.size(); ++k) md += "---|";
  md += "---|---|---|\n";
  csv += "rel_output_error,seconds,n\n";
  nlohmann::ordered_json js = nlohmann::ordered_json::array();
  for (const auto& r : rows) {
    const report::summary e = report::summarise(r.error), sec = report::summarise(r.seconds);
    const std::string fmt = r.quantised ? r.format.describe() : "f32";
    md += report::format("| %s | %s | %.2f | %s |", r.method.c_str(), fmt.c_str(), r.bits_per_weight,
                         report::human_bytes(r.model_bytes).c_str());
    csv += report::format("%s,%s,%d,%lld,%s,%.4f,%.0f,", r.method.c_str(), fmt.c_str(), r.quantised ? r.format.bits : 32,
                          static_cast<long long>(r.quantised ? r.format.group : 0),
                          r.quantised ? std::string(quant::symmetry_name(r.format.sym)).c_str() : "", r.bits_per_weight,
                          r.model_bytes);
    nlohmann::ordered_json j = {{"method", r.method}, {"format", fmt}, {"bits_per_weight", r.bits_per_weight},
                                {"model_bytes", r.model_bytes}};
    for (std::size_t k = 0; k < samples.size(); ++k) {
      const report::summary v = report::summarise(r.ppl[k]);
      md += " " + report::cell(v) + " |";
      csv += report::format("%.6f,%.6f,", v.mean, v.sd);
      j[samples[k].split + "_ppl"] = r.ppl[k];
    }
    md += report::format(" %s | %s | %d |\n", r.quantised ? report::cell(e, "%.2e").c_str() : "", r.quantised ? report::cell(sec, "%.1f").c_str() : "",
                         static_cast<int>(r.ppl[0].size()));
    csv += report::format("%.6e,%.3f,%d\n", r.quantised ? e.mean : 0.0, r.quantised ? sec.mean : 0.0, static_cast<int>(r.ppl[0].size()));
    j["relative_output_error"] = r.error;
    j["seconds"] = r.seconds;
    js.push_back(j);
  }
  std::printf("\n%s", md.c_str());
  const fs::path dir(out);
  write_text_atomic((dir / "table.md").string(), md);
  write_text_atomic((dir / "results.csv").string(), csv);
  nlohmann::ordered_json doc = {{"model", model_dir}, {"family", model::family_name(cfg.fam)}, {"parameters", net.num_parameters()},
                                {"calibration", {{"batches", calib_batches}, {"batch", batch}, {"seq", T}, {"seeds", seeds}, {"first_seed", first_seed}}},
                                {"gptq", {{"damp", damp}, {"block", block}}},
                                {"protocols", protocols}, {"rows", js}};
  write_text_atomic((dir / "results.json").string(), doc.dump(1) + "\n");

  // Validation perplexity against bits per weight: one series per method, f32 as a level line.
  report::chart c;
  c.title = "weight-only quantisation: " + fs::path(model_dir).lexically_normal().parent_path().filename().string();
  c.x_label = "bits per weight (codes + scales)";
  c.y_label = samples[0].split + " perplexity";
  c.log_y = true;
  double x_lo = 1e9, x_hi = 0;
  for (const auto& r : rows)
    if (r.quantised) {
      x_lo = std::min(x_lo, r.bits_per_weight);
      x_hi = std::max(x_hi, r.bits_per_weight);
    }
  report::series f32;
  f32.label = "f32";
  f32.x = {x_lo, x_hi};
  f32.y = {rows[0].ppl[0][0], rows[0].ppl[0][0]};
  c.lines.push_back(f32);
  for (const auto& m : method_list) {
    report::series s;
    s.label = m;
    s.points = true;
    for (const auto& r : rows)
      if (r.method == m) {
        s.x.push_back(r.bits_per_weight);
        s.y.push_back(report::summarise(r.ppl[0]).mean);
      }
    c.lines.push_back(s);
  }
  report::write_png(c, dir / "perplexity.png");
  std::printf("quantize: wrote %s/{table.md,results.csv,results.json,perplexity.png}\n", out.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lwcl quantize: RTN and GPTQ weight quantisation of a checkpoint, scored by held-out perplexity"};
  settings st;
  add_options(app, st);
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  return lwcl::guard_main([&] {
    quant_sweep sw(st);
    std::vector<row> rows{sw.f32_row()};
    for (const auto& f : sw.formats)
      for (const auto& m : sw.methods) rows.push_back(sw.run(f, m));
    write_results(sw, rows);
    return 0;
  });
}
