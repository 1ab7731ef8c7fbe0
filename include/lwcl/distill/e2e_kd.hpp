#pragma once
// End-to-end knowledge distillation, the baseline layer-wise recovery is compared with: teacher and
// student both resident, the student trained on the temperature-scaled KL divergence from the
// teacher's next-token distribution (plus, optionally, a weighted MSE between the two models' last
// hidden states), over fresh training batches, with AdamW and global-norm clipping, under a step
// and/or wall-clock budget. The teacher runs forward only (transformer::infer_logits: one block's
// activations at a time, nothing kept for backward), as a frozen teacher under no_grad would; freeze()
// it first to release its gradient buffer too. The peak memory is the tracker's.

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lwcl/core/memory.hpp"
#include "lwcl/core/metrics.hpp"
#include "lwcl/core/process_memory.hpp"
#include "lwcl/core/progress.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/distill/curve.hpp"
#include "lwcl/distill/pipeline/budget.hpp"
#include "lwcl/data/loader.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/ops/distill_loss.hpp"
#include "lwcl/ops/elementwise.hpp"
#include "lwcl/optim/adamw.hpp"
#include "lwcl/optim/clip.hpp"
#include "lwcl/optim/schedule.hpp"
#include "lwcl/prune/plan.hpp"

namespace lwcl::distill {

// What both end-to-end trainers (this one for decoders, e2e_encoder.hpp's for encoders) take: the
// optimiser, the budget, the batches and the quality curve.
struct e2e_loop_options {
  long steps = 200;
  double lr = 1e-3, min_lr = 1e-4, weight_decay = 0.0;
  double clip = 1.0;
  long warmup_steps = 0;  // a linear warm-up to lr over the first warmup_steps steps, then the cosine decay
  std::uint64_t first_batch = 0;   // batches first_batch, first_batch + 1, ... of the loader
  // > 0: cycle over batches first_batch .. first_batch + cycle_batches - 1 (the layer-wise pipeline's
  // cached batches, for a comparison on the same data); 0: a fresh batch every step.
  long cycle_batches = 0;
  double time_budget_seconds = 0;  // > 0: stop when the training wall clock passes it
  long min_steps = 0;  // steps taken whatever the wall clock says (the pipeline's closing KD stage: 1)
  bool progress_bar = true;
  // The quality curve (distill/curve.hpp): with a probe, the student's held-out quality before the
  // first step, every eval_every steps and/or every eval_every_seconds training seconds, and after the
  // last step. The probe's own time counts in no budget and no figure.
  quality_probe probe;
  long eval_every = 0;
  double eval_every_seconds = 0;
  bool probe_start = true;  // false: no point before the first step (a stage continuing another's curve)
  // Memory, as a user short of it trains. Activation checkpointing of the student
  // (model::weights::set_activation_checkpointing): its blocks run forward again in backward, so only
  // the hidden states between them stay resident; the steps are bitwise those without it, and a step
  // costs about one more forward of the student's blocks. Gradient accumulation: each step's batch of B
  // sequences runs as micro_batches micro-batches of B / micro_batches (a divisor of B), each forward
  // and backward in turn, the gradients summed and scaled to the batch mean before clipping; the same
  // step within rounding, in the memory of a smaller batch.
  bool checkpoint_activations = false;
  index_t micro_batches = 1;
  // A stage of a longer run whose records go into that run's metrics file (the pipeline's closing stage):
  // each step record also carries "stage" and the run's "global_step" (global_step_offset + the step), its
  // "seconds" on the run's clock (seconds_offset + the stage's training seconds), and the probe's points
  // are left to the caller, which places them on the run's curve. Empty: the loop's own records.
  std::string metrics_stage;
  long global_step_offset = 0;
  double seconds_offset = 0;

