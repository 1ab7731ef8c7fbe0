#pragma once
// How closely a student follows its teacher on a held-out sample, position by position: the mean
// KL(teacher || student) of the next-token distributions, in nats per predicted token, and top-1
// agreement, the share of positions whose most likely next token is the same for both; and the share
// of the pruning loss a recovery won back, (ppl_pruned - ppl_student) / (ppl_pruned - ppl_teacher).

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/eval/held_out.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/ops/common.hpp"
#include "lwcl/tensor/arena.hpp"

namespace lwcl::eval {

struct agreement_result {
  double kl = 0;    // mean KL(teacher || student), nats per predicted token
  double top1 = 0;  // share of predicted tokens where both models' argmax agree
  index_t tokens = 0;
  std::string sample;  // the held-out sample's protocol
};

namespace agreement_detail {

// One position's log-softmax of `z` (V logits) into `out`, in double.
inline void log_softmax(const double* z, index_t V, std::vector<double>& out) {
  double m = z[0];
  for (index_t v = 1; v < V; ++v) m = std::max(m, z[v]);
  double s = 0;
  for (index_t v = 0; v < V; ++v) s += std::exp(z[v] - m);
  const double lse = m + std::log(s);
  out.resize(static_cast<std::size_t>(V));
  for (index_t v = 0; v < V; ++v) out[static_cast<std::size_t>(v)] = z[v] - lse;
}

inline index_t argmax(const double* z, index_t V) {
  index_t best = 0;
  for (index_t v = 1; v < V; ++v)
    if (z[v] > z[best]) best = v;
  return best;
}

// The logits of `net` on window `w` (its first len tokens), as doubles on the host.
template <class Backend>
void window_logits(model::transformer<Backend>& net, const std::vector<std::int32_t>& w, index_t len, buffer<Backend>& dinp,
                   buffer<Backend>& dlog, std::vector<double>& out) {
  auto& be = net.backend();
  const index_t V = net.config().vocab;
  be.from_host(dinp.data(), w.data(), static_cast<std::size_t>(len) * sizeof(std::int32_t));
  const tensor logits(dlog.data(), net.type(), {1, len, V});
  net.infer_logits(tensor(dinp.data(), dtype::i32, {1, len}), logits);
  out.resize(static_cast<std::size_t>(len * V));
  ops::dispatch_float("teacher_agreement", net.type(), [&](auto z) {
    using E = decltype(z);
    std::vector<E> host(out.size());
    be.to_host(host.data(), dlog.data(), host.size() * sizeof(E));
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(host[i]);
  });
}

}  // namespace agreement_detail

// KL(teacher || student) and top-1 agreement over every predicted position of the sample's windows.
template <class Backend>
agreement_result teacher_agreement(model::transformer<Backend>& teacher, model::transformer<Backend>& student,
                                   const held_out_sample& s) {
  using namespace agreement_detail;
  const index_t V = teacher.config().vocab;
  check(student.config().vocab == V, "teacher_agreement: the teacher has ", V, " tokens, the student ",
        student.config().vocab, "; expected the same vocabulary");
  check(s.window >= 1 && s.window <= std::min(teacher.config().max_seq, student.config().max_seq), "teacher_agreement: the "
        "sample's window ", s.window, " must be within both models' max_seq");
  auto& be = teacher.backend();
  buffer<Backend> dinp(be, static_cast<std::size_t>(s.window) * sizeof(std::int32_t));
  buffer<Backend> tlog(be, static_cast<std::size_t>(s.window * V) * dtype_size(teacher.type()));
  buffer<Backend> slog(be, static_cast<std::size_t>(s.window * V) * dtype_size(student.type()));
  std::vector<double> zt, zs, lt, ls;
  agreement_result r;
  r.sample = s.protocol();
  double kl = 0;
  index_t agree = 0;
  for (std::size_t k = 0; k < s.windows.size(); ++k) {
    const auto& w = s.windows[k];
    const auto len = static_cast<index_t>(w.size()) - 1;
    window_logits(teacher, w, len, dinp, tlog, zt);
    window_logits(student, w, len, dinp, slog, zs);
    for (index_t t = 0; t < len; ++t) {
      const double* a = zt.data() + t * V;
      const double* b = zs.data() + t * V;
      log_softmax(a, V, lt);
      log_softmax(b, V, ls);
      double d = 0;
      for (std::size_t v = 0; v < lt.size(); ++v) d += std::exp(lt[v]) * (lt[v] - ls[v]);
      check(std::isfinite(d), "teacher_agreement: non-finite KL at position ", t, " of window ", k, " of the ", s.split,
            " sample (document ", s.document_of[k], ")");
      kl += d;
      agree += argmax(a, V) == argmax(b, V) ? 1 : 0;
    }
    r.tokens += len;
  }
  check(r.tokens > 0, "teacher_agreement: the ", s.split, " sample predicts no token");
  r.kl = kl / static_cast<double>(r.tokens);
  r.top1 = static_cast<double>(agree) / static_cast<double>(r.tokens);
  return r;
}

// The share of the pruning loss a recovery won back: 1 at the teacher's perplexity, 0 at the pruned
// model's, negative below it; none when pruning did not raise the perplexity (nothing to win back).
inline std::optional<double> recovered_share(double ppl_pruned, double ppl_student, double ppl_teacher) {
  if (!(ppl_pruned > ppl_teacher)) return std::nullopt;
  return (ppl_pruned - ppl_student) / (ppl_pruned - ppl_teacher);
}

}  // namespace lwcl::eval
