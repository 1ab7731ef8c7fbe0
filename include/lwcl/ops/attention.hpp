#pragma once
// Scaled dot-product attention (scale 1/sqrt(D)) over (B, T, H, D) activations, multi-head and
// grouped-query: query head h reads kv head h / (H / KVH). Products are GEMMs batched over B, one call
// per head; softmax and its backward are row functors. Forward saves the probabilities for the
// backward, which accumulates (+=) into dq, dk, dv.

#include <type_traits>

#include "lwcl/core/config.hpp"
#include "lwcl/core/math.hpp"
#include "lwcl/ops/common.hpp"

namespace lwcl::ops {

namespace kernel {

// Softmax over one row of the (B, H, T, T) scores, in place. Under the causal mask query t sees keys
// 0..t; the rest of the row is set to exactly 0, so the backward needs no mask of its own.
template <class T>
struct attention_softmax_row {
  T* probs;
  index_t T_len;
  bool causal;

  LWCL_HD void operator()(index_t row) const {
    using C = compute_t<T>;
    T* p = probs + row * T_len;
    const index_t n = causal ? row % T_len + 1 : T_len;
    C m = p[0];
    for (index_t j = 1; j < n; ++j) m = math::max(m, C(p[j]));
    C s = 0;
    if constexpr (std::is_same_v<T, C>) {
      for (index_t j = 0; j < n; ++j) {
        p[j] = math::exp(p[j] - m);
        s += p[j];
      }
      const C inv = C(1) / s;
      for (index_t j = 0; j < n; ++j) p[j] *= inv;
    } else {
      // bf16 storage: the sum is formed from the unrounded exponentials (recomputed in the second
      // pass), so the row is normalised before it is rounded, once.
      for (index_t j = 0; j < n; ++j) s += math::exp(C(p[j]) - m);
      const C inv = C(1) / s;
      for (index_t j = 0; j < n; ++j) p[j] = T(math::exp(C(p[j]) - m) * inv);
    }
    for (index_t j = n; j < T_len; ++j) p[j] = T(0);
  }
};

// Turns dprobs into the gradient of the (unscaled) scores, in place: ds_j = p_j (dp_j - sum_k p_k dp_k).
// Masked entries become exactly 0 whatever the GEMM left there.
template <class T>
struct attention_softmax_backward_row {
  T* dprobs;
  const T* probs;
  index_t T_len;
  bool causal;

  LWCL_HD void operator()(index_t row) const {
    T* dp = dprobs + row * T_len;
    const T* p = probs + row * T_len;
    const index_t n = causal ? row % T_len + 1 : T_len;
    using C = compute_t<T>;
    C dot = 0;
    for (index_t j = 0; j < n; ++j) dot += C(p[j]) * C(dp[j]);
    for (index_t j = 0; j < n; ++j) dp[j] = T(C(p[j]) * (C(dp[j]) - dot));
    for (index_t j = n; j < T_len; ++j) dp[j] = T(0);
  }
};

}  // namespace kernel

namespace attention_detail {

struct dims {
  index_t B, T, H, KVH, D;
};

// Checks q, k, v against each other and returns their extents.
inline dims check_qkv(std::string_view op, const tensor& q, const tensor& k, const tensor& v) {
  expect_nonempty(op, "q", q);
  expect_nonempty(op, "k", k);
  expect_nonempty(op, "v", v);
  check(q.shape.rank() == 4, op, ": q has shape ", q.shape.str(), ", expected rank 4 [B, T, H, D]");
  check(k.shape.rank() == 4, op, ": k has shape ", k.shape.str(), ", expected rank 4 [B, T, KVH, D]");
  const dims d{q.shape[0], q.shape[1], q.shape[2], k.shape[2], q.shape[3]};
  check(k.shape[0] == d.B && k.shape[1] == d.T && k.shape[3] == d.D, op, ": k has shape ", k.shape.str(),
        ", expected [", d.B, ", ", d.T, ", KVH, ", d.D, "] to match q ", q.shape.str());
  check(d.H % d.KVH == 0, op, ": the ", d.H, " query heads (q ", q.shape.str(), ") cannot be split evenly over the ", d.KVH,
        " kv heads (k ", k.shape.str(), "); the number of kv heads must divide the number of query heads");
  expect_shape(op, "v", v, k.shape);
  return d;
}

}  // namespace attention_detail

// out = softmax(q k^T / sqrt(D) + mask) v per batch and query head. q, out: (B, T, H, D); k, v:
// (B, T, KVH, D) with KVH dividing H; probs: (B, H, T, T) receives the softmax probabilities, with
// masked entries exactly 0 when causal. out must not overlap k, v or probs.
template <class Backend>
void attention_forward(Backend& be, const tensor& out, const tensor& probs, const tensor& q, const tensor& k, const tensor& v,
                       bool causal) {
  constexpr std::string_view op = "attention_forward";
  // Plain copies rather than a structured binding: clang before 16 cannot capture bindings in lambdas.
  const attention_detail::dims d = attention_detail::check_qkv(op, q, k, v);
  const index_t B = d.B, T_len = d.T, H = d.H, KVH = d.KVH, D = d.D;
  expect_shape(op, "out", out, q.shape);
  expect_nonempty(op, "out", out);
  expect_shape(op, "probs", probs, shape{B, H, T_len, T_len});
  expect_nonempty(op, "probs", probs);
  expect_same_dtype(op, {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}, {"probs", &probs}});
  const index_t group = H / KVH;
  const index_t q_ld = H * D, kv_ld = KVH * D;  // row strides of one token
  const index_t q_bs = T_len * q_ld, kv_bs = T_len * kv_ld, p_bs = H * T_len * T_len;  // batch strides
  dispatch_storage(op, q.type, [&](auto t) {
    using T = decltype(t);
    const compute_t<T> scale = compute_t<T>(1) / math::sqrt(static_cast<compute_t<T>>(D));
    const T *qp = q.ptr<T>(), *kp = k.ptr<T>(), *vp = v.ptr<T>();
    T *outp = out.ptr<T>(), *pp = probs.ptr<T>();
    // Every head's scores first, then one softmax over all B*H*T rows, then every head's P v: out is
    // written only after q has been read in full.
    for (index_t h = 0; h < H; ++h) {
      const index_t g = h / group;
      be.gemm_batched(false, true, T_len, T_len, D, scale, qp + h * D, q_ld, q_bs, kp + g * D, kv_ld, kv_bs, T(0),
                      pp + h * T_len * T_len, T_len, p_bs, B);
    }
    be.for_each(B * H * T_len, kernel::attention_softmax_row<T>{pp, T_len, causal}, 24 * T_len);
    for (index_t h = 0; h < H; ++h) {
      const index_t g = h / group;
      be.gemm_batched(false, false, T_len, D, T_len, T(1), pp + h * T_len * T_len, T_len, p_bs, vp + g * D, kv_ld, kv_bs,
                      T(0), outp + h * D, q_ld, q_bs, B);
    }
  });
}