  // Steps and wall clock from budget `b` at `batch_tokens` tokens a step: its steps, or under a seconds
  // budget its wall clock (and no step limit that a run could reach).
  void set_budget(const budget& b, index_t batch_tokens) {
    const bool seconds = b.unit == budget_unit::seconds;
    steps = seconds ? 1000000 : static_cast<long>(b.steps_at(batch_tokens));
    time_budget_seconds = seconds ? b.amount : 0;
  }
};

struct e2e_options : e2e_loop_options {
  double temperature = 1.0;
  double hidden_mse_weight = 0.0;  // > 0: add w * mse(student h_L, teacher h_L) (needs equal widths)
};

struct e2e_result {
  double loss_first = 0, loss_last = 0;
  long steps = 0;
  // Compute memory at peak, from the memory tracker: the tracker's compute peak in the backend's tier
  // while training, less what other objects held there when it began. declared_compute_bytes is the sum
  // of the buffers: teacher parameters (and gradients, unless frozen) and its inference buffers; the
  // student's parameters, gradients, AdamW moments and activations; the logits, their gradient, the
  // loss scratch, the token buffer and the hidden-state pair.
  std::size_t peak_compute_bytes = 0;
  std::size_t declared_compute_bytes = 0;
  // The part of declared_compute_bytes that scales with the (micro-)batch: the student's saved
  // activations, the teacher's inference buffers, the logits and hidden-state buffers. The rest (both
  // models' parameters, the gradients and AdamW moments, the token buffer) does not.
  std::size_t batch_bytes = 0;
  double seconds = 0;      // training wall seconds (the probe's evaluations excluded)
  double cpu_seconds = 0;  // the process's processor seconds while training (every thread; evaluations excluded)
  double eval_seconds = 0; // wall seconds the probe took
  double eval_cpu_seconds = 0;  // and its processor seconds
  std::vector<curve_point> curve;
  // Model FLOPs: per step and token the teacher's forward and the student's forward and backward
  // (counted as three forwards), prune::flops_per_token at the batch's sequence length.
  double flops = 0;
  long tokens = 0;
  bool budget_exhausted = false;
};

namespace e2e_detail {

// The clocks of an end-to-end trainer with a quality probe: training wall and processor seconds with the
// probe's evaluations taken out, and the curve points the probe gives (its buffers kept out of the
// tracker's peaks).
class probe_clock {
 public:
  double training_seconds() const { return clock_.seconds() - eval_wall_; }
  double training_cpu() const { return cpu_.seconds() - eval_cpu_; }
  double eval_seconds() const { return eval_wall_; }
  double eval_cpu_seconds() const { return eval_cpu_; }
  long last_step() const { return last_; }

  // Under a wall-clock budget of `seconds` (> 0; 0: none): false once training time has passed it; at
  // step 4 the schedule is fitted, from the first three steps' pace, to the steps the rest allows.
  bool within_time(long s, double seconds, long steps, optim::cosine_schedule& sched) const {
    if (seconds <= 0) return true;
    const double elapsed = training_seconds();
    if (elapsed >= seconds) return false;
    if (s == 4) sched.total_steps = std::max(sched.warmup_steps, steps_within_seconds(steps, 3, 3, elapsed, seconds - elapsed));
    return true;
  }
  // Where a progress bar made by progress_bar() stands after step s.
  long bar_position(long s, double seconds) const { return seconds > 0 ? static_cast<long>(training_seconds()) : s; }

  // With a probe: its value for the model after step s, at `flops`, appended to `curve`.
  void evaluate(const quality_probe& probe, long s, double flops, std::vector<curve_point>& curve, std::string_view who) {
    if (!probe) return;
    const double at = training_seconds(), cpu_at = training_cpu();
    const double q = run_probe(probe, eval_wall_, eval_cpu_, who, s);
    curve.push_back({s, at, cpu_at, flops, q});
    last_ = s;
  }

