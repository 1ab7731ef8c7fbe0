#pragma once
// The joint width x weight-bits x activation-bits search (search/supernet.hpp) run layer-wise, and the
// export of what it chose. Every layer of the teacher becomes a weight-entangled supernet and is searched
// on its own as a segment of the layer-wise pipeline (a distill::segment_trainer): its input and target
// are the teacher's boundary features, so the search holds one layer's parameters, gradients, optimiser
// state and activations at a time. A search step draws a Gumbel-softmax sample (the temperature annealed
// geometrically from tau_start to tau_end), trains the layer's master weights on the feature loss through
// the mixed weights and activations, and moves the architecture logits by the feature loss and by
// lambda * max(0, log(E / target)) (two-sided: lambda * |log(E / target)|), E the layer's expected
// linear latency from a measured table. The most probable candidate is then fixed and the layer trained
// `finetune` steps more. export_subnet makes the chosen subnet physically smaller (prune::apply_plan),
// GPTQ-quantises its chosen linears and keeps its 8-bit activation sites. experiments/nas_mp compares
// this search with width-then-quantise.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "lwcl/backend/host/host.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/core/rng.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/distill/segment_trainer.hpp"
#include "lwcl/model/host_params.hpp"
#include "lwcl/model/layer_outputs.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/policies/quantiser/gptq.hpp"
#include "lwcl/prune/surgery.hpp"
#include "lwcl/quant/latency.hpp"
#include "lwcl/quant/model.hpp"
#include "lwcl/search/supernet.hpp"

