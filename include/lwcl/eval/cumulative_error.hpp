#pragma once
// The cumulative error curve (DESIGN.md section 1): for every student layer l, the relative error
// ||h^S - h^T|| / ||h^T|| of the hidden state leaving it against the teacher's hidden state at the end
// of the teacher layers it replaces (teacher boundary b[l + 1] of the layer map, model/layer_map.hpp),
// both models (decoders or encoders) run end to end from the same tokens. It shows where along depth a compressed student departs from its teacher, and how
// upstream error accumulates.

#include <cmath>
#include <cstdint>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/model/layer_map.hpp"
#include "lwcl/model/layer_outputs.hpp"
#include "lwcl/model/weights.hpp"
#include "lwcl/ops/common.hpp"

namespace lwcl::eval {

namespace cumulative_detail {

// The hidden state leaving every layer of `net` for tokens (B, T) in host memory, as doubles.
template <class Backend>
std::vector<std::vector<double>> layer_outputs(const model::weights<Backend>& net, const std::vector<std::int32_t>& ids,
                                               index_t B, index_t T) {
  std::vector<std::vector<double>> out;
  model::for_each_layer_output(net, ids, B, T, [&](index_t boundary, const tensor& x) {
    if (boundary == 0) return;
    out.push_back(ops::to_host_doubles(net.backend(), x, "cumulative_error"));
  });
  return out;
}

}  // namespace cumulative_detail

// Per student layer, the relative error of its output against the teacher's, over `batches` token
// batches (each B * T ids): sqrt(sum ||dh||^2 / sum ||h^T||^2) across the batches.
template <class Backend>
std::vector<double> cumulative_error(const model::weights<Backend>& teacher, const model::weights<Backend>& student,
                                     const std::vector<index_t>& boundaries,
                                     const std::vector<std::vector<std::int32_t>>& batches, index_t B, index_t T) {
  const index_t L = student.config().n_layers();
  model::check_boundary_map(boundaries, L, teacher.config().n_layers(), "cumulative_error");
  check(teacher.config().d_model == student.config().d_model, "cumulative_error: teacher width ",
        teacher.config().d_model, " != student width ", student.config().d_model);
  check(!batches.empty(), "cumulative_error: no token batches given");
  std::vector<double> diff(static_cast<std::size_t>(L), 0.0), ref(static_cast<std::size_t>(L), 0.0);
  for (const auto& ids : batches) {
    check(static_cast<index_t>(ids.size()) == B * T, "cumulative_error: a batch of ", ids.size(), " ids, expected ", B,
          " x ", T);
    const auto ht = cumulative_detail::layer_outputs(teacher, ids, B, T);
    const auto hs = cumulative_detail::layer_outputs(student, ids, B, T);
    for (index_t l = 0; l < L; ++l) {
      const auto& a = hs[static_cast<std::size_t>(l)];
      const auto& b = ht[static_cast<std::size_t>(boundaries[static_cast<std::size_t>(l) + 1] - 1)];
      for (std::size_t i = 0; i < a.size(); ++i) {
        diff[static_cast<std::size_t>(l)] += (a[i] - b[i]) * (a[i] - b[i]);
        ref[static_cast<std::size_t>(l)] += b[i] * b[i];
      }
    }
  }
  std::vector<double> out(static_cast<std::size_t>(L));
  for (std::size_t l = 0; l < out.size(); ++l) out[l] = ref[l] > 0 ? std::sqrt(diff[l] / ref[l]) : 0.0;
  return out;
}

// n consecutive batches of B x T tokens from the start of `ids`, the batches cumulative_error reads.
inline std::vector<std::vector<std::int32_t>> token_batches(const std::vector<std::int32_t>& ids, index_t B, index_t T,
                                                            index_t n) {
  std::vector<std::vector<std::int32_t>> out;
  const auto per = static_cast<std::size_t>(B * T);
  check(B > 0 && T > 0 && n >= 0, "token_batches: expected positive B and T and n >= 0, got B ", B, " T ", T, " n ", n);
  check(static_cast<std::size_t>(n) * per <= ids.size(), "token_batches: ", ids.size(), " tokens hold fewer than ", n,
        " batches of ", B, " x ", T);
  for (index_t k = 0; k < n; ++k) {
    const auto off = static_cast<std::ptrdiff_t>(static_cast<std::size_t>(k) * per);
    out.emplace_back(ids.begin() + off, ids.begin() + off + static_cast<std::ptrdiff_t>(per));
  }
  return out;
}

}  // namespace lwcl::eval
