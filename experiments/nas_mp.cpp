// nas_mp: the joint search over width x weight bits x activation bits against width-then-quantise, at
// several latency targets and seeds, on a teacher lwcl trained.
//
// The search is the library's (distill/supernet_search.hpp over search/supernet.hpp): every layer a
// weight-entangled supernet searched on its own from the teacher's boundary features, its expected linear
// latency from a table measured here (search/space_latency.hpp) pulled under r times the f32 teacher
// layer's (--latency-loss two_sided also pulls a layer under its target back up); the most probable
// candidate then fixed and trained --finetune steps more. The chosen subnet is exported physically
// smaller with its chosen linears GPTQ-quantised (group 32), and scored by held-out perplexity (8-bit
// sites quantised per token at inference) and by the measured time of a decoding step with the packed
// kernels.
//
// Methods: `joint` searches everything; `width_int8` / `width_int4` search the widths alone with every
// linear's latency taken at the bits it will be quantised to (a bits-aware width search, the strongest
// form of width-then-quantise), then quantise every linear to those bits. Writes table.md, results.csv,
// results.json, latency_table.json and pareto.png into --out.
#include <CLI/CLI.hpp>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/fs.hpp"
#include "lwcl/core/rng.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/data/loader.hpp"
#include "lwcl/data/shards.hpp"
#include "lwcl/distill/supernet_search.hpp"
#include "lwcl/eval/held_out.hpp"
#include "lwcl/model/checkpoint/hf.hpp"
#include "lwcl/model/host_params.hpp"
#include "lwcl/model/layer_outputs.hpp"
#include "lwcl/policies/quantiser/gptq.hpp"
#include "lwcl/prune/surgery.hpp"
#include "lwcl/quant/decode.hpp"
#include "lwcl/quant/latency.hpp"
#include "lwcl/quant/model.hpp"
#include "lwcl/report/format.hpp"
#include "lwcl/report/plot.hpp"
#include "lwcl/report/stats.hpp"
#include "lwcl/search/space_latency.hpp"
#include "lwcl/search/supernet.hpp"

#include "host_instances.hpp"
#include "lwcl/core/program.hpp"
#include "studies/cli.hpp"
#include "studies/validators.hpp"

extern "C" void openblas_set_num_threads(int);

using namespace lwcl;

