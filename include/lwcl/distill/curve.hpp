#pragma once
// A recovery's quality curve: held-out perplexity measured at fixed points of the training (every so
// many steps or training seconds, and at the end), each point carrying the cost spent to reach it in
// wall seconds, processor seconds and model FLOPs, with the evaluations' own time left out of all of
// them. Time to quality is read off a curve (first_reaching) rather than from separate runs per budget.

#include <cmath>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/core/error.hpp"
#include "lwcl/core/memory.hpp"
#include "lwcl/core/timer.hpp"

namespace lwcl::distill {

struct curve_point {
  long step = 0;             // the method's optimiser steps so far (a pipeline: segment and final KD steps)
  double seconds = 0;        // training wall seconds so far, evaluations excluded
  double cpu_seconds = 0;    // the process's processor seconds so far, evaluations excluded
  double flops = 0;          // model FLOPs so far
  double ppl = 0;            // held-out perplexity of the student at this point
};

// JSON (nlohmann::json or ordered_json): {"step", "seconds", "cpu_seconds", "flops", "ppl"}.
template <class Json>
void to_json(Json& j, const curve_point& p) {
  j = Json{{"step", p.step}, {"seconds", p.seconds}, {"cpu_seconds", p.cpu_seconds}, {"flops", p.flops}, {"ppl", p.ppl}};
}
template <class Json>
void from_json(const Json& j, curve_point& p) {
  p.step = j.at("step").template get<long>();
  p.seconds = j.at("seconds").template get<double>();
  p.cpu_seconds = j.at("cpu_seconds").template get<double>();
  p.flops = j.at("flops").template get<double>();
  p.ppl = j.at("ppl").template get<double>();
}

// A point as metrics.jsonl records it: {"event": "eval", "step", "ppl", "seconds"}. Filled field by
// field: nvcc's front end rejects the nested braced list in some of the templates that write it.
inline nlohmann::json eval_record(const curve_point& q) {
  nlohmann::json rec;
  rec["event"] = "eval";
  rec["step"] = q.step;
  rec["ppl"] = q.ppl;
  rec["seconds"] = q.seconds;
  return rec;
}

// Evaluates the model a run is training; returns its held-out perplexity.
using quality_probe = std::function<double()>;

// Runs `probe` so that it counts in no figure: its wall and processor seconds are added to `wall` and
// `cpu` (for the caller to take out of its clocks), the tracker's peaks are put back as they were
// before it, and a value that is not finite stops the run, `who` naming it, at `step`.
inline double run_probe(const quality_probe& probe, double& wall, double& cpu, std::string_view who, long step) {
  timer t;
  const double c0 = cpu_timer::now();
  const auto peaks = memory().save_peaks();  // the evaluation's buffers count in no peak
  const double q = probe();
  memory().restore_peaks(peaks);
  wall += t.seconds();
  cpu += cpu_timer::now() - c0;
  check(std::isfinite(q), who, ": the held-out figure after ", step, " steps is ", q);
  return q;
}

// The cost at which `curve` first reaches perplexity `target` or below: the first point at or below it,
// with seconds, processor seconds, FLOPs and steps interpolated linearly between it and the point before
// (in perplexity); nothing when no point reaches it.
inline std::optional<curve_point> first_reaching(const std::vector<curve_point>& curve, double target) {
  for (std::size_t i = 0; i < curve.size(); ++i) {
    if (!(curve[i].ppl <= target)) continue;
    if (i == 0 || !(curve[i - 1].ppl > curve[i].ppl)) return curve[i];
    const auto& a = curve[i - 1];
    const auto& b = curve[i];
    const double f = (a.ppl - target) / (a.ppl - b.ppl);  // in (0, 1]
    auto lerp = [f](double x, double y) { return x + f * (y - x); };
    curve_point p;
    p.step = static_cast<long>(std::lround(lerp(static_cast<double>(a.step), static_cast<double>(b.step))));
    p.seconds = lerp(a.seconds, b.seconds);
    p.cpu_seconds = lerp(a.cpu_seconds, b.cpu_seconds);
    p.flops = lerp(a.flops, b.flops);
    p.ppl = target;
    return p;
  }
  return std::nullopt;
}

}  // namespace lwcl::distill