 private:
  timer clock_;
  cpu_timer cpu_;
  double eval_wall_ = 0, eval_cpu_ = 0;
  long last_ = -1;
};

// A trainer's progress bar (none unless `on`): in training seconds under a wall-clock budget of
// `seconds`, otherwise in steps.
inline std::unique_ptr<progress> progress_bar(bool on, std::string label, double seconds, long steps) {
  if (!on) return nullptr;
  return std::make_unique<progress>(std::move(label), seconds > 0 ? static_cast<long>(std::ceil(seconds)) : steps);
}

// A trainer's compute peak, from the memory tracker: made before the trainer allocates anything, with
// `held`, the bytes its models hold in the backend's compute tier; bytes() is the tier's peak since then
// less what other objects held when it was made.
template <class Backend>
class compute_peak {
 public:
  explicit compute_peak(std::size_t held) {
    const std::size_t now = memory().current_compute(Backend::memory_tier);
    others_ = now > held ? now - held : 0;
    memory().reset_peak(Backend::memory_tier);
  }
  std::size_t bytes() const {
    const std::size_t tracked = memory().peak_compute(Backend::memory_tier);
    return tracked > others_ ? tracked - others_ : 0;
  }

 private:
  std::size_t others_ = 0;
};

// The student's activation checkpointing set for a trainer's run and put back as it was when the run
// ends, however it ends.
template <class Student>
class checkpointing_scope {
 public:
  checkpointing_scope(Student& student, bool on) : student_(student), was_(student.activation_checkpointing()) {
    student_.set_activation_checkpointing(on);
  }
  ~checkpointing_scope() { student_.set_activation_checkpointing(was_); }
  checkpointing_scope(const checkpointing_scope&) = delete;
  checkpointing_scope& operator=(const checkpointing_scope&) = delete;