namespace {

using net_t = model::transformer<backend::cpu>;
constexpr index_t quant_group = 32;

using studies::split_list;
template <class T>
std::vector<T> number_list(const std::string& s, const char* what) {
  std::vector<T> v;
  for (const auto& x : split_list(s)) {
    try {
      v.push_back(static_cast<T>(std::stod(x)));
    } catch (const std::exception&) {
      fail("nas_mp: ", what, " '", x, "' is not a number");
    }
  }
  check(!v.empty(), "nas_mp: ", what, " lists nothing");
  return v;
}


// Perplexity over a held-out sample through infer_logits, with `hook` on the blocks' linear inputs (the
// exported model's 8-bit activation sites; nullptr: none).
double hooked_perplexity(net_t& net, const eval::held_out_sample& s, model::linear_input_hook* hook) {
  const index_t V = net.config().vocab;
  net.set_infer_hook(hook);
  double nll = 0;
  long count = 0;
  std::vector<float> logits;
  for (std::size_t k = 0; k < s.windows.size(); ++k) {
    const auto& w = s.windows[k];
    const auto len = static_cast<index_t>(w.size()) - 1;
    std::vector<std::int32_t> ids(w.begin(), w.begin() + len);
    logits.assign(static_cast<std::size_t>(len * V), 0.0f);
    net.infer_logits(tensor(ids.data(), dtype::i32, {1, len}), tensor(logits.data(), {1, len, V}));
    for (index_t t = 0; t < len; ++t) {
      const float* z = logits.data() + t * V;
      double mx = z[0];
      for (index_t v = 1; v < V; ++v) mx = std::max(mx, static_cast<double>(z[v]));
      double se = 0;
      for (index_t v = 0; v < V; ++v) se += std::exp(static_cast<double>(z[v]) - mx);
      nll += mx + std::log(se) - static_cast<double>(z[w[static_cast<std::size_t>(t + 1)]]);
      ++count;
    }
  }
  net.set_infer_hook(nullptr);
  const double ppl = std::exp(nll / static_cast<double>(count));
  check(std::isfinite(ppl), "nas_mp: non-finite perplexity on the ", s.split, " sample");
  return ppl;
}

struct run_result {
  std::shared_ptr<distill::exported_subnet> model;
  std::string method;
  double target = 0;
  int seed = 0;
  std::vector<search::layer_choice> choices;
  double predicted_linear_seconds = 0, teacher_linear_seconds = 0;
  double measured_seconds = 0;
  std::vector<double> ppl;  // per split
  double parameters = 0, linear_bytes = 0, bits_per_weight = 0, search_seconds = 0, export_seconds = 0;
  std::size_t search_resident_bytes = 0;
  double final_loss = 0;
};

// The command line.
struct settings {
  std::string model, data = "data/prepared", out, methods = "joint,width_int8,width_int4", targets = "0.3,0.45,0.6", kv, ffn,
                     splits = "validation,test", latency_loss = "hinge";
  int seeds = 3, first_seed = 0, steps = 150, finetune = 50, batches = 12, batch = 8, seq = 0, eval_tokens = 16384,
      calib_batches = 8, threads = 1, timing_rounds = 5;
  double lr = 3e-4, arch_lr = 0.05, lambda = 1.0, tau_start = 10.0, tau_end = 0.1;
};

void add_options(CLI::App& app, settings& st) {
  app.add_option("--model", st.model, "teacher checkpoint folder (config.json, model.safetensors)")->required();
  app.add_option("--data", st.data, "prepared data (train.bin for features and calibration; the --splits scored)");
  app.add_option("--out", st.out, "output folder (default runs/nas_mp_<model folder's parent>)");
  app.add_option("--methods", st.methods, "comma-separated: joint, width_int8, width_int4, width_f32");
  app.add_option("--targets", st.targets, "comma-separated latency targets, fractions of the f32 teacher's linear time");
  app.add_option("--kv", st.kv, "comma-separated KV-group candidates (default: every count from all down to half)");
  app.add_option("--ffn", st.ffn, "comma-separated FFN-width candidates (default: 1, 3/4, 1/2, 1/4 of the teacher's, "
                                    "multiples of 32)");
  app.add_option("--splits", st.splits, "comma-separated held-out splits scored");
  app.add_option("--seeds", st.seeds, "seeds of each (method, target): the feature batches and the Gumbel noise")
      ->check(studies::positive);
  app.add_option("--first-seed", st.first_seed, "the first seed")->check(studies::non_negative);
  app.add_option("--steps", st.steps, "search steps per layer")->check(studies::positive);
  app.add_option("--finetune", st.finetune, "steps per layer with the chosen candidate fixed")->check(studies::non_negative);
  app.add_option("--batches", st.batches, "cached teacher feature batches (the steps cycle through them)")->check(studies::positive);
  app.add_option("--batch", st.batch, "sequences per batch")->check(studies::positive);
  app.add_option("--seq", st.seq, "tokens per sequence (default: the model's max_seq)")->check(studies::non_negative);
  app.add_option("--calib-batches", st.calib_batches, "GPTQ calibration batches of the export")->check(studies::positive);
  app.add_option("--eval-tokens", st.eval_tokens, "predicted tokens of each held-out sample")->check(studies::positive);
  app.add_option("--lr", st.lr, "AdamW learning rate of the layer weights")->check(studies::positive);
  app.add_option("--arch-lr", st.arch_lr, "Adam learning rate of the architecture logits")->check(studies::positive);
  app.add_option("--lambda", st.lambda, "weight of the latency term")->check(studies::non_negative);
  app.add_option("--latency-loss", st.latency_loss, "hinge: lambda * max(0, log(E / target)); two_sided: lambda * |log(E / target)|")
      ->check(CLI::IsMember({"hinge", "two_sided"}));
  app.add_option("--tau-start", st.tau_start, "Gumbel-softmax temperature at the first step")->check(studies::positive);
  app.add_option("--tau-end", st.tau_end, "temperature at the last search step (annealed geometrically)")->check(studies::positive);
  app.add_option("--timing-rounds", st.timing_rounds, "rounds of the decoding-step timing (each times every model; the median "
                                                  "is reported)")->check(studies::positive);
  app.add_option("--threads", st.threads, "threads of the training, the latency table and the decoding measurements")
      ->check(studies::positive);
}

// What every run of the study shares: the teacher (its FFN channels in importance order), the search
// space, the held-out samples, the training shard and the latency table.
struct study {
  const settings& st;
  backend::cpu be;
  model::model_config cfg;
  std::unique_ptr<net_t> teacher;
  std::vector<double> teacher_params;
  index_t T = 0, decode_prompt = 0, decode_steps = 0;
  std::string cpu, out;
  search::supernet_space space;
  std::vector<double> targets;
  std::vector<std::string> methods;
  std::vector<eval::held_out_sample> samples;
  std::unique_ptr<data::shard> train_shard;
  std::unique_ptr<search::space_latency> table;
  search::linear_latency lat;
  std::vector<double> teacher_layer_seconds;
  double teacher_linear = 0;

