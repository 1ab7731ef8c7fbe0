// nas_mp: the joint search over width x weight bits x activation bits (search/supernet.hpp) against
// width-then-quantise, at several latency targets and seeds, on a teacher lwcl trained.
//
// Every layer of the teacher becomes a weight-entangled supernet and is searched on its own, as a segment
// of the layer-wise pipeline: its input and target are the teacher's cached boundary features, so the
// search holds one layer's parameters, gradients, optimiser state and activations at a time. A search
// step draws a Gumbel-softmax sample (temperature annealed from --tau-start to --tau-end), trains the
// layer's master weights on the feature loss through the mixed weights and activations, and moves the
// architecture logits by the feature loss and by lambda * max(0, log(E / target)) (--latency-loss
// two_sided: lambda * |log(E / target)|, which also pulls a layer under its target back up), E the expected
// latency of the layer's linears from a lookup table measured here (quant::measure_linear, one thread,
// weights streamed from a working set the size of the teacher's linears in that format) and the target
// r times the f32 teacher layer's. The most probable candidate is then fixed and the layer trained
// --finetune steps more. The chosen subnet is exported physically smaller (prune::apply_plan) with its
// chosen linears GPTQ-quantised (group 32), and scored by held-out perplexity (8-bit sites quantised per
// token at inference) and by the measured time of a decoding step with the packed kernels.
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
#include "lwcl/distill/segment_trainer.hpp"
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

// The names of the linears of layer `l` that read `site`.
std::vector<std::string> site_linears(const model::model_config& cfg, index_t l, model::linear_site site) {
  std::vector<std::string> v;
  for (const auto& lin : search::supernet_linears(cfg))
    if (lin.site == site) v.push_back(model::layer_prefix(l) + lin.name);
  return v;
}

// An exported model kept for the timing phase: the (smaller) network with its dequantised weights, the
// packed weights of its quantised linears, its 8-bit activation sites, and (made once, before the
// timing) the packed linears a decoder runs them through.
struct exported {
  std::unique_ptr<model::transformer<backend::cpu>> net;
  quant::quantized_model qm;
  std::vector<std::string> names;
  std::set<std::string> act8;
  std::unique_ptr<quant::packed_linears> linears;
};

