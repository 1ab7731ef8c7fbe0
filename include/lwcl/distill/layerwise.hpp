#pragma once
// Layer-wise recovery of a pruned student, the two-stage reading of DESIGN.md section 1 with its
// features held in host memory: a teacher pass caches the teacher's boundary features for a set of
// training batches; stage 1 trains every segment on teacher inputs; stage 2 walks the segments front
// to back on student inputs (the student's own upstream features, recomputed after each segment).
// Only one segment's weights, gradients, optimiser state and activations are resident at a time.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/core/metrics.hpp"
#include "lwcl/core/progress.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/data/loader.hpp"
#include "lwcl/distill/segment_trainer.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/optim/schedule.hpp"
#include "lwcl/prune/surgery.hpp"

namespace lwcl::distill {

struct segment_range {
  index_t first, last;  // student layers [first, last)
};

// Segments of `n` layers each (the last may be shorter).
inline std::vector<segment_range> uniform_segments(index_t n_layers, index_t n) {
  check(n >= 1, "uniform_segments: segment size must be at least 1, got ", n);
  std::vector<segment_range> out;
  for (index_t a = 0; a < n_layers; a += n) out.push_back({a, std::min(n_layers, a + n)});
  return out;
}

struct layerwise_options {
  std::vector<segment_range> segments;  // empty: one layer per segment
  long stage1_steps = 100;              // per segment, on teacher inputs
  long stage2_steps = 100;              // per segment, front to back on student inputs (0: skip stage 2)
  double lr = 1e-3, min_lr = 1e-4;      // cosine decay over each segment's steps
  double weight_decay = 0.0;
  feature_loss loss = feature_loss::nmse;
  index_t feature_batches = 8;  // training batches whose boundary features are cached (cycled)
  double time_budget_seconds = 0;  // > 0: stop early when the wall clock passes it (both stages share it)
  bool progress_bar = true;
};

struct segment_report {
  index_t first, last;
  int stage;
  double loss_first = 0, loss_last = 0;
  long steps = 0;
};

struct layerwise_result {
  std::vector<segment_report> segments;
  std::size_t peak_compute_bytes = 0;  // the largest segment's resident bytes
  std::size_t cache_bytes = 0;         // cached boundary features
  double seconds = 0;
  long tokens = 0;  // tokens processed by segment steps (batch tokens x steps)
  bool budget_exhausted = false;
};

namespace layerwise_detail {

// The hidden state entering each teacher layer and leaving the last one, h_0 .. h_L, for one batch,
// as doubles in host memory.
template <class Backend>
std::vector<std::vector<double>> teacher_features(model::transformer<Backend>& net, const std::vector<std::int32_t>& ids,
                                                  index_t B, index_t T, const std::vector<index_t>& wanted) {
  auto& be = net.backend();
  const auto& cfg = net.config();
  const index_t C = cfg.d_model;
  const dtype t = net.type();
  owned_tensor<Backend> x(be, t, {B, T, C}), y(be, t, {B, T, C});
  buffer<Backend> tok(be, ids.size() * sizeof(std::int32_t));
  be.from_host(tok.data(), ids.data(), tok.bytes());
  ops::embedding_forward(be, x.view(), tensor(tok.data(), dtype::i32, {B, T}), net.param("wte"),
                         net.layout().contains("wpe") ? net.param("wpe") : tensor());
  std::vector<std::vector<double>> out(wanted.size());
  auto grab = [&](index_t boundary, const tensor& h) {
    for (std::size_t i = 0; i < wanted.size(); ++i)
      if (wanted[i] == boundary) {
        out[i].resize(static_cast<std::size_t>(h.numel()));
        ops::dispatch_float("teacher_features", t, [&](auto z) {
          using E = decltype(z);
          std::vector<E> tmp(out[i].size());
          be.to_host(tmp.data(), h.data, h.bytes());
          std::copy(tmp.begin(), tmp.end(), out[i].begin());
        });
      }
  };
  grab(0, x.view());
  for (index_t l = 0; l < cfg.n_layers(); ++l) {
    const auto sh = model::shape_of_layer(cfg, l);
    model::block_acts<Backend> a(be, sh, B, T, t);
    model::block_forward(be, sh, model::bind_block(net.layout(), model::layer_prefix(l), net.params().data, t), a, x.view(),
                         y.view());
    std::swap(x, y);
    grab(l + 1, x.view());
  }
  return out;
}

template <class Backend>
void to_backend(Backend& be, const tensor& dst, const std::vector<double>& src) {
  ops::dispatch_float("layerwise", dst.type, [&](auto z) {
    using E = decltype(z);
    std::vector<E> tmp(src.begin(), src.end());
    be.from_host(dst.data, tmp.data(), tmp.size() * sizeof(E));
  });
}
template <class Backend>
std::vector<double> to_host(Backend& be, const tensor& src) {
  std::vector<double> out(static_cast<std::size_t>(src.numel()));
  ops::dispatch_float("layerwise", src.type, [&](auto z) {
    using E = decltype(z);
    std::vector<E> tmp(out.size());
    be.to_host(tmp.data(), src.data, src.bytes());
    std::copy(tmp.begin(), tmp.end(), out.begin());
  });
  return out;
}

}  // namespace layerwise_detail

// Recovers `student` (modified in place) from `teacher`. teacher_layer_of[i] is the teacher layer that
// student layer i was cut from (identity after width pruning; the kept layers after layer removal), so
// segment [a, b) learns to map the teacher's feature entering layer teacher_layer_of[a] to the one
// leaving layer teacher_layer_of[b - 1]. Training batches come from `loader` (batches 0 ..
// feature_batches - 1, cycled).
template <class Backend>
layerwise_result train_layerwise(model::transformer<Backend>& teacher, model::transformer<Backend>& student,
                                 const std::vector<index_t>& teacher_layer_of, const data::batch_loader& loader, index_t B,
                                 index_t T, layerwise_options opt, metrics_writer* metrics = nullptr) {
  auto& be = student.backend();
  const auto& scfg = student.config();
  const index_t L = scfg.n_layers(), C = scfg.d_model;
  check(static_cast<index_t>(teacher_layer_of.size()) == L, "train_layerwise: teacher_layer_of has ",
        teacher_layer_of.size(), " entries for a student of ", L, " layers");
  check(teacher.config().d_model == C, "train_layerwise: teacher width ", teacher.config().d_model, " != student width ", C);
  for (index_t i = 0; i < L; ++i)
    check(teacher_layer_of[static_cast<std::size_t>(i)] >= 0 &&
              teacher_layer_of[static_cast<std::size_t>(i)] < teacher.config().n_layers() &&
              (i == 0 || teacher_layer_of[static_cast<std::size_t>(i)] > teacher_layer_of[static_cast<std::size_t>(i - 1)]),
          "train_layerwise: teacher_layer_of must rise strictly inside the teacher's layers");
  if (opt.segments.empty()) opt.segments = uniform_segments(L, 1);
  check(opt.segments.front().first == 0 && opt.segments.back().last == L, "train_layerwise: segments must cover [0, ", L, ")");
  for (std::size_t k = 1; k < opt.segments.size(); ++k)
    check(opt.segments[k].first == opt.segments[k - 1].last, "train_layerwise: segments must be contiguous");
  check(opt.feature_batches >= 1, "train_layerwise: feature_batches must be at least 1");

  timer clock;
  layerwise_result res;
  const auto& segs = opt.segments;
  // Teacher boundaries: the input of each segment's first layer, and the output of the last one.
  std::vector<index_t> in_boundary, out_boundary, wanted;
  for (const auto& s : segs) {
    in_boundary.push_back(teacher_layer_of[static_cast<std::size_t>(s.first)]);
    out_boundary.push_back(teacher_layer_of[static_cast<std::size_t>(s.last - 1)] + 1);
  }
  wanted = in_boundary;
  wanted.insert(wanted.end(), out_boundary.begin(), out_boundary.end());
  std::sort(wanted.begin(), wanted.end());
  wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
  auto index_of = [&](index_t b) { return static_cast<std::size_t>(std::find(wanted.begin(), wanted.end(), b) - wanted.begin()); };

  // feats[batch][boundary slot]
  std::vector<std::vector<std::vector<double>>> feats;
  std::vector<std::int32_t> ids, targets;
  for (index_t k = 0; k < opt.feature_batches; ++k) {
    loader.batch(static_cast<std::uint64_t>(k), ids, targets);
    feats.push_back(layerwise_detail::teacher_features(teacher, ids, B, T, wanted));
    for (const auto& f : feats.back()) res.cache_bytes += f.size() * sizeof(double);  // held as doubles
  }
  if (metrics) metrics->write({{"event", "teacher_features"}, {"boundaries", wanted.size()}, {"batches", opt.feature_batches},
                               {"cache_bytes", res.cache_bytes}, {"seconds", clock.seconds()}});

  auto params = prune::detail::host_params(student);
  optim::adamw_config oc;
  oc.lr = opt.lr;
  oc.weight_decay = opt.weight_decay;
  owned_tensor<Backend> x(be, student.type(), {B, T, C}), y(be, student.type(), {B, T, C});
  const long total_steps = static_cast<long>(segs.size()) * (opt.stage1_steps + opt.stage2_steps);
  std::unique_ptr<progress> bar;
  if (opt.progress_bar) bar = std::make_unique<progress>("layerwise", total_steps);
  long done = 0;
  auto over_budget = [&]() { return opt.time_budget_seconds > 0 && clock.seconds() >= opt.time_budget_seconds; };

  // One segment on a list of (input, target) pairs, `steps` steps; returns its report.
  // With a wall-clock budget, each remaining segment-stage gets an equal share of the time left, and
  // after a few steps its learning-rate schedule is fitted to the steps that share allows.
  long remaining_runs = static_cast<long>(segs.size()) * (opt.stage2_steps > 0 ? 2 : 1);
  auto train_segment = [&](std::size_t k, int stage, long steps, const std::vector<std::vector<double>*>& inputs) {
    segment_trainer<Backend> seg(be, scfg, segs[k].first, segs[k].last, student.layout(), params, student.type(), oc, opt.loss);
    optim::cosine_schedule sched{opt.lr, opt.min_lr, 0, std::max(1L, steps)};
    const double start = clock.seconds();
    const double deadline = opt.time_budget_seconds > 0
                                ? start + std::max(0.0, opt.time_budget_seconds - start) / static_cast<double>(remaining_runs)
                                : 0;
    --remaining_runs;
    segment_report rep{segs[k].first, segs[k].last, stage, 0, 0, 0};
    for (long s = 1; s <= steps && !over_budget() && !(deadline > 0 && clock.seconds() >= deadline); ++s) {
      if (deadline > 0 && s == 4) {
        const double per_step = (clock.seconds() - start) / 3.0;
        sched.total_steps = std::min(steps, 3 + static_cast<long>((deadline - clock.seconds()) / std::max(per_step, 1e-9)));
      }
      const auto b = static_cast<std::size_t>((s - 1) % opt.feature_batches);
      layerwise_detail::to_backend(be, x.view(), *inputs[b]);
      layerwise_detail::to_backend(be, y.view(), feats[b][index_of(out_boundary[k])]);
      const double l = seg.step(x.view(), y.view(), sched.lr(s));
      if (s == 1) rep.loss_first = l;
      rep.loss_last = l;
      rep.steps = s;
      res.tokens += B * T;
      if (metrics)
        metrics->write({{"stage", stage}, {"segment", k}, {"step", s}, {"loss", l}, {"seconds", clock.seconds()}});
      ++done;
      if (bar) bar->update(done, "stage " + std::to_string(stage) + " segment " + std::to_string(k));
    }
    res.peak_compute_bytes = std::max(res.peak_compute_bytes, seg.resident_bytes());
    seg.write_back(student.layout(), params);
    res.budget_exhausted = res.budget_exhausted || over_budget();
    return rep;
  };

  // Stage 1: teacher inputs; the segments are independent.
  for (std::size_t k = 0; k < segs.size(); ++k) {
    std::vector<std::vector<double>*> inputs;
    for (auto& f : feats) inputs.push_back(&f[index_of(in_boundary[k])]);
    res.segments.push_back(train_segment(k, 1, opt.stage1_steps, inputs));
  }
  // Stage 2: front to back on the student's own upstream features, recomputed with the segments
  // already trained in this stage.
  if (opt.stage2_steps > 0) {
    std::vector<std::vector<double>> student_in(feats.size());
    for (std::size_t b = 0; b < feats.size(); ++b) student_in[b] = feats[b][index_of(in_boundary[0])];
    for (std::size_t k = 0; k < segs.size(); ++k) {
      std::vector<std::vector<double>*> inputs;
      for (auto& f : student_in) inputs.push_back(&f);
      res.segments.push_back(train_segment(k, 2, opt.stage2_steps, inputs));
      if (k + 1 == segs.size()) break;
      // The next segment's student inputs: this segment's outputs with its stage-2 weights.
      segment_trainer<Backend> fwd(be, scfg, segs[k].first, segs[k].last, student.layout(), params, student.type(), oc, opt.loss);
      for (auto& f : student_in) {
        layerwise_detail::to_backend(be, x.view(), f);
        fwd.forward(x.view(), y.view());
        f = layerwise_detail::to_host(be, y.view());
      }
    }
  }
  if (bar) bar->finish();
  prune::detail::set_host_params(student, params);
  res.seconds = clock.seconds();
  return res;
}

}  // namespace lwcl::distill