  explicit study(const settings& s) : st(s) {
    namespace fs = std::filesystem;
    cpu = quant::host_cpu_line();
    cfg = checkpoint::read_hf_config(st.model);
    check(!cfg.traits().post_norm, "nas_mp: the supernet searches pre-norm decoders (gpt2, llama, qwen2); ", st.model,
          " is ", model::family_name(cfg.fam));
    teacher = std::make_unique<net_t>(be, cfg, dtype::f32);
    checkpoint::load_hf_weights(*teacher, st.model);
    T = st.seq ? st.seq : cfg.max_seq;
    // A decoding step is timed after a prompt of 16 tokens over 32 steps (fewer where max_seq is short).
    decode_prompt = std::min<index_t>(16, std::max<index_t>(1, cfg.max_seq / 4));
    decode_steps = std::min<index_t>(32, cfg.max_seq - decode_prompt);
    out = !st.out.empty() ? st.out
                          : "runs/nas_mp_" + fs::path(st.model).lexically_normal().parent_path().filename().string();
    fs::create_directories(out);

    // FFN channels in importance order, every layer (the same function: checked by perplexity).
    {
      const auto h = model::host_params(*teacher);
      std::vector<float> f(h.begin(), h.end());
      for (index_t l = 0; l < cfg.n_layers(); ++l) search::reorder_ffn(cfg, teacher->layout(), f, l);
      model::set_host_params(*teacher, std::vector<double>(f.begin(), f.end()));
    }
    teacher_params = model::host_params(*teacher);

    // The search space: by default every KV-group count from all down to half, and FFN widths of 1, 3/4,
    // 1/2 and 1/4 of the teacher's in multiples of the quantisation group.
    space.group = quant_group;
    const auto& L0 = cfg.layers[0];
    if (st.kv.empty()) {
      for (index_t k = L0.n_kv_heads; k >= std::max<index_t>(1, (L0.n_kv_heads + 1) / 2); --k) space.kv_groups.push_back(k);
    } else {
      space.kv_groups = number_list<index_t>(st.kv, "--kv");
    }
    if (st.ffn.empty()) {
      for (int q = 4; q >= 1; --q) space.ffn.push_back(std::max<index_t>(quant_group, L0.ffn * q / 4 / quant_group * quant_group));
    } else {
      space.ffn = number_list<index_t>(st.ffn, "--ffn");
    }
    targets = number_list<double>(st.targets, "--targets");
    for (double r : targets) check(r > 0 && r <= 1.0, "nas_mp: latency target ", r, " (expected a fraction in (0, 1])");
    methods = split_list(st.methods);
    for (const auto& m : methods)
      check(m == "joint" || m == "width_int8" || m == "width_int4" || m == "width_f32", "nas_mp: method '", m,
            "' (expected joint, width_int8, width_int4 or width_f32)");
    for (const auto& m : methods) (void)space_of(m);

    for (const auto& sp : split_list(st.splits)) samples.push_back(eval::held_out_split(st.data, sp, T, st.eval_tokens));
    check(!samples.empty(), "nas_mp: no held-out split to score (--splits)");
    train_shard = std::make_unique<data::shard>((fs::path(st.data) / "train.bin").string());

    std::printf("nas_mp: %s (%s, %lld layers, width %lld, %lld parameters); cpu: %s; threads %d\n", st.model.c_str(),
                std::string(model::family_name(cfg.fam)).c_str(), static_cast<long long>(cfg.n_layers()),
                static_cast<long long>(cfg.d_model), static_cast<long long>(teacher->num_parameters()), cpu.c_str(),
                st.threads);
    std::printf("space per layer: KV groups {%s} x FFN {%s}; joint: weight bits {4,8,32} per linear (g%lld, sym) x "
                "activation bits {8,32} per site\n",
                kv_text().c_str(), ffn_text().c_str(), static_cast<long long>(quant_group));

    // The latency table: every candidate shape x weight bits x activation bits, one token, streamed.
    const timer clock;
    table = std::make_unique<search::space_latency>(search::measure_space_latency(cfg, space, st.threads));
    std::printf("latency table: %zu measurements in %.1f s\n", table->table.size(), clock.seconds());
    write_text_atomic((fs::path(out) / "latency_table.json").string(), table->table.to_json().dump(1) + "\n");
    lat = table->lookup();
    teacher_layer_seconds = table->f32_layer_seconds();
    for (double t : teacher_layer_seconds) teacher_linear += t;
  }