 private:
  Student& student_;
  bool was_;
};

// The sequences of one micro-batch of a batch of B, checked: opt.micro_batches must divide B.
inline index_t micro_batch_rows(const e2e_loop_options& opt, index_t B, std::string_view who) {
  check(opt.micro_batches >= 1 && B % opt.micro_batches == 0, who, ": micro_batches is ", opt.micro_batches,
        ", expected a divisor of the batch of ", B, " sequences");
  return B / opt.micro_batches;
}

// The step loop of both end-to-end trainers, step by step: the budget, the batch (uploaded to `tok`),
// zero_grad, then for each of opt.micro_batches micro-batches k (rows k b .. (k + 1) b - 1, b = B / the
// count) the trainer's forward and loss (`micro_loss(ids, rows, k)`, with `ids` the whole batch on the
// host and `rows` the micro-batch's tokens on the backend; it leaves what backward needs), a check that
// the loss is finite and the trainer's `micro_backward()`; the gradients scaled to the batch mean,
// clipping and the AdamW step at the cosine schedule's rate; then the result's counts, a metrics record
// with the tracker's bytes, the progress bar (`bar_label` and `loss_label` before the loss) and the
// probe's cadence; at the end the training peak from `peak`. Fills every field of `res` but
// declared_compute_bytes and batch_bytes.
template <class Backend, class Student, class MicroLoss, class MicroBackward>
void step_loop(Student& student, const data::batch_loader& loader, index_t B, index_t T, const e2e_loop_options& opt,
               metrics_writer* metrics, std::string_view who, const std::string& bar_label, const std::string& loss_label,
               double step_flops, const compute_peak<Backend>& peak, optim::adamw<Backend>& adam, buffer<Backend>& tok,
               MicroLoss&& micro_loss, MicroBackward&& micro_backward, e2e_result& res) {
  auto& be = student.backend();
  constexpr tier ct = Backend::memory_tier;
  const index_t m = opt.micro_batches, b = micro_batch_rows(opt, B, who);
  // With a wall-clock budget the schedule is fitted, after a few steps, to the steps the budget allows.
  check(opt.warmup_steps >= 0, who, ": warmup_steps is ", opt.warmup_steps, ", expected >= 0");
  optim::cosine_schedule sched{opt.lr, opt.min_lr, opt.warmup_steps, std::max(opt.steps, opt.warmup_steps)};
  std::vector<std::int32_t> ids, targets;
  const auto bar = progress_bar(opt.progress_bar, bar_label, opt.time_budget_seconds, opt.steps);
  probe_clock clock;
  double next_eval = opt.eval_every_seconds;
  auto evaluate = [&](long s) { clock.evaluate(opt.probe, s, res.flops, res.curve, who); };
  if (opt.probe_start) evaluate(0);
  for (long s = 1; s <= opt.steps; ++s) {
    if (s > opt.min_steps && !clock.within_time(s, opt.time_budget_seconds, opt.steps, sched)) {
      res.budget_exhausted = true;
      break;
    }
    const std::uint64_t batch =
        opt.first_batch + static_cast<std::uint64_t>(opt.cycle_batches > 0 ? (s - 1) % opt.cycle_batches : s - 1);
    loader.batch(batch, ids, targets);
    be.from_host(tok.data(), ids.data(), tok.bytes());
    double loss = 0, lr = 0;
    try {
      student.zero_grad();
      for (index_t k = 0; k < m; ++k) {
        const tensor rows(static_cast<std::int32_t*>(tok.data()) + k * b * T, dtype::i32, {b, T});
        const double part = micro_loss(ids, rows, k);
        check(std::isfinite(part), "the loss is ", part, m > 1 ? " in micro-batch " + std::to_string(k) : std::string());
        micro_backward();
        loss += part;
      }
      loss /= static_cast<double>(m);
      if (m > 1) ops::scale(be, student.grads(), 1.0 / static_cast<double>(m));
      optim::clip_grad_norm(be, student.grads(), opt.clip);
      lr = sched.lr(s);
      adam.step(student.grads(), lr);
    } catch (const lwcl::error& e) {
      fail(who, ": stopped at step ", s, ": ", e.what());
    }
    if (s == 1) res.loss_first = loss;
    res.loss_last = loss;
    res.steps = s;
    res.tokens += B * T;
    res.flops += step_flops;
    if (metrics) {
      const auto rss = process_resident_split();
      nlohmann::json rec = {{"step", s}, {"batch", batch}, {"loss", loss}, {"lr", lr},
                            {"seconds", opt.seconds_offset + clock.training_seconds()}, {"resident", rss.total}};
      if (!opt.metrics_stage.empty()) {
        rec["stage"] = opt.metrics_stage;
        rec["global_step"] = opt.global_step_offset + s;
      }
      rec["resident_anon"] = rss.anon;
      rec["resident_file"] = rss.file;
      // The tracker's bytes now, as the pipeline's step records have them (filled field by field: see
      // eval_record on nvcc).
      nlohmann::json mem;
      mem["compute"] = memory().current_compute(ct);
      mem["tracker"] = memory().current(ct);
      rec["memory"] = mem;
      metrics->write(rec);
    }
    if (bar) bar->update(clock.bar_position(s, opt.time_budget_seconds), loss_label + " " + std::to_string(loss).substr(0, 7));
    if ((opt.eval_every > 0 && s % opt.eval_every == 0) ||
        (opt.eval_every_seconds > 0 && clock.training_seconds() >= next_eval)) {
      evaluate(s);
      if (metrics && opt.probe && opt.metrics_stage.empty()) metrics->write(eval_record(res.curve.back()));
      while (opt.eval_every_seconds > 0 && next_eval <= clock.training_seconds()) next_eval += opt.eval_every_seconds;
    }
  }
  if (bar) bar->finish();
  if (clock.last_step() != res.steps) evaluate(res.steps);
  res.eval_seconds = clock.eval_seconds();
  res.eval_cpu_seconds = clock.eval_cpu_seconds();
  res.seconds = clock.training_seconds();
  res.cpu_seconds = clock.training_cpu();
  res.peak_compute_bytes = peak.bytes();
}

}  // namespace e2e_detail

template <class Backend>
e2e_result train_e2e_kd(model::transformer<Backend>& teacher, model::transformer<Backend>& student,
                        const data::batch_loader& loader, index_t B, index_t T, const e2e_options& opt,
                        metrics_writer* metrics = nullptr) {
  auto& be = student.backend();
  check(teacher.config().vocab == student.config().vocab, "train_e2e_kd: teacher vocabulary ", teacher.config().vocab,
        " != student vocabulary ", student.config().vocab);
  check(opt.steps >= 1, "train_e2e_kd: steps must be at least 1");
  check(opt.cycle_batches >= 0, "train_e2e_kd: cycle_batches is ", opt.cycle_batches, ", expected 0 (fresh batches) or more");
  check(opt.eval_every >= 0 && opt.eval_every_seconds >= 0, "train_e2e_kd: eval_every is ", opt.eval_every,
        " and eval_every_seconds ", opt.eval_every_seconds, ", expected >= 0");
  check(opt.hidden_mse_weight >= 0, "train_e2e_kd: hidden_mse_weight is ", opt.hidden_mse_weight, ", expected >= 0");
  const bool hidden = opt.hidden_mse_weight > 0;
  check(!hidden || teacher.config().d_model == student.config().d_model, "train_e2e_kd: a hidden-state MSE needs equal "
        "widths, the teacher has ", teacher.config().d_model, " and the student ", student.config().d_model);
  const index_t V = student.config().vocab, b = e2e_detail::micro_batch_rows(opt, B, "train_e2e_kd");
  const e2e_detail::checkpointing_scope checkpointing(student, opt.checkpoint_activations);
  const e2e_detail::compute_peak<Backend> peak(teacher.resident_bytes() + student.resident_bytes());
  optim::adamw_config oc;
  oc.lr = opt.lr;
  oc.weight_decay = opt.weight_decay;
  optim::adamw<Backend> adam(be, student.params(), oc);
  owned_tensor<Backend> tlogits(be, student.type(), {b, T, V}), dlogits(be, student.type(), {b, T, V}),
      scratch(be, student.type(), {2 * b * T});
  owned_tensor<Backend> thidden, dhidden;
  if (hidden) {
    thidden = owned_tensor<Backend>(be, student.type(), {b, T, student.config().d_model});
    dhidden = owned_tensor<Backend>(be, student.type(), {b, T, student.config().d_model});
  }
  buffer<Backend> tok(be, static_cast<std::size_t>(B * T) * sizeof(std::int32_t));
  e2e_result res;
  const double step_flops = static_cast<double>(B * T) * (prune::flops_per_token(teacher.config(), T) +
                                                          (opt.checkpoint_activations ? 4 : 3) *
                                                              prune::flops_per_token(student.config(), T));
  // The loss of a micro-batch, its gradients left in dlogits (and dhidden) for backward_logits.
  auto micro_loss = [&](const std::vector<std::int32_t>&, const tensor& rows, index_t) {
    teacher.infer_logits(rows, tlogits.view(), hidden ? thidden.view() : tensor());
    const tensor slogits = student.forward_logits(rows);
    be.fill_zero(dlogits.view().data, dlogits.view().bytes());
    double loss = ops::logit_kl_loss(be, dlogits.view(), scratch.view(), slogits, tlogits.view(), opt.temperature);
    if (hidden) {
      be.fill_zero(dhidden.view().data, dhidden.view().bytes());
      loss += opt.hidden_mse_weight *
              ops::mse_loss(be, dhidden.view(), scratch.view(), student.last_hidden(), thidden.view(), opt.hidden_mse_weight);
    }
    return loss;
  };
  auto micro_backward = [&] { student.backward_logits(dlogits.view(), hidden ? dhidden.view() : tensor()); };
  e2e_detail::step_loop(student, loader, B, T, opt, metrics, "train_e2e_kd", "e2e_kd", "kl", step_flops, peak,
                        adam, tok, micro_loss, micro_backward, res);
  res.declared_compute_bytes = teacher.parameter_bytes() + teacher.inference_bytes() + student.parameter_bytes() +
                               adam.state_bytes() + student.activation_bytes() + tlogits.view().bytes() +
                               dlogits.view().bytes() + scratch.view().bytes() + tok.bytes() +
                               (hidden ? thidden.view().bytes() + dhidden.view().bytes() : 0);
  res.batch_bytes = res.declared_compute_bytes - (teacher.parameter_bytes() + student.parameter_bytes() +
                                                  adam.state_bytes() + tok.bytes());
  return res;
}

}  // namespace lwcl::distill