// Accumulates the gradients of attention_forward into dq, dk, dv (the query heads of a group all add
// into their kv head). probs is the forward's output; dprobs is scratch of the same shape, overwritten.
template <class Backend>
void attention_backward(Backend& be, const tensor& dq, const tensor& dk, const tensor& dv, const tensor& dprobs,
                        const tensor& dout, const tensor& q, const tensor& k, const tensor& v, const tensor& probs,
                        bool causal) {
  constexpr std::string_view op = "attention_backward";
  const attention_detail::dims d = attention_detail::check_qkv(op, q, k, v);
  const index_t B = d.B, T_len = d.T, H = d.H, KVH = d.KVH, D = d.D;
  expect_shape(op, "dout", dout, q.shape);
  expect_shape(op, "dq", dq, q.shape);
  expect_shape(op, "dk", dk, k.shape);
  expect_shape(op, "dv", dv, v.shape);
  const shape ps{B, H, T_len, T_len};
  expect_shape(op, "probs", probs, ps);
  expect_shape(op, "dprobs", dprobs, ps);
  expect_nonempty(op, "dout", dout);
  expect_nonempty(op, "dq", dq);
  expect_nonempty(op, "dk", dk);
  expect_nonempty(op, "dv", dv);
  expect_nonempty(op, "probs", probs);
  expect_nonempty(op, "dprobs", dprobs);
  expect_same_dtype(op, {{"q", &q}, {"k", &k}, {"v", &v}, {"dout", &dout}, {"dq", &dq}, {"dk", &dk}, {"dv", &dv},
                         {"probs", &probs}, {"dprobs", &dprobs}});
  const index_t group = H / KVH;
  const index_t q_ld = H * D, kv_ld = KVH * D;
  const index_t q_bs = T_len * q_ld, kv_bs = T_len * kv_ld, p_bs = H * T_len * T_len;
  dispatch_storage(op, q.type, [&](auto t) {
    using T = decltype(t);
    const compute_t<T> scale = compute_t<T>(1) / math::sqrt(static_cast<compute_t<T>>(D));
    const T *qp = q.ptr<T>(), *kp = k.ptr<T>(), *vp = v.ptr<T>(), *gp = dout.ptr<T>(), *pp = probs.ptr<T>();
    T *dqp = dq.ptr<T>(), *dkp = dk.ptr<T>(), *dvp = dv.ptr<T>(), *dpp = dprobs.ptr<T>();
    for (index_t h = 0; h < H; ++h) {
      const index_t g = h / group;
      // dv += P^T dout
      be.gemm_batched(true, false, T_len, D, T_len, T(1), pp + h * T_len * T_len, T_len, p_bs, gp + h * D, q_ld, q_bs, T(1),
                      dvp + g * D, kv_ld, kv_bs, B);
      // dP = dout v^T
      be.gemm_batched(false, true, T_len, T_len, D, T(1), gp + h * D, q_ld, q_bs, vp + g * D, kv_ld, kv_bs, T(0),
                      dpp + h * T_len * T_len, T_len, p_bs, B);
    }
    be.for_each(B * H * T_len, kernel::attention_softmax_backward_row<T>{dpp, pp, T_len, causal}, 6 * T_len);
    // The scores were scale * q k^T, so scale enters both products below.
    for (index_t h = 0; h < H; ++h) {
      const index_t g = h / group;
      // dq += scale * dS k
      be.gemm_batched(false, false, T_len, D, T_len, scale, dpp + h * T_len * T_len, T_len, p_bs, kp + g * D, kv_ld, kv_bs,
                      T(1), dqp + h * D, q_ld, q_bs, B);
      // dk += scale * dS^T q
      be.gemm_batched(true, false, T_len, D, T_len, scale, dpp + h * T_len * T_len, T_len, p_bs, qp + h * D, q_ld, q_bs,
                      T(1), dkp + g * D, kv_ld, kv_bs, B);
    }
  });
}

}  // namespace lwcl::ops
