#pragma once
// Token (+ learned position) embedding, forward and backward: gpt2 and bert add a position table,
// llama and qwen2 pass none (their positions enter through RoPE). Backward accumulates into the tables
// with one writer per output element, so results do not depend on thread count or token repeats.

#include <cmath>
#include <cstdint>

#include "lwcl/core/config.hpp"
#include "lwcl/ops/common.hpp"

namespace lwcl::ops {

namespace kernel {

// One (b, t) row. An id outside [0, V) is caught on the host before launch; on a device it yields a
// NaN row, so the bad batch surfaces as a NaN loss instead of an out-of-bounds read.
template <class T>
struct embedding_forward_row {
  T* out;
  const std::int32_t* tokens;
  const T* wte;
  const T* wpe;  // may be null
  index_t T_len;
  index_t V;
  index_t C;

  LWCL_HD void operator()(index_t row) const {
    const index_t id = tokens[row];
    T* y = out + row * C;
    if (id < 0 || id >= V) {
      for (index_t c = 0; c < C; ++c) y[c] = static_cast<T>(NAN);
      return;
    }
    const T* e = wte + id * C;
    if (wpe) {
      const T* p = wpe + (row % T_len) * C;
      for (index_t c = 0; c < C; ++c) y[c] = T(compute_t<T>(e[c]) + compute_t<T>(p[c]));
    } else {
      for (index_t c = 0; c < C; ++c) y[c] = e[c];
    }
  }
};

// dwte columns: walks every token in order, so each dwte element has one writer and a fixed summation
// order. Out-of-range ids are skipped (the host rejects them before launch).
template <class T>
struct embedding_backward_wte_channel {
  T* dwte;
  const T* dout;
  const std::int32_t* tokens;
  index_t N;  // B * T
  index_t V;
  index_t C;

  // One chunk of column_chunk adjacent channels (contiguous reads and writes per token).
  LWCL_HD void operator()(index_t chunk) const {
    const index_t c0 = chunk * column_chunk;
    const index_t n = C - c0 < column_chunk ? C - c0 : column_chunk;
    for (index_t r = 0; r < N; ++r) {
      const index_t id = tokens[r];
      if (id < 0 || id >= V) continue;
      T* dst = dwte + id * C + c0;
      const T* src = dout + r * C + c0;
      for (index_t j = 0; j < n; ++j) dst[j] += compute_t<T>(src[j]);
    }
  }
};

// dwpe element (t, c): the sum over the batch of dout[b, t, c].
template <class T>
struct embedding_backward_wpe_elem {
  T* dwpe;
  const T* dout;
  index_t B;
  index_t T_len;
  index_t C;

  LWCL_HD void operator()(index_t i) const {
    compute_t<T> acc = 0;
    for (index_t b = 0; b < B; ++b) acc += compute_t<T>(dout[b * T_len * C + i]);
    dwpe[i] += acc;
  }
};

}  // namespace kernel

namespace detail {

inline void embedding_expect_tokens(std::string_view op, const tensor& tokens) {
  expect_nonempty(op, "tokens", tokens);
  check(tokens.type == dtype::i32, op, ": tokens has dtype ", dtype_name(tokens.type), ", expected i32");
  check(tokens.shape.rank() == 2, op, ": tokens has shape ", tokens.shape.str(), ", expected (B, T)");
}

// Host memory only: names the first id outside [0, V) by its (b, t) position.
inline void embedding_check_ids(std::string_view op, const tensor& tokens, index_t V) {
  const auto* ids = static_cast<const std::int32_t*>(tokens.data);
  const index_t T = tokens.shape[1];
  for (index_t i = 0; i < tokens.numel(); ++i)
    check(ids[i] >= 0 && ids[i] < V, op, ": token id ", ids[i], " at tokens[", i / T, ", ", i % T,
          "] is outside the vocabulary [0, ", V, ")");
}

// A position table (or its gradient) must be (P, C) with P >= T; an empty tensor means none.
inline void embedding_expect_positions(std::string_view op, std::string_view arg, const tensor& wpe, index_t T, index_t C) {
  if (!wpe.data) return;
  check(wpe.shape.rank() == 2 && wpe.shape[1] == C, op, ": ", arg, " has shape ", wpe.shape.str(), ", expected (P, ", C, ")");
  check(wpe.shape[0] >= T, op, ": ", arg, " has shape ", wpe.shape.str(), ", which holds ", wpe.shape[0],
        " positions, fewer than the sequence length T = ", T);
}

}  // namespace detail

// out[b, t] = wte[tokens[b, t]] + wpe[t]. tokens: i32 (B, T); wte: (V, C); wpe: (P, C) with P >= T, or an
// empty tensor for models without learned positions; out: (B, T, C).
template <class Backend>
void embedding_forward(Backend& be, const tensor& out, const tensor& tokens, const tensor& wte, const tensor& wpe) {
  constexpr std::string_view op = "embedding_forward";
  detail::embedding_expect_tokens(op, tokens);
  expect_nonempty(op, "wte", wte);
  check(wte.shape.rank() == 2, op, ": wte has shape ", wte.shape.str(), ", expected (V, C)");
  const index_t B = tokens.shape[0], T = tokens.shape[1], V = wte.shape[0], C = wte.shape[1];
  expect_shape(op, "out", out, shape{B, T, C});
  detail::embedding_expect_positions(op, "wpe", wpe, T, C);
  expect_same_dtype(op, {{"wte", &wte}, {"out", &out}, {"wpe", &wpe}});
  if constexpr (!Backend::is_device) detail::embedding_check_ids(op, tokens, V);
  dispatch_storage(op, wte.type, [&](auto t) {
    using E = decltype(t);
    be.for_each(B * T,
                kernel::embedding_forward_row<E>{out.ptr<E>(), tokens.ptr<std::int32_t>(), wte.ptr<E>(),
                                                 static_cast<const E*>(wpe.data), T, V, C},
                2 * C);
  });
}

// Accumulates the gradients of embedding_forward: dwte[tokens[b, t]] += dout[b, t] and
// dwpe[t] += sum over b of dout[b, t]. dwpe may be empty (no position table, or one kept frozen).
template <class Backend>
void embedding_backward(Backend& be, const tensor& dwte, const tensor& dwpe, const tensor& dout, const tensor& tokens) {
  constexpr std::string_view op = "embedding_backward";
  detail::embedding_expect_tokens(op, tokens);
  expect_nonempty(op, "dwte", dwte);
  check(dwte.shape.rank() == 2, op, ": dwte has shape ", dwte.shape.str(), ", expected (V, C)");
  const index_t B = tokens.shape[0], T = tokens.shape[1], V = dwte.shape[0], C = dwte.shape[1];
  expect_shape(op, "dout", dout, shape{B, T, C});
  detail::embedding_expect_positions(op, "dwpe", dwpe, T, C);
  expect_same_dtype(op, {{"dwte", &dwte}, {"dout", &dout}, {"dwpe", &dwpe}});
  if constexpr (!Backend::is_device) detail::embedding_check_ids(op, tokens, V);
  dispatch_storage(op, dwte.type, [&](auto t) {
    using E = decltype(t);
    be.for_each(column_chunks(C),
                kernel::embedding_backward_wte_channel<E>{dwte.ptr<E>(), dout.ptr<E>(), tokens.ptr<std::int32_t>(), B * T, V, C},
                column_chunk * B * T);
    if (dwpe.data)
      be.for_each(T * C, kernel::embedding_backward_wpe_elem<E>{static_cast<E*>(dwpe.data), dout.ptr<E>(), B, T, C}, B);
  });
}

}  // namespace lwcl::ops
