#pragma once
// End-to-end distillation of an encoder student (family bert), the baseline of layer-wise recovery for
// encoders: teacher and student both resident, the student trained through all its layers at once on
// one of two objectives against the frozen teacher (run forward only, one block's activations at a
// time, model::for_each_layer_output):
//   embedding: 1 - cos(mean-pooled student output, mean-pooled teacher output) per sequence, averaged
//              over the batch (the sentence embedding sentence-transformers computes, before its
//              normalisation, which the cosine ignores);
//   hidden:    the mean squared error between the two last hidden states.
// The step loop is train_e2e_kd's (e2e_detail::step_loop): AdamW, global-norm clipping, a cosine
// schedule, a step and/or wall-clock budget, a quality curve (distill/curve.hpp), metrics records with the
// tracker's bytes; the peak memory is the tracker's.

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/core/memory.hpp"
#include "lwcl/core/metrics.hpp"
#include "lwcl/core/progress.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/data/loader.hpp"
#include "lwcl/distill/curve.hpp"
#include "lwcl/distill/e2e_kd.hpp"
#include "lwcl/distill/encoder_objective.hpp"
#include "lwcl/distill/pipeline/budget.hpp"
#include "lwcl/model/encoder.hpp"
#include "lwcl/model/layer_outputs.hpp"
#include "lwcl/ops/common.hpp"
#include "lwcl/ops/elementwise.hpp"
#include "lwcl/optim/adamw.hpp"
#include "lwcl/optim/clip.hpp"
#include "lwcl/optim/schedule.hpp"
#include "lwcl/prune/plan.hpp"

