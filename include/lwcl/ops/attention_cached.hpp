#pragma once
// Attention of n new query positions over a key/value cache (incremental decoding): the queries sit
// at positions past .. past + n - 1 of one sequence, the cache holds keys and values for positions
// 0 .. past + n - 1, and query i sees keys 0 .. past + i (causal). Scale 1/sqrt(D); query head h reads
// kv head h / (H / KVH). Products are GEMMs, one per head; the softmax is a row functor, so the same
// source runs on both backends.

#include <type_traits>

#include "lwcl/core/config.hpp"
#include "lwcl/core/math.hpp"
#include "lwcl/ops/common.hpp"

namespace lwcl::ops {

namespace kernel {

// Softmax over one row of the (H, n, L) scores in place; row r is query (r % n), which sees the first
// past + (r % n) + 1 keys; the rest of the row becomes exactly 0.
template <class T>
struct attention_cached_softmax_row {
  T* probs;
  index_t n_new, L, past;

  LWCL_HD void operator()(index_t row) const {
    using C = compute_t<T>;
    T* p = probs + row * L;
    const index_t seen = past + row % n_new + 1;
    C m = p[0];
    for (index_t j = 1; j < seen; ++j) m = math::max(m, C(p[j]));
    C s = 0;
    for (index_t j = 0; j < seen; ++j) s += math::exp(C(p[j]) - m);
    const C inv = C(1) / s;
    for (index_t j = 0; j < seen; ++j) p[j] = T(math::exp(C(p[j]) - m) * inv);
    for (index_t j = seen; j < L; ++j) p[j] = T(0);
  }
};

}  // namespace kernel

// out (1, n, H, D) = softmax(q k^T / sqrt(D), causal from position `past`) v, with q (1, n, H, D) and
// k_cache, v_cache (1, cap, KVH, D) whose first past + n positions are filled; probs (H, n, past + n)
// is scratch (any tensor of at least that many elements, viewed so).
template <class Backend>
void attention_cached_forward(Backend& be, const tensor& out, const tensor& probs, const tensor& q, const tensor& k_cache,
                              const tensor& v_cache, index_t past) {
  constexpr std::string_view op = "attention_cached_forward";
  expect_nonempty(op, "q", q);
  expect_nonempty(op, "k_cache", k_cache);
  check(q.shape.rank() == 4 && q.shape[0] == 1, op, ": q has shape ", q.shape.str(), ", expected (1, n, H, D)");
  check(k_cache.shape.rank() == 4 && k_cache.shape[0] == 1 && k_cache.shape[3] == q.shape[3], op, ": k_cache has shape ",
        k_cache.shape.str(), ", expected (1, capacity, KVH, ", q.shape[3], ")");
  expect_shape(op, "v_cache", v_cache, k_cache.shape);
  expect_shape(op, "out", out, q.shape);
  const index_t n = q.shape[1], H = q.shape[2], D = q.shape[3], KVH = k_cache.shape[2], L = past + n;
  check(past >= 0 && L <= k_cache.shape[1], op, ": ", past, " cached positions and ", n, " new ones exceed the cache's ",
        k_cache.shape[1]);
  check(H % KVH == 0, op, ": ", KVH, " kv heads do not divide ", H, " query heads");
  check(probs.numel() >= H * n * L, op, ": probs holds ", probs.numel(), " elements, needs ", H * n * L);
  expect_same_dtype(op, {{"q", &q}, {"k_cache", &k_cache}, {"v_cache", &v_cache}, {"out", &out}, {"probs", &probs}});
  const index_t group = H / KVH, q_ld = H * D, kv_ld = KVH * D;
  dispatch_storage(op, q.type, [&](auto t) {
    using T = decltype(t);
    const compute_t<T> scale = compute_t<T>(1) / math::sqrt(static_cast<compute_t<T>>(D));
    const T *qp = q.ptr<T>(), *kp = k_cache.ptr<T>(), *vp = v_cache.ptr<T>();
    T *outp = out.ptr<T>(), *pp = probs.ptr<T>();
    for (index_t h = 0; h < H; ++h)
      be.gemm_batched(false, true, n, L, D, scale, qp + h * D, q_ld, 0, kp + (h / group) * D, kv_ld, 0, T(0),
                      pp + h * n * L, L, 0, 1);
    be.for_each(H * n, kernel::attention_cached_softmax_row<T>{pp, n, L, past}, 24 * L);
    for (index_t h = 0; h < H; ++h)
      be.gemm_batched(false, false, n, D, L, T(1), pp + h * n * L, L, 0, vp + (h / group) * D, kv_ld, 0, T(0), outp + h * D,
                      q_ld, 0, 1);
  });
}

}  // namespace lwcl::ops