namespace lwcl::distill {

struct supernet_search_options {
  int steps = 150;               // search steps per layer
  int finetune = 50;             // steps per layer with the chosen candidate fixed
  double lr = 3e-4;              // AdamW learning rate of the layer weights
  double arch_lr = 0.05;         // Adam learning rate of the architecture logits
  double lambda = 1.0;           // weight of the latency term
  bool two_sided = false;        // lambda * |log(E / target)| instead of the hinge
  double tau_start = 10.0;       // Gumbel-softmax temperature at the first step
  double tau_end = 0.1;          // at the last search step
  std::uint64_t noise_seed = 0;  // the Gumbel noise
  std::FILE* log = stdout;       // a line per layer at the end of its search and of its fine-tuning; nullptr: none
  std::string label;             // what the log lines start with
};

struct supernet_search_result {
  std::vector<search::layer_choice> choices;  // per layer
  std::vector<prune::layer_plan> plans;       // per layer: the chosen widths
  std::vector<double> params;                 // the trained master weights, in the teacher's layout
  double predicted_linear_seconds = 0;        // the chosen candidates' latency-table sum
  double final_loss = 0;                      // the last step's feature loss, mean over layers
  double seconds = 0;
  std::size_t resident_bytes = 0;  // the largest layer's trainer and supernet activations
};

// A layer choice in a few words: its widths and how many linears and sites are at each width of bits.
inline std::string describe_choice(const search::layer_choice& c) {
  int w4 = 0, w8 = 0, w32 = 0, a8 = 0;
  for (const auto& [n, b] : c.weight_bits) (b == 4 ? w4 : b == 8 ? w8 : w32) += 1;
  for (const auto& [s, b] : c.act_bits) a8 += b == 8;
  char buf[160];
  std::snprintf(buf, sizeof buf, "kv %lld ffn %lld w4:%d w8:%d w32:%d a8:%d", static_cast<long long>(c.kv_groups),
                static_cast<long long>(c.ffn), w4, w8, w32, a8);
  return buf;
}

// `teacher` (f32, its FFN channels in importance order: search::reorder_ffn) searched layer by layer
// over `space` on the token batches `batches` (each `batch` x T, cycled through by the steps), layer l's
// expected latency under `lat` pulled to layer_targets[l] seconds.
inline supernet_search_result search_supernet(backend::cpu& be, const model::transformer<backend::cpu>& teacher,
                                              const search::supernet_space& space,
                                              const std::vector<std::vector<std::int32_t>>& batches, index_t batch,
                                              index_t T, const search::linear_latency& lat,
                                              const std::vector<double>& layer_targets,
                                              const supernet_search_options& o) {
  const auto& cfg = teacher.config();
  const index_t L = cfg.n_layers(), C = cfg.d_model;
  check(!batches.empty(), "search_supernet: no feature batches");
  check(static_cast<index_t>(layer_targets.size()) == L, "search_supernet: ", layer_targets.size(),
        " layer targets for ", L, " layers");
  check(o.steps > 0 && o.finetune >= 0, "search_supernet: steps ", o.steps, " and finetune ", o.finetune,
        " (expected steps > 0, finetune >= 0)");
  space.validate(cfg);
  supernet_search_result res;
  const timer clock;
  // The teacher's boundary features of every batch: feats[b][boundary].
  std::vector<std::vector<std::vector<float>>> feats(batches.size());
  for (std::size_t b = 0; b < batches.size(); ++b)
    model::for_each_layer_output(teacher, batches[b], batch, T, [&](index_t, const tensor& h) {
      const float* p = h.ptr<float>("search_supernet");
      feats[b].emplace_back(p, p + h.numel());
    });
  res.params = model::host_params(teacher);
  optim::adamw_config oc;
  oc.lr = o.lr;
  oc.weight_decay = 0.0;
  for (index_t l = 0; l < L; ++l) {
    segment_trainer<backend::cpu> seg(be, cfg, l, l + 1, teacher.layout(), res.params, dtype::f32, oc);
    const tensor pw = seg.params();
    const float* p0 = pw.ptr<float>("search_supernet");
    const std::vector<float> w0(p0, p0 + pw.numel());
    search::supernet_layer sn(cfg, space, l, seg.layout(), w0);
    seg.set_weight_transform(
        [&](const std::vector<float>& master, std::vector<float>& eff) { sn.mix_weights(seg.layout(), master, eff); });
    seg.set_input_hook(&sn);
    const double target = layer_targets[static_cast<std::size_t>(l)];
    double loss = 0, E = 0;
    const int total = o.steps + o.finetune;
    for (int s = 0; s < total; ++s) {
      const bool searching = s < o.steps;
      const double frac = o.steps > 1 ? static_cast<double>(std::min(s, o.steps - 1)) / (o.steps - 1) : 1.0;
      const double tau = o.tau_start * std::pow(o.tau_end / o.tau_start, frac);
      if (s == o.steps) sn.fix(sn.chosen());
      sn.sample(philox_stream{o.noise_seed, static_cast<std::uint64_t>(l * 1000003 + s)}, tau);
      const auto& xb = feats[static_cast<std::size_t>(s) % feats.size()];
      std::vector<float> x(xb[static_cast<std::size_t>(l)]), y(xb[static_cast<std::size_t>(l + 1)]);
      loss = seg.step(tensor(x.data(), {batch, T, C}), tensor(y.data(), {batch, T, C}), o.lr, [&] {
        if (!searching) return;
        const tensor g = seg.grads(), w = seg.params();
        const float* wp = w.ptr<float>("search_supernet");
        sn.weight_grads(seg.layout(), g.ptr<float>("search_supernet"), std::vector<float>(wp, wp + w.numel()));
        E = sn.expected_latency(lat, target, o.lambda, o.two_sided);
        sn.update_logits(o.arch_lr);
      });
      res.resident_bytes = std::max(res.resident_bytes, seg.resident_bytes() + sn.saved_bytes());
      if (o.log && (s + 1 == o.steps || s + 1 == total))
        std::fprintf(o.log, "  %s layer %lld step %d: loss %.4e, tau %.3f, expected %.1f us (target %.1f us): %s\n",
                     o.label.c_str(), static_cast<long long>(l), s + 1, loss, tau, 1e6 * E, 1e6 * target,
                     describe_choice(sn.chosen()).c_str());
    }
    res.final_loss += loss / static_cast<double>(L);
    // The fixed candidate's expected latency is its table sum.
    sn.sample(philox_stream{o.noise_seed, 0}, 1.0);
    res.predicted_linear_seconds += sn.expected_latency(lat);
    res.choices.push_back(sn.chosen());
    res.plans.push_back(sn.plan_of(res.choices.back()));
    seg.write_back(teacher.layout(), res.params);
  }
  res.seconds = clock.seconds();
  return res;
}

// A model as deployed: the network (dequantised weights where quantised), the packed weights of its
// quantised linears, and the linears whose inputs are quantised to 8 bits per token.
struct exported_subnet {
  std::unique_ptr<model::transformer<backend::cpu>> net;
  quant::quantized_model qm;
  std::vector<std::string> names;  // the quantised linears
  std::set<std::string> act8;      // the linears whose inputs are 8-bit
  search::act8_hook hook;          // the 8-bit sites, for inference through infer_logits
  double linear_bytes = 0;         // f32 linears at 4 bytes a weight, quantised ones packed
  double bits_per_weight = 0;      // over the blocks' linear weights
};

// The searched subnet: `r`'s trained weights cut to its chosen widths, each linear GPTQ-quantised (group
// `group`, calibrated on `calib`, each batch x T) to its chosen bits, its 8-bit sites recorded.
inline exported_subnet export_subnet(backend::cpu& be, const model::model_config& cfg, const supernet_search_result& r,
                                     const std::vector<std::vector<std::int32_t>>& calib, index_t batch, index_t T,
                                     index_t group) {
  const index_t L = cfg.n_layers();
  check(static_cast<index_t>(r.choices.size()) == L, "export_subnet: ", r.choices.size(), " choices for ", L, " layers");
  exported_subnet e;
  {
    model::transformer<backend::cpu> trained(be, cfg, dtype::f32);
    model::set_host_params(trained, r.params);
    prune::prune_plan plan;
    plan.layers = r.plans;
    e.net = prune::apply_plan(trained, plan);
  }
  std::map<std::string, int> bits_of;
  for (index_t l = 0; l < L; ++l) {
    const auto& c = r.choices[static_cast<std::size_t>(l)];
    for (const auto& [n, b] : c.weight_bits) bits_of[model::layer_prefix(l) + n] = b;
    for (const auto& [site, b] : c.act_bits) {
      if (b != 8) continue;
      e.hook.sites.insert({l, site});
      for (const auto& lin : search::supernet_linears(cfg))
        if (lin.site == site) e.act8.insert(model::layer_prefix(l) + lin.name);
    }
  }
  const quant::format_fn fmt = [&](const std::string& name) -> std::optional<quant::weight_format> {
    const auto it = bits_of.find(name);
    check(it != bits_of.end(), "export_subnet: no weight bits chosen for '", name, "'");
    if (it->second == 32) return std::nullopt;
    quant::weight_format f;
    f.bits = it->second;
    f.group = group;
    return f;
  };
  const bool any = std::any_of(bits_of.begin(), bits_of.end(), [](const auto& nb) { return nb.second < 32; });
  if (any) {
    e.qm = quant::quantize_model(*e.net, policies::quantisers::gptq{}, fmt, calib, batch, T, false);
    for (const auto& q : e.qm.layers) e.names.push_back(q.name);
  }
  double f32_linear = 0, weights = 0;
  for (index_t l = 0; l < L; ++l)
    for (const auto& [n, rows, cols] : quant::block_linears(e.net->config(), l)) {
      if (bits_of.at(model::layer_prefix(l) + n) == 32) f32_linear += 4.0 * static_cast<double>(rows * cols);
      weights += static_cast<double>(rows * cols);
    }
  e.linear_bytes = f32_linear + static_cast<double>(e.qm.packed_bytes());
  e.bits_per_weight = 8.0 * e.linear_bytes / weights;
  return e;
}

}  // namespace lwcl::distill