  std::string kv_text() const {
    std::string t;
    for (auto k : space.kv_groups) t += (t.empty() ? "" : ",") + std::to_string(k);
    return t;
  }
  std::string ffn_text() const {
    std::string t;
    for (auto f : space.ffn) t += (t.empty() ? "" : ",") + std::to_string(f);
    return t;
  }

  // A method's space: joint searches every bit width; width_<bits> the widths alone at those bits.
  search::supernet_space space_of(const std::string& m) const {
    auto s = space;
    if (m == "joint") {
      s.weight_bits = {4, 8, 32};
      s.act_bits = {8, 32};
    } else {
      s.weight_bits = {m == "width_int8" ? 8 : m == "width_int4" ? 4 : 32};
      s.act_bits = {32};
    }
    s.validate(cfg);
    return s;
  }

  // The first n batches of the training shard in the order `seed` draws them.
  std::vector<std::vector<std::int32_t>> train_batches(std::uint64_t seed, int n) const {
    return data::batch_loader(*train_shard, st.batch, T, seed).first_batches(n);
  }

  // A reference point: the teacher at f32 (reordered: the same perplexity), or GPTQ at `wbits` throughout.
  run_result reference(const std::string& name, int wbits) {
    run_result r;
    r.method = name;
    r.teacher_linear_seconds = teacher_linear;
    r.model = std::make_shared<distill::exported_subnet>();
    r.model->net = std::make_unique<net_t>(be, cfg, dtype::f32);
    net_t& net = *r.model->net;
    model::set_host_params(net, teacher_params);
    auto& qm = r.model->qm;
    if (wbits < 32) {
      quant::weight_format f;
      f.bits = wbits;
      f.group = quant_group;
      qm = quant::quantize_model(net, policies::quantisers::gptq{}, f, train_batches(0x9a5c0000ULL, st.calib_batches),
                                 st.batch, T, false);
      for (const auto& q : qm.layers) r.model->names.push_back(q.name);
    }
    for (const auto& s : samples) r.ppl.push_back(hooked_perplexity(net, s, nullptr));
    for (index_t l = 0; l < cfg.n_layers(); ++l)
      for (const auto& [n, rows, cols] : quant::block_linears(cfg, l)) r.predicted_linear_seconds += lat(rows, cols, wbits, 32);
    r.parameters = static_cast<double>(net.num_parameters());
    r.linear_bytes = static_cast<double>(table->stream_bytes(wbits));
    r.bits_per_weight =
        wbits < 32 ? 32.0 * static_cast<double>(qm.packed_bytes()) / static_cast<double>(qm.replaced_f32_bytes()) : 32;
    std::printf("%s: %s ppl %.3f (linears predicted %.3f ms)\n", name.c_str(), samples[0].split.c_str(), r.ppl[0],
                1e3 * r.predicted_linear_seconds);
    return r;
  }