struct run_result {
  std::shared_ptr<exported> model;
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

std::string describe(const model::model_config& cfg, const search::layer_choice& c) {
  int w4 = 0, w8 = 0, w32 = 0, a8 = 0;
  for (const auto& [n, b] : c.weight_bits) (b == 4 ? w4 : b == 8 ? w8 : w32) += 1;
  for (const auto& [s, b] : c.act_bits) a8 += b == 8;
  (void)cfg;
  return report::format("kv %lld ffn %lld w4:%d w8:%d w32:%d a8:%d", static_cast<long long>(c.kv_groups),
                        static_cast<long long>(c.ffn), w4, w8, w32, a8);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lwcl nas_mp: joint width x weight-bits x activation-bits search against width-then-quantise"};
  std::string model_dir, data_dir = "data/prepared", out, methods = "joint,width_int8,width_int4", targets_list = "0.3,0.45,0.6",
                         kv_list, ffn_list, splits_list = "validation,test";
  int seeds = 3, first_seed = 0, steps = 150, finetune = 50, batches = 12, batch = 8, seq = 0, eval_tokens = 16384,
      calib_batches = 8, threads = 1, timing_rounds = 5;
  double lr = 3e-4, arch_lr = 0.05, lambda = 1.0, tau_start = 10.0, tau_end = 0.1;
  std::string latency_loss = "hinge";
  app.add_option("--model", model_dir, "teacher checkpoint folder (config.json, model.safetensors)")->required();
  app.add_option("--data", data_dir, "prepared data (train.bin for features and calibration; the --splits scored)");
  app.add_option("--out", out, "output folder (default runs/nas_mp_<model folder's parent>)");
  app.add_option("--methods", methods, "comma-separated: joint, width_int8, width_int4, width_f32");
  app.add_option("--targets", targets_list, "comma-separated latency targets, fractions of the f32 teacher's linear time");
  app.add_option("--kv", kv_list, "comma-separated KV-group candidates (default: every count from all down to half)");
  app.add_option("--ffn", ffn_list, "comma-separated FFN-width candidates (default: 1, 3/4, 1/2, 1/4 of the teacher's, "
                                    "multiples of 32)");
  app.add_option("--splits", splits_list, "comma-separated held-out splits scored");
  app.add_option("--seeds", seeds, "seeds of each (method, target): the feature batches and the Gumbel noise")
      ->check(studies::positive);
  app.add_option("--first-seed", first_seed, "the first seed")->check(studies::non_negative);
  app.add_option("--steps", steps, "search steps per layer")->check(studies::positive);
  app.add_option("--finetune", finetune, "steps per layer with the chosen candidate fixed")->check(studies::non_negative);
  app.add_option("--batches", batches, "cached teacher feature batches (the steps cycle through them)")->check(studies::positive);
  app.add_option("--batch", batch, "sequences per batch")->check(studies::positive);
  app.add_option("--seq", seq, "tokens per sequence (default: the model's max_seq)")->check(studies::non_negative);
  app.add_option("--calib-batches", calib_batches, "GPTQ calibration batches of the export")->check(studies::positive);
  app.add_option("--eval-tokens", eval_tokens, "predicted tokens of each held-out sample")->check(studies::positive);
  app.add_option("--lr", lr, "AdamW learning rate of the layer weights")->check(studies::positive);
  app.add_option("--arch-lr", arch_lr, "Adam learning rate of the architecture logits")->check(studies::positive);
  app.add_option("--lambda", lambda, "weight of the latency term")->check(studies::non_negative);
  app.add_option("--latency-loss", latency_loss, "hinge: lambda * max(0, log(E / target)); two_sided: lambda * |log(E / target)|")
      ->check(CLI::IsMember({"hinge", "two_sided"}));
  app.add_option("--tau-start", tau_start, "Gumbel-softmax temperature at the first step")->check(studies::positive);
  app.add_option("--tau-end", tau_end, "temperature at the last search step (annealed geometrically)")->check(studies::positive);
  app.add_option("--timing-rounds", timing_rounds, "rounds of the decoding-step timing (each times every model; the median "
                                                  "is reported)")->check(studies::positive);
  app.add_option("--threads", threads, "threads of the training, the latency table and the decoding measurements")
      ->check(studies::positive);
  CLI11_PARSE(app, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  return lwcl::guard_main([&] {
    namespace fs = std::filesystem;
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
    const std::string cpu = quant::host_cpu_line();
    const auto cfg = checkpoint::read_hf_config(model_dir);
    check(!cfg.traits().post_norm, "nas_mp: the supernet searches pre-norm decoders (gpt2, llama, qwen2); ", model_dir, " is ",
          model::family_name(cfg.fam));
    backend::cpu be;
    net_t teacher(be, cfg, dtype::f32);
    checkpoint::load_hf_weights(teacher, model_dir);
    const index_t T = seq ? seq : cfg.max_seq, C = cfg.d_model, L = cfg.n_layers();
    // A decoding step is timed after a prompt of 16 tokens over 32 steps (fewer where max_seq is short).
    const index_t decode_prompt = std::min<index_t>(16, std::max<index_t>(1, cfg.max_seq / 4)),
                  decode_steps = std::min<index_t>(32, cfg.max_seq - decode_prompt);
    if (out.empty()) out = "runs/nas_mp_" + fs::path(model_dir).lexically_normal().parent_path().filename().string();
    fs::create_directories(out);

    // FFN channels in importance order, every layer (the same function: checked below by perplexity).
    {
      const auto h = model::host_params(teacher);
      std::vector<float> f(h.begin(), h.end());
      for (index_t l = 0; l < L; ++l) search::reorder_ffn(cfg, teacher.layout(), f, l);
      model::set_host_params(teacher, std::vector<double>(f.begin(), f.end()));
    }
    const auto teacher_params = model::host_params(teacher);

    // The search space.
    search::supernet_space space;
    space.group = quant_group;
    const auto& L0 = cfg.layers[0];
    if (kv_list.empty()) {
      for (index_t k = L0.n_kv_heads; k >= std::max<index_t>(1, (L0.n_kv_heads + 1) / 2); --k) space.kv_groups.push_back(k);
    } else {
      space.kv_groups = number_list<index_t>(kv_list, "--kv");
    }
    if (ffn_list.empty()) {
      for (int q = 4; q >= 1; --q) space.ffn.push_back(std::max<index_t>(quant_group, L0.ffn * q / 4 / quant_group * quant_group));
    } else {
      space.ffn = number_list<index_t>(ffn_list, "--ffn");
    }
    const auto targets = number_list<double>(targets_list, "--targets");
    for (double r : targets) check(r > 0 && r <= 1.0, "nas_mp: latency target ", r, " (expected a fraction in (0, 1])");
    const auto method_list = split_list(methods);
    for (const auto& m : method_list)
      check(m == "joint" || m == "width_int8" || m == "width_int4" || m == "width_f32", "nas_mp: method '", m,
            "' (expected joint, width_int8, width_int4 or width_f32)");
    auto space_of = [&](const std::string& m) {
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
    };
    for (const auto& m : method_list) space_of(m);

    // Held-out samples, training shard.
    std::vector<eval::held_out_sample> samples;
    for (const auto& sp : split_list(splits_list)) samples.push_back(eval::held_out_split(data_dir, sp, T, eval_tokens));
    check(!samples.empty(), "nas_mp: no held-out split to score (--splits)");
    const data::shard train_shard((fs::path(data_dir) / "train.bin").string());
    auto train_batches = [&](std::uint64_t seed, int n) {
      const data::batch_loader loader(train_shard, batch, T, seed);
      std::vector<std::vector<std::int32_t>> b(static_cast<std::size_t>(n));
      std::vector<std::int32_t> targets_ids;
      for (int k = 0; k < n; ++k) loader.batch(static_cast<std::uint64_t>(k), b[static_cast<std::size_t>(k)], targets_ids);
      return b;
    };

    std::printf("nas_mp: %s (%s, %lld layers, width %lld, %lld parameters); cpu: %s; threads %d\n", model_dir.c_str(),
                std::string(model::family_name(cfg.fam)).c_str(), static_cast<long long>(L), static_cast<long long>(C),
                static_cast<long long>(teacher.num_parameters()), cpu.c_str(), threads);
    std::string kv_s, ffn_s;
    for (auto k : space.kv_groups) kv_s += (kv_s.empty() ? "" : ",") + std::to_string(k);
    for (auto f : space.ffn) ffn_s += (ffn_s.empty() ? "" : ",") + std::to_string(f);
    std::printf("space per layer: KV groups {%s} x FFN {%s}; joint: weight bits {4,8,32} per linear (g%lld, sym) x "
                "activation bits {8,32} per site\n",
                kv_s.c_str(), ffn_s.c_str(), static_cast<long long>(quant_group));

    // The latency table: every candidate shape x weight bits x activation bits, one token, streamed.
    const auto stream_of = [&](int wbits) {
      return quant::linear_weight_bytes(cfg, quant::linear_choice{wbits, wbits == 32 ? 0 : quant_group, 32});
    };
    quant::latency_table table;
    {
      const timer tt;
      std::set<std::pair<index_t, index_t>> shapes;
      const index_t D = cfg.head_dim, r = L0.n_heads / L0.n_kv_heads;
      for (index_t k : space.kv_groups) {
        shapes.insert({k * r * D, C});
        shapes.insert({k * D, C});
        shapes.insert({C, k * r * D});
      }
      for (index_t f : space.ffn) {
        shapes.insert({f, C});
        shapes.insert({C, f});
      }
      for (const auto& [rows, cols] : shapes)
        for (int wb : {32, 8, 4})
          for (int ab : {32, 8}) {
            const quant::linear_key k{rows, cols, wb, wb == 32 ? 0 : quant_group, ab, 1, threads, stream_of(wb)};
            table.set(k, quant::measure_linear(k, 0.04));
          }
      std::printf("latency table: %zu measurements in %.1f s\n", table.size(), tt.seconds());
      write_text_atomic((fs::path(out) / "latency_table.json").string(), table.to_json().dump(1) + "\n");
    }
    const search::linear_latency lat = [&](index_t rows, index_t cols, int wb, int ab) {
      return table.at({rows, cols, wb, wb == 32 ? 0 : quant_group, ab, 1, threads, stream_of(wb)});
    };
    // The f32 teacher's linear seconds per layer.
    std::vector<double> teacher_layer_seconds(static_cast<std::size_t>(L), 0.0);
    for (index_t l = 0; l < L; ++l)
      for (const auto& [name, rows, cols] : quant::block_linears(cfg, l))
        teacher_layer_seconds[static_cast<std::size_t>(l)] += lat(rows, cols, 32, 32);
    double teacher_linear = 0;
    for (double s : teacher_layer_seconds) teacher_linear += s;

    // Reference points: the teacher (f32, and reordered: the same perplexity), uniform GPTQ int8 / int4.
    std::vector<run_result> refs;
    auto measure_reference = [&](const std::string& name, int wbits) {
      run_result r;
      r.method = name;
      r.teacher_linear_seconds = teacher_linear;
      r.model = std::make_shared<exported>();
      r.model->net = std::make_unique<net_t>(be, cfg, dtype::f32);
      net_t& net = *r.model->net;
      model::set_host_params(net, teacher_params);
      auto& qm = r.model->qm;
      if (wbits < 32) {
        quant::weight_format f;
        f.bits = wbits;
        f.group = quant_group;
        qm = quant::quantize_model(net, policies::quantisers::gptq{}, f, train_batches(0x9a5c0000ULL, calib_batches), batch, T, false);
        for (const auto& q : qm.layers) r.model->names.push_back(q.name);
      }
      for (const auto& s : samples) r.ppl.push_back(hooked_perplexity(net, s, nullptr));
      for (index_t l = 0; l < L; ++l)
        for (const auto& [n, rows, cols] : quant::block_linears(cfg, l)) r.predicted_linear_seconds += lat(rows, cols, wbits, 32);
      r.parameters = static_cast<double>(net.num_parameters());
      r.linear_bytes = static_cast<double>(stream_of(wbits));
      r.bits_per_weight = wbits < 32 ? 32.0 * static_cast<double>(qm.packed_bytes()) / static_cast<double>(qm.replaced_f32_bytes()) : 32;
      std::printf("%s: %s ppl %.3f (linears predicted %.3f ms)\n", name.c_str(), samples[0].split.c_str(), r.ppl[0],
                  1e3 * r.predicted_linear_seconds);
      return r;
    };
    refs.push_back(measure_reference("teacher f32", 32));
    {
      const double direct = eval::perplexity(teacher, samples[0]).perplexity();
      check(std::abs(direct - refs[0].ppl[0]) <= 1e-3 * direct, "nas_mp: the perplexity through infer_logits (", refs[0].ppl[0],
            ") differs from eval::perplexity's (", direct, ")");
    }
    refs.push_back(measure_reference("GPTQ int8 g32", 8));
    refs.push_back(measure_reference("GPTQ int4 g32", 4));

    // One search: every layer on its own, from the teacher's cached boundary features.
    auto search_one = [&](const std::string& method, double target, int seed) {
      run_result res;
      res.method = method;
      res.target = target;
      res.seed = seed;
      res.teacher_linear_seconds = teacher_linear;
      const auto sp = space_of(method);
      const timer ts;
      // Boundary features of the teacher on this seed's batches: feats[b][boundary].
      const auto ids = train_batches(0x5eed0000ULL + static_cast<std::uint64_t>(seed), batches);
      std::vector<std::vector<std::vector<float>>> feats(ids.size());
      for (std::size_t b = 0; b < ids.size(); ++b)
        model::for_each_layer_output(teacher, ids[b], batch, T, [&](index_t, const tensor& h) {
          const float* p = h.ptr<float>("nas_mp");
          feats[b].emplace_back(p, p + h.numel());
        });
      std::vector<double> params = teacher_params;
      std::vector<std::unique_ptr<search::supernet_layer>> nets;
      optim::adamw_config oc;
      oc.lr = lr;
      oc.weight_decay = 0.0;
      const std::uint64_t noise_seed = 0x6a5bULL + static_cast<std::uint64_t>(seed);
      for (index_t l = 0; l < L; ++l) {
        distill::segment_trainer<backend::cpu> seg(be, cfg, l, l + 1, teacher.layout(), params, dtype::f32, oc);
        const tensor pw = seg.params();
        const float* p0 = pw.ptr<float>("nas_mp");
        const std::vector<float> w0(p0, p0 + pw.numel());
        auto sn = std::make_unique<search::supernet_layer>(cfg, sp, l, seg.layout(), w0);
        seg.set_weight_transform([&](const std::vector<float>& master, std::vector<float>& eff) {
          sn->mix_weights(seg.layout(), master, eff);
        });
        seg.set_input_hook(sn.get());
        const double layer_target = target * teacher_layer_seconds[static_cast<std::size_t>(l)];
        double loss = 0, E = 0;
        const int total = steps + finetune;
        for (int s = 0; s < total; ++s) {
          const bool searching = s < steps;
          const double frac = steps > 1 ? static_cast<double>(std::min(s, steps - 1)) / (steps - 1) : 1.0;
          const double tau = tau_start * std::pow(tau_end / tau_start, frac);
          if (s == steps) sn->fix(sn->chosen());
          sn->sample(philox_stream{noise_seed, static_cast<std::uint64_t>(l * 1000003 + s)}, tau);
          auto& xb = feats[static_cast<std::size_t>(s) % feats.size()];
          std::vector<float> x(xb[static_cast<std::size_t>(l)]), y(xb[static_cast<std::size_t>(l + 1)]);
          loss = seg.step(tensor(x.data(), {batch, T, C}), tensor(y.data(), {batch, T, C}), lr, [&] {
            if (!searching) return;
            const tensor g = seg.grads(), w = seg.params();
            const float* wp = w.ptr<float>("nas_mp");
            sn->weight_grads(seg.layout(), g.ptr<float>("nas_mp"), std::vector<float>(wp, wp + w.numel()));
            E = sn->expected_latency(lat, layer_target, lambda, latency_loss == "two_sided");
            sn->update_logits(arch_lr);
          });
          res.search_resident_bytes = std::max(res.search_resident_bytes, seg.resident_bytes() + sn->saved_bytes());
          if (s + 1 == steps || s + 1 == total)
            std::printf("  %s target %.2f seed %d layer %lld step %d: loss %.4e, tau %.3f, expected %.1f us (target %.1f us): %s\n",
                        method.c_str(), target, seed, static_cast<long long>(l), s + 1, loss, tau, 1e6 * E, 1e6 * layer_target,
                        describe(cfg, sn->chosen()).c_str());
        }
        res.final_loss += loss / static_cast<double>(L);
        // The fixed candidate's expected latency is its table sum.
        sn->sample(philox_stream{noise_seed, 0}, 1.0);
        res.predicted_linear_seconds += sn->expected_latency(lat);
        res.choices.push_back(sn->chosen());
        seg.write_back(teacher.layout(), params);
        nets.push_back(std::move(sn));
      }
      res.search_seconds = ts.seconds();

      // Export: the subnet physically smaller, its chosen linears GPTQ-quantised, 8-bit sites per token.
      const timer te;
      net_t trained(be, cfg, dtype::f32);
      model::set_host_params(trained, params);
      prune::prune_plan plan;
      for (index_t l = 0; l < L; ++l) plan.layers.push_back(nets[static_cast<std::size_t>(l)]->plan_of(res.choices[static_cast<std::size_t>(l)]));
      res.model = std::make_shared<exported>();
      res.model->net = prune::apply_plan(trained, plan);
      auto& student = res.model->net;
      std::map<std::string, int> bits_of;
      search::act8_hook hook;
      auto& act8 = res.model->act8;
      for (index_t l = 0; l < L; ++l) {
        const auto& c = res.choices[static_cast<std::size_t>(l)];
        for (const auto& [n, b] : c.weight_bits) bits_of[model::layer_prefix(l) + n] = b;
        for (const auto& [site, b] : c.act_bits)
          if (b == 8) {
            hook.sites.insert({l, site});
            for (const auto& n : site_linears(cfg, l, site)) act8.insert(n);
          }
      }
      const quant::format_fn fmt = [&](const std::string& name) -> std::optional<quant::weight_format> {
        const auto it = bits_of.find(name);
        check(it != bits_of.end(), "nas_mp: no weight bits chosen for '", name, "'");
        if (it->second == 32) return std::nullopt;
        quant::weight_format f;
        f.bits = it->second;
        f.group = quant_group;
        return f;
      };
      auto& names = res.model->names;
      auto& qm = res.model->qm;
      bool any = false;
      for (const auto& [n, b] : bits_of) any = any || b < 32;
      if (any) {
        qm = quant::quantize_model(*student, policies::quantisers::gptq{}, fmt,
                                   train_batches(0x9a5c0000ULL + static_cast<std::uint64_t>(seed), calib_batches), batch, T, false);
        for (const auto& q : qm.layers) names.push_back(q.name);
      }
      for (const auto& s : samples) res.ppl.push_back(hooked_perplexity(*student, s, hook.sites.empty() ? nullptr : &hook));
      res.parameters = static_cast<double>(student->num_parameters());
      double f32_linear = 0;
      for (index_t l = 0; l < L; ++l)
        for (const auto& [n, rows, cols] : quant::block_linears(student->config(), l)) {
          const std::string full = model::layer_prefix(l) + n;
          if (bits_of.at(full) == 32) f32_linear += 4.0 * static_cast<double>(rows * cols);
        }
      res.linear_bytes = f32_linear + static_cast<double>(qm.packed_bytes());
      double weights = 0;
      for (index_t l = 0; l < L; ++l)
        for (const auto& [n, rows, cols] : quant::block_linears(student->config(), l)) weights += static_cast<double>(rows * cols);
      res.bits_per_weight = 8.0 * res.linear_bytes / weights;
      res.export_seconds = te.seconds();
      std::printf("%s target %.2f seed %d: %s ppl %.3f (linears predicted %.3f ms, teacher %.3f ms), "
                  "%.2f bits/weight, search %.0f s\n",
                  method.c_str(), target, seed, samples[0].split.c_str(), res.ppl[0], 1e3 * res.predicted_linear_seconds, 1e3 * teacher_linear, res.bits_per_weight, res.search_seconds);
      return res;
    };

    std::vector<run_result> runs;
    for (double r : targets)
      for (const auto& m : method_list)
        for (int s = 0; s < seeds; ++s) runs.push_back(search_one(m, r, first_seed + s));

    // Timing, after every search: each round times every model once (in turn, so that a disturbance of
    // the machine falls on all of them alike); a model's figure is its median over the rounds.
    {
      std::vector<run_result*> all;
      for (auto& r : refs) all.push_back(&r);
      for (auto& r : runs) all.push_back(&r);
      // 8-bit sites: packed linears run the integer kernel, f32 ones round their input first (as the
      // perplexity's hook does).
      for (auto* r : all) r->model->linears = std::make_unique<quant::packed_linears>(r->model->names, r->model->qm.weights, r->model->act8);
      std::vector<std::vector<double>> t(all.size());
      const timer tt;
      for (int round = 0; round < timing_rounds; ++round) {
        for (std::size_t i = 0; i < all.size(); ++i) {
          const exported& e = *all[i]->model;
          t[i].push_back(quant::measure_decode_step(*e.net, decode_prompt, decode_steps, [&](model::kv_decoder<backend::cpu>& d) {
            if (!e.names.empty() || !e.act8.empty()) e.linears->attach(d, *e.net);
          }, 3));
        }
        std::printf("timing: round %d of %d over %zu models (%.0f s)\n", round + 1, timing_rounds, all.size(), tt.seconds());
      }
      for (std::size_t i = 0; i < all.size(); ++i) {
        std::sort(t[i].begin(), t[i].end());
        all[i]->measured_seconds = t[i][t[i].size() / 2];
        std::printf("%s%s: decoding step %.3f ms (linears predicted %.3f ms)\n", all[i]->method.c_str(),
                    all[i]->target > 0 ? report::format(" target %.2f seed %d", all[i]->target, all[i]->seed).c_str() : "",
                    1e3 * all[i]->measured_seconds, 1e3 * all[i]->predicted_linear_seconds);
      }
    }

    // Table (one row per method x target: mean +- sd over seeds), CSV and JSON of every run, Pareto plot.
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
      for (std::size_t l = 0; l < r.choices.size(); ++l) md += report::format(" [%zu] %s;", l, describe(cfg, r.choices[l]).c_str());
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
    return 0;
  });
}