namespace lwcl::distill {

// The step loop's options (e2e_kd.hpp: the optimiser, the budget, the batches, the quality curve) and
// the objective.
struct e2e_encoder_options : e2e_loop_options {
  encoder_objective objective = encoder_objective::embedding;
};

namespace e2e_encoder_detail {

// d(loss)/d(student hidden) on the host, and the loss, for one batch of (B, T, C) last hidden states.
inline double objective_grad(encoder_objective o, const std::vector<double>& hs, const std::vector<double>& ht,
                             std::vector<double>& g, index_t B, index_t T, index_t C) {
  g.assign(hs.size(), 0.0);
  if (o == encoder_objective::hidden) {
    const double n = static_cast<double>(hs.size());
    double loss = 0;
    for (std::size_t i = 0; i < hs.size(); ++i) {
      const double d = hs[i] - ht[i];
      loss += d * d;
      g[i] = 2 * d / n;
    }
    return loss / n;
  }
  double loss = 0;
  std::vector<double> ps(static_cast<std::size_t>(C)), pt(static_cast<std::size_t>(C));
  for (index_t b = 0; b < B; ++b) {
    std::fill(ps.begin(), ps.end(), 0.0);
    std::fill(pt.begin(), pt.end(), 0.0);
    for (index_t t = 0; t < T; ++t)
      for (index_t c = 0; c < C; ++c) {
        const auto i = static_cast<std::size_t>((b * T + t) * C + c);
        ps[static_cast<std::size_t>(c)] += hs[i] / static_cast<double>(T);
        pt[static_cast<std::size_t>(c)] += ht[i] / static_cast<double>(T);
      }
    double ns = 0, nt = 0, dot = 0;
    for (index_t c = 0; c < C; ++c) {
      const auto k = static_cast<std::size_t>(c);
      ns += ps[k] * ps[k];
      nt += pt[k] * pt[k];
      dot += ps[k] * pt[k];
    }
    ns = std::sqrt(ns);
    nt = std::sqrt(nt);
    check(ns > 0 && nt > 0, "train_e2e_encoder: a sequence's mean-pooled output is zero");
    const double cos = dot / (ns * nt);
    loss += (1 - cos) / static_cast<double>(B);
    // d(1 - cos)/d ps = -(pt / (ns nt) - cos ps / ns^2); the mean over T spreads it evenly.
    for (index_t c = 0; c < C; ++c) {
      const auto k = static_cast<std::size_t>(c);
      const double dps = -(pt[k] / (ns * nt) - cos * ps[k] / (ns * ns)) / static_cast<double>(B);
      for (index_t t = 0; t < T; ++t) g[static_cast<std::size_t>((b * T + t) * C + c)] = dps / static_cast<double>(T);
    }
  }
  return loss;
}

}  // namespace e2e_encoder_detail

template <class Backend>
e2e_result train_e2e_encoder(const model::encoder<Backend>& teacher, model::encoder<Backend>& student,
                             const data::batch_loader& loader, index_t B, index_t T, const e2e_encoder_options& opt,
                             metrics_writer* metrics = nullptr) {
  auto& be = student.backend();
  const auto& tc = teacher.config();
  const auto& sc = student.config();
  check(tc.d_model == sc.d_model, "train_e2e_encoder: teacher width ", tc.d_model, " != student width ", sc.d_model);
  check(tc.vocab == sc.vocab, "train_e2e_encoder: teacher vocabulary ", tc.vocab, " != student vocabulary ", sc.vocab);
  check(opt.steps >= 1, "train_e2e_encoder: steps must be at least 1");
  check(opt.cycle_batches >= 0, "train_e2e_encoder: cycle_batches is ", opt.cycle_batches,
        ", expected 0 (fresh batches) or more");
  check(opt.eval_every >= 0 && opt.eval_every_seconds >= 0, "train_e2e_encoder: eval_every is ", opt.eval_every,
        " and eval_every_seconds ", opt.eval_every_seconds, ", expected >= 0");
  const index_t b = e2e_detail::micro_batch_rows(opt, B, "train_e2e_encoder");
  const e2e_detail::checkpointing_scope checkpointing(student, opt.checkpoint_activations);
  const e2e_detail::compute_peak<Backend> peak(teacher.parameter_bytes() + student.parameter_bytes() +
                                               student.activation_bytes());
  optim::adamw_config oc;
  oc.lr = opt.lr;
  oc.weight_decay = opt.weight_decay;
  optim::adamw<Backend> adam(be, student.params(), oc);
  const index_t C = sc.d_model;
  owned_tensor<Backend> dhidden(be, student.type(), {b, T, C});
  buffer<Backend> tok(be, static_cast<std::size_t>(B * T) * sizeof(std::int32_t));
  std::vector<double> hs, ht, g;
  e2e_result res;
  const double step_flops = static_cast<double>(B * T) * (prune::layers_flops_per_token(tc, 0, tc.n_layers(), T) +
                                                          (opt.checkpoint_activations ? 4 : 3) *
                                                              prune::layers_flops_per_token(sc, 0, sc.n_layers(), T));
  // The loss of micro-batch k of the batch `ids`, its gradient left in g for micro_backward.
  auto micro_loss = [&](const std::vector<std::int32_t>& ids, const tensor& rows, index_t k) {
    const std::vector<std::int32_t> part(ids.begin() + k * b * T, ids.begin() + (k + 1) * b * T);
    model::for_each_layer_output(teacher, part, b, T, [&](index_t boundary, const tensor& h) {
      if (boundary == tc.n_layers()) ht = ops::to_host_doubles(be, h, "train_e2e_encoder");
    });
    hs = ops::to_host_doubles(be, student.forward(rows), "train_e2e_encoder");
    return e2e_encoder_detail::objective_grad(opt.objective, hs, ht, g, b, T, C);
  };
  auto micro_backward = [&] {
    ops::from_host_doubles(be, g, dhidden.view(), "train_e2e_encoder");
    student.backward(dhidden.view());
  };
  const std::string name(objective_name(opt.objective));
  e2e_detail::step_loop(student, loader, B, T, opt, metrics, "train_e2e_encoder", "e2e_" + name, name, step_flops, peak,
                        adam, tok, micro_loss, micro_backward, res);
  return res;
}

}  // namespace lwcl::distill