  // One search (distill::search_supernet), its export, and its held-out perplexities.
  run_result search(const std::string& method, double target, int seed) {
    run_result res;
    res.method = method;
    res.target = target;
    res.seed = seed;
    res.teacher_linear_seconds = teacher_linear;
    distill::supernet_search_options so;
    so.steps = st.steps;
    so.finetune = st.finetune;
    so.lr = st.lr;
    so.arch_lr = st.arch_lr;
    so.lambda = st.lambda;
    so.two_sided = st.latency_loss == "two_sided";
    so.tau_start = st.tau_start;
    so.tau_end = st.tau_end;
    so.noise_seed = 0x6a5bULL + static_cast<std::uint64_t>(seed);
    so.label = report::format("%s target %.2f seed %d", method.c_str(), target, seed);
    std::vector<double> layer_targets;
    for (double t : teacher_layer_seconds) layer_targets.push_back(target * t);
    const auto found = distill::search_supernet(be, *teacher, space_of(method),
                                                train_batches(0x5eed0000ULL + static_cast<std::uint64_t>(seed), st.batches),
                                                st.batch, T, lat, layer_targets, so);
    res.choices = found.choices;
    res.predicted_linear_seconds = found.predicted_linear_seconds;
    res.final_loss = found.final_loss;
    res.search_resident_bytes = found.resident_bytes;
    res.search_seconds = found.seconds;

    const timer te;
    res.model = std::make_shared<distill::exported_subnet>(distill::export_subnet(
        be, cfg, found, train_batches(0x9a5c0000ULL + static_cast<std::uint64_t>(seed), st.calib_batches), st.batch, T,
        quant_group));
    auto& hook = res.model->hook;
    for (const auto& s : samples)
      res.ppl.push_back(hooked_perplexity(*res.model->net, s, hook.sites.empty() ? nullptr : &hook));
    res.parameters = static_cast<double>(res.model->net->num_parameters());
    res.linear_bytes = res.model->linear_bytes;
    res.bits_per_weight = res.model->bits_per_weight;
    res.export_seconds = te.seconds();
    std::printf("%s target %.2f seed %d: %s ppl %.3f (linears predicted %.3f ms, teacher %.3f ms), "
                "%.2f bits/weight, search %.0f s\n",
                method.c_str(), target, seed, samples[0].split.c_str(), res.ppl[0], 1e3 * res.predicted_linear_seconds,
                1e3 * teacher_linear, res.bits_per_weight, res.search_seconds);
    return res;
  }
};

// Times a decoding step of every model, after every search: each round times every model once (in turn,
// so that a disturbance of the machine falls on all of them alike); a model's figure is its median over
// the rounds.
void time_models(const study& sd, const std::vector<run_result*>& all) {
  // 8-bit sites: packed linears run the integer kernel, f32 ones round their input first (as the
  // perplexity's hook does).
  std::vector<std::unique_ptr<quant::packed_linears>> packed;
  for (auto* r : all)
    packed.push_back(std::make_unique<quant::packed_linears>(r->model->names, r->model->qm.weights, r->model->act8));
  std::vector<std::vector<double>> t(all.size());
  const timer tt;
  for (int round = 0; round < sd.st.timing_rounds; ++round) {
    for (std::size_t i = 0; i < all.size(); ++i) {
      const distill::exported_subnet& e = *all[i]->model;
      t[i].push_back(quant::measure_decode_step(*e.net, sd.decode_prompt, sd.decode_steps, [&](model::kv_decoder<backend::cpu>& d) {
        if (!e.names.empty() || !e.act8.empty()) packed[i]->attach(d, *e.net);
      }, 3));
    }
    std::printf("timing: round %d of %d over %zu models (%.0f s)\n", round + 1, sd.st.timing_rounds, all.size(), tt.seconds());
  }
  for (std::size_t i = 0; i < all.size(); ++i) {
    std::sort(t[i].begin(), t[i].end());
    all[i]->measured_seconds = t[i][t[i].size() / 2];
    std::printf("%s%s: decoding step %.3f ms (linears predicted %.3f ms)\n", all[i]->method.c_str(),
                all[i]->target > 0 ? report::format(" target %.2f seed %d", all[i]->target, all[i]->seed).c_str() : "",
                1e3 * all[i]->measured_seconds, 1e3 * all[i]->predicted_linear_seconds);
  }
}

// table.md (one row per method x target: mean +- sd over seeds), results.csv and results.json (every
// run), pareto.png.
void write_results(const study& sd, const std::vector<run_result>& refs, const std::vector<run_result>& runs) {
  namespace fs = std::filesystem;
  const settings& st = sd.st;
  const auto& cfg = sd.cfg;
  const auto& samples = sd.samples;
  const auto& method_list = sd.methods;
  const auto& targets = sd.targets;
  const std::string &model_dir = st.model, &cpu = sd.cpu, &latency_loss = st.latency_loss, &out = sd.out;
  const int threads = st.threads, steps = st.steps, finetune = st.finetune, batches = st.batches, batch = st.batch,
            timing_rounds = st.timing_rounds, seeds = st.seeds, first_seed = st.first_seed;
  const double lr = st.lr, arch_lr = st.arch_lr, lambda = st.lambda, tau_start = st.tau_start, tau_end = st.tau_end;
  const index_t T = sd.T, L = cfg.n_layers(), C = cfg.d_model, decode_prompt = sd.decode_prompt,
                decode_steps = sd.decode_steps;
  const std::string kv_s = sd.kv_text(), ffn_s = sd.ffn_text();
  std::string md = "# Joint width x mixed-precision search on " + model_dir + "\n\n";
  md += report::format(
      "%s, %lld layers, width %lld. cpu: %s; threads %d. Space per layer: KV groups {%s} x FFN {%s}; joint adds weight bits "
      "{4,8,32} per linear (g%lld, sym, GPTQ at export) x activation bits {8,32} per site (per token). %d search + %d fixed "
      "steps per layer on %d cached teacher batches of %d x %lld tokens; lr %.3g, arch lr %.3g, lambda %.3g (%s), tau %.3g -> %.3g. "
      "Latency: measured decoding step (prompt %lld, %lld steps; median over %d rounds that each time every model in turn, "
      "each round the median of 3 runs); the target is a fraction of the f32 teacher's "
      "linear time from the table. Seeds: %d.\n\n",
      std::string(model::family_name(cfg.fam)).c_str(), static_cast<long long>(L), static_cast<long long>(C), cpu.c_str(),
      threads, kv_s.c_str(), ffn_s.c_str(), static_cast<long long>(quant_group), steps, finetune, batches, batch,
      static_cast<long long>(T), lr, arch_lr, lambda, latency_loss.c_str(), tau_start, tau_end, static_cast<long long>(decode_prompt),
      static_cast<long long>(decode_steps), timing_rounds, seeds);
  md += "| method | target | predicted linears (ms) | measured step (ms) | parameters | bits/weight |";
  for (const auto& s : samples) md += " " + s.split + " ppl |";
  md += " search (s) | search memory |\n|---|---|---|---|---|---|";
  for (std::size_t k = 0; k < samples.size(); ++k) md += "---|";
  md += "---|---|\n";
  for (const auto& r : refs) {
    md += report::format("| %s | - | %.3f | %.3f | %.0f | %.2f |", r.method.c_str(), 1e3 * r.predicted_linear_seconds,
                         1e3 * r.measured_seconds, r.parameters, r.bits_per_weight);
    for (double p : r.ppl) md += report::format(" %.3f |", p);
    md += " - | - |\n";
  }
  std::string csv = "method,target,seed,predicted_linear_ms,measured_step_ms,parameters,linear_bytes,bits_per_weight,";
  for (const auto& s : samples) csv += s.split + "_ppl,";
  csv += "search_seconds,search_resident_bytes,final_loss\n";
  nlohmann::ordered_json js = nlohmann::ordered_json::array();
  report::chart ch;
  ch.title = "joint search vs width-then-quantise: " + fs::path(model_dir).lexically_normal().parent_path().filename().string();
  ch.x_label = "measured decoding step (ms, 1 thread)";
  ch.y_label = samples[0].split + " perplexity";
  for (const auto& m : method_list) {
    report::series pts;
    pts.label = m;
    pts.points = true;
    for (double tg : targets) {
      std::vector<double> pred, meas, par, bpw, srch, mem;
      std::vector<std::vector<double>> ppl(samples.size());
      for (const auto& r : runs)
        if (r.method == m && r.target == tg) {
          pred.push_back(1e3 * r.predicted_linear_seconds);
          meas.push_back(1e3 * r.measured_seconds);
          par.push_back(r.parameters);
          bpw.push_back(r.bits_per_weight);
          srch.push_back(r.search_seconds);
          mem.push_back(static_cast<double>(r.search_resident_bytes));
          for (std::size_t k = 0; k < samples.size(); ++k) ppl[k].push_back(r.ppl[k]);
          pts.x.push_back(1e3 * r.measured_seconds);
          pts.y.push_back(r.ppl[0]);
        }
      md += report::format("| %s | %.2f | %s | %s | %s | %s |", m.c_str(), tg, report::cell(report::summarise(pred), "%.3f").c_str(),
                           report::cell(report::summarise(meas), "%.3f").c_str(), report::cell(report::summarise(par), "%.0f").c_str(), report::cell(report::summarise(bpw), "%.2f").c_str());
      for (const auto& p : ppl) md += report::format(" %s |", report::cell(report::summarise(p), "%.3f").c_str());
      md += report::format(" %s | %s |\n", report::cell(report::summarise(srch), "%.0f").c_str(), report::human_bytes(report::summarise(mem).mean).c_str());
    }
    ch.lines.push_back(pts);
  }
  for (const auto& r : refs) {
    report::series p;
    p.label = r.method;
    p.points = true;
    p.x = {1e3 * r.measured_seconds};
    p.y = {r.ppl[0]};
    ch.lines.push_back(p);
  }
  md += "\nChoices (seed " + std::to_string(first_seed) + "), per layer:\n\n";
  for (const auto& r : runs) {
    if (r.seed != first_seed) continue;
    md += report::format("- %s, target %.2f:", r.method.c_str(), r.target);
    for (std::size_t l = 0; l < r.choices.size(); ++l) md += report::format(" [%zu] %s;", l, distill::describe_choice(r.choices[l]).c_str());
    md += "\n";
  }
  for (const auto& r : runs) {
    csv += report::format("%s,%.3f,%d,%.6f,%.6f,%.0f,%.0f,%.4f,", r.method.c_str(), r.target, r.seed, 1e3 * r.predicted_linear_seconds,
                          1e3 * r.measured_seconds, r.parameters, r.linear_bytes, r.bits_per_weight);
    for (double p : r.ppl) csv += report::format("%.6f,", p);
    csv += report::format("%.1f,%zu,%.6e\n", r.search_seconds, r.search_resident_bytes, r.final_loss);
    nlohmann::ordered_json ch_j = nlohmann::ordered_json::array();
    for (const auto& c : r.choices) {
      nlohmann::ordered_json wb = nlohmann::ordered_json::object(), ab = nlohmann::ordered_json::object();
      for (const auto& [n, b] : c.weight_bits) wb[n] = b;
      for (const auto& [s, b] : c.act_bits) ab[std::string(search::site_name(s))] = b;
      ch_j.push_back({{"kv_groups", c.kv_groups}, {"ffn", c.ffn}, {"weight_bits", wb}, {"act_bits", ab}});
    }
    js.push_back({{"method", r.method}, {"target", r.target}, {"seed", r.seed}, {"predicted_linear_seconds", r.predicted_linear_seconds},
                  {"measured_step_seconds", r.measured_seconds}, {"parameters", r.parameters}, {"linear_bytes", r.linear_bytes},
                  {"bits_per_weight", r.bits_per_weight}, {"ppl", r.ppl}, {"search_seconds", r.search_seconds},
                  {"search_resident_bytes", r.search_resident_bytes}, {"final_loss", r.final_loss}, {"choices", ch_j}});
  }
  nlohmann::ordered_json rj = nlohmann::ordered_json::array();
  for (const auto& r : refs)
    rj.push_back({{"method", r.method}, {"predicted_linear_seconds", r.predicted_linear_seconds},
                  {"measured_step_seconds", r.measured_seconds}, {"parameters", r.parameters}, {"ppl", r.ppl},
                  {"bits_per_weight", r.bits_per_weight}});
  std::printf("\n%s", md.c_str());
  const fs::path dir(out);
  write_text_atomic((dir / "table.md").string(), md);
  write_text_atomic((dir / "results.csv").string(), csv);
  write_text_atomic((dir / "results.json").string(),
                    nlohmann::ordered_json({{"model", model_dir}, {"cpu", cpu}, {"threads", threads}, {"latency_loss", latency_loss}, {"lambda", lambda}, {"references", rj}, {"runs", js}})
                            .dump(1) +
                        "\n");
  report::write_png(ch, dir / "pareto.png");
  std::printf("nas_mp: wrote %s/{table.md,results.csv,results.json,latency_table.json,pareto.png}\n", out.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lwcl nas_mp: joint width x weight-bits x activation-bits search against width-then-quantise"};
  settings st;
  add_options(app, st);
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  return lwcl::guard_main([&] {
    omp_set_num_threads(st.threads);
    openblas_set_num_threads(st.threads);
    study sd(st);

    // Reference points: the teacher at f32 (its perplexity also through eval::perplexity, which must agree
    // with the hooked path's), uniform GPTQ int8 and int4.
    std::vector<run_result> refs;
    refs.push_back(sd.reference("teacher f32", 32));
    const double direct = eval::perplexity(*sd.teacher, sd.samples[0]).perplexity();
    check(std::abs(direct - refs[0].ppl[0]) <= 1e-3 * direct, "nas_mp: the perplexity through infer_logits (",
          refs[0].ppl[0], ") differs from eval::perplexity's (", direct, ")");
    refs.push_back(sd.reference("GPTQ int8 g32", 8));
    refs.push_back(sd.reference("GPTQ int4 g32", 4));

    // Every method at every target and seed, then every model timed, then the tables.
    std::vector<run_result> runs;
    for (double r : sd.targets)
      for (const auto& m : sd.methods)
        for (int s = 0; s < st.seeds; ++s) runs.push_back(sd.search(m, r, st.first_seed + s));
    std::vector<run_result*> all;
    for (auto& r : refs) all.push_back(&r);
    for (auto& r : runs) all.push_back(&r);
    time_models(sd, all);
    write_results(sd, refs, runs);
    return 0;
  });
}
