#pragma once
// Memory-linear scaled dot-product attention: the same maths and layouts as attention.hpp, but keys are
// visited in tiles under an online softmax, so only a per-row log-sum-exp (B, H, T) is saved instead
// of the (B, H, T, T) probabilities; the backward recomputes the probabilities from q, k and lse.
// Its oracle is ops::attention_forward/backward (itself checked against PyTorch), not a fixture.

#include <string_view>

#include "lwcl/core/config.hpp"
#include "lwcl/core/math.hpp"
#include "lwcl/ops/attention.hpp"
#include "lwcl/ops/common.hpp"
#include "lwcl/ops/fused.hpp"

namespace lwcl::ops {

// Keys (forward, dq) or queries (dk, dv) handled per step by the row functors: their scores sit in a
// local array, and the out row is rescaled once per tile rather than once per key.
inline constexpr int flash_tile = 16;

namespace kernel {

// Running max m and sum l = sum_j exp(s_j - m) of one score row, fed a tile at a time. Shared by the
// host functors and the CUDA kernel, so both normalise identically.
template <class T>
struct online_softmax_row {
  T m = 0;
  T l = 0;  // 0 until the first tile: then there is no old maximum to rescale from

  // Folds s[0..n) into (m, l) and replaces s[j] by exp(s[j] - m_new), the tile's unnormalised
  // probabilities; s[n..N) become 0, so a caller may sum over the whole array. Returns the factor
  // exp(m_old - m_new) by which an accumulator over earlier tiles must be rescaled. Needs n >= 1.
  // N is a compile-time size so that, unrolled, s can live in registers on a GPU.
  template <int N>
  LWCL_HD T update(T (&s)[N], int n) {
    T m_new = l > T(0) ? m : s[0];
    for (int j = 0; j < N; ++j)
      if (j < n) m_new = math::max(m_new, s[j]);
    const T alpha = l > T(0) ? math::exp(m - m_new) : T(0);
    T sum = 0;
    for (int j = 0; j < N; ++j) {
      s[j] = j < n ? math::exp(s[j] - m_new) : T(0);
      sum += s[j];
    }
    l = l * alpha + sum;
    m = m_new;
    return alpha;
  }
  // log sum_j exp(s_j) over every score seen.
  LWCL_HD T lse() const { return m + math::log(l); }
};

// The backward's per-pair maths, shared by the row functors below and the tiled CUDA kernels
// (backend/cuda/flash_attention.cuh), so both recompute the same probabilities and score gradients.
// P_ij from the unscaled score q_i . k_j and the query row's log-sum-exp.
template <class T>
LWCL_HD_INLINE T flash_probability(T qk, T scale, T lse) {
  return math::exp(scale * qk - lse);
}
// dS_ij = P_ij (dP_ij - delta_i), the gradient of the scaled score, from dP_ij = dout_i . v_j and
// delta_i = dout_i . out_i (the softmax's Jacobian applied to dP).
template <class T>
LWCL_HD_INLINE T flash_score_grad(T p, T dp, T delta) {
  return p * (dp - delta);
}

// Extents and strides of q, out: (B, T, H, D) and k, v: (B, T, KVH, D).
struct flash_dims {
  index_t B, T_len, H, KVH, D;
  LWCL_HD index_t group() const { return H / KVH; }
  LWCL_HD index_t q_row(index_t b, index_t t, index_t h) const { return ((b * T_len + t) * H + h) * D; }
  LWCL_HD index_t kv_row(index_t b, index_t t, index_t g) const { return ((b * T_len + t) * KVH + g) * D; }
};

// One query row per index r = (b * H + h) * T + t: out row and lse[r]. The out row is the accumulator.
template <class T, int Bc = flash_tile>
struct flash_attention_forward_row {
  T* out;
  T* lse;
  const T* q;
  const T* k;
  const T* v;
  flash_dims d;
  T scale;
  bool causal;

  LWCL_HD void operator()(index_t r) const {
    const index_t t = r % d.T_len, bh = r / d.T_len, h = bh % d.H, b = bh / d.H, g = h / d.group();
    const index_t D = d.D;
    const T* qi = q + d.q_row(b, t, h);
    T* o = out + d.q_row(b, t, h);
    const index_t n_keys = causal ? t + 1 : d.T_len;
    for (index_t c = 0; c < D; ++c) o[c] = T(0);
    online_softmax_row<T> sm;
    const index_t ld = d.KVH * D;  // between consecutive keys
    for (index_t j0 = 0; j0 < n_keys; j0 += Bc) {
      const int n = static_cast<int>(math::min<index_t>(Bc, n_keys - j0));
      const T *kt = k + d.kv_row(b, j0, g), *vt = v + d.kv_row(b, j0, g);
      // D outside, the tile's keys inside: Bc independent sums instead of one serial chain per key,
      // each still summed over D in order (the CUDA kernel sums in the same order).
      T s[Bc] = {};
      for (index_t c = 0; c < D; ++c) {
        const T qc = qi[c];
        for (int jj = 0; jj < Bc; ++jj)
          if (jj < n) s[jj] += qc * kt[jj * ld + c];
      }
      for (int jj = 0; jj < Bc; ++jj) s[jj] *= scale;
      const T alpha = sm.update(s, n);
      // Per element: rescale, then add the keys in order.
      for (index_t c = 0; c < D; ++c) o[c] *= alpha;
      for (int jj = 0; jj < n; ++jj) {
        const T p = s[jj];
        const T* vj = vt + jj * ld;
        for (index_t c = 0; c < D; ++c) o[c] += p * vj[c];
      }
    }
    const T inv = T(1) / sm.l;
    for (index_t c = 0; c < D; ++c) o[c] *= inv;
    lse[r] = sm.lse();
  }
};

// One query row per index r = (b * H + h) * T + t: delta[r] = dout_r . out_r, then
// dq_r += scale * sum_j P_rj (dout_r . v_j - delta[r]) k_j with P recomputed from q, k and lse.
template <class T, int Bc = flash_tile>
struct flash_attention_backward_query_row {
  T* dq;
  T* delta;
  const T* dout;
  const T* q;
  const T* k;
  const T* v;
  const T* out;
  const T* lse;
  flash_dims d;
  T scale;
  bool causal;

  LWCL_HD void operator()(index_t r) const {
    const index_t t = r % d.T_len, bh = r / d.T_len, h = bh % d.H, b = bh / d.H, g = h / d.group();
    const index_t D = d.D, row = d.q_row(b, t, h);
    const T *qi = q + row, *gi = dout + row, *oi = out + row;
    T* dqi = dq + row;
    T di = 0;
    for (index_t c = 0; c < D; ++c) di += gi[c] * oi[c];
    delta[r] = di;
    const T li = lse[r];
    const index_t n_keys = causal ? t + 1 : d.T_len;
    const index_t ld = d.KVH * D;
    for (index_t j0 = 0; j0 < n_keys; j0 += Bc) {
      const int n = static_cast<int>(math::min<index_t>(Bc, n_keys - j0));
      const T *kt = k + d.kv_row(b, j0, g), *vt = v + d.kv_row(b, j0, g);
      T s[Bc] = {}, ds[Bc] = {};
      for (index_t c = 0; c < D; ++c) {
        const T qc = qi[c], gc = gi[c];
        for (int jj = 0; jj < Bc; ++jj)
          if (jj < n) {
            s[jj] += qc * kt[jj * ld + c];
            ds[jj] += gc * vt[jj * ld + c];  // dP for now
          }
      }
      for (int jj = 0; jj < n; ++jj) ds[jj] = flash_score_grad(flash_probability(s[jj], scale, li), ds[jj], di);
      // Key by key into the contiguous dq row, which vectorises over D.
      for (int jj = 0; jj < n; ++jj) {
        const T w = scale * ds[jj];
        const T* kj = kt + jj * ld;
        for (index_t c = 0; c < D; ++c) dqi[c] += w * kj[c];
      }
    }
  }
};

// One key row per index r = (b * KVH + g) * T + j: dk_j and dv_j summed over the group's query heads
// and the query rows that see key j (i >= j when causal). Reads the delta of every query row, so it
// runs after flash_attention_backward_query_row.
template <class T, int Br = flash_tile>
struct flash_attention_backward_key_row {
  T* dk;
  T* dv;
  const T* dout;
  const T* q;
  const T* k;
  const T* v;
  const T* lse;
  const T* delta;
  flash_dims d;
  T scale;
  bool causal;

  LWCL_HD void operator()(index_t r) const {
    const index_t j = r % d.T_len, bg = r / d.T_len, g = bg % d.KVH, b = bg / d.KVH;
    const index_t D = d.D, group = d.group(), row = d.kv_row(b, j, g);
    const T *kj = k + row, *vj = v + row;
    T *dkj = dk + row, *dvj = dv + row;
    const index_t first = causal ? j : 0, ld = d.H * D;  // ld: between consecutive query rows
    for (index_t h = g * group; h < (g + 1) * group; ++h) {
      const T* lse_h = lse + (b * d.H + h) * d.T_len;
      const T* delta_h = delta + (b * d.H + h) * d.T_len;
      for (index_t i0 = first; i0 < d.T_len; i0 += Br) {
        const int n = static_cast<int>(math::min<index_t>(Br, d.T_len - i0));
        const T *qt = q + d.q_row(b, i0, h), *gt = dout + d.q_row(b, i0, h);
        T p[Br] = {}, ds[Br] = {};
        for (index_t c = 0; c < D; ++c) {
          const T kc = kj[c], vc = vj[c];
          for (int ii = 0; ii < Br; ++ii)
            if (ii < n) {
              p[ii] += qt[ii * ld + c] * kc;   // the score for now
              ds[ii] += gt[ii * ld + c] * vc;  // dP for now
            }
        }
        for (int ii = 0; ii < n; ++ii) {
          p[ii] = flash_probability(p[ii], scale, lse_h[i0 + ii]);
          ds[ii] = flash_score_grad(p[ii], ds[ii], delta_h[i0 + ii]);
        }
        for (int ii = 0; ii < n; ++ii) {
          const T pv = p[ii], w = scale * ds[ii];
          const T *gi = gt + ii * ld, *qi = qt + ii * ld;
          for (index_t c = 0; c < D; ++c) {
            dvj[c] += pv * gi[c];
            dkj[c] += w * qi[c];
          }
        }
      }
    }
  }
};

}  // namespace kernel

namespace flash_detail {

// Checks q, k, v, out and lse of a forward call and returns the extents.
inline kernel::flash_dims check_forward(std::string_view op, const tensor& out, const tensor& lse, const tensor& q,
                                        const tensor& k, const tensor& v) {
  const attention_detail::dims a = attention_detail::check_qkv(op, q, k, v);
  expect_shape(op, "out", out, q.shape);
  expect_nonempty(op, "out", out);
  expect_shape(op, "lse", lse, shape{a.B, a.H, a.T});
  expect_nonempty(op, "lse", lse);
  expect_same_dtype(op, {{"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}, {"lse", &lse}});
  return {a.B, a.T, a.H, a.KVH, a.D};
}

// Checks every argument of a backward call and returns the extents.
inline kernel::flash_dims check_backward(std::string_view op, const tensor& dq, const tensor& dk, const tensor& dv,
                                         const tensor& delta, const tensor& dout, const tensor& q, const tensor& k,
                                         const tensor& v, const tensor& out, const tensor& lse) {
  const kernel::flash_dims d = check_forward(op, out, lse, q, k, v);
  expect_shape(op, "dout", dout, q.shape);
  expect_shape(op, "dq", dq, q.shape);
  expect_shape(op, "dk", dk, k.shape);
  expect_shape(op, "dv", dv, v.shape);
  expect_shape(op, "delta", delta, lse.shape);
  expect_nonempty(op, "dout", dout);
  expect_nonempty(op, "dq", dq);
  expect_nonempty(op, "dk", dk);
  expect_nonempty(op, "dv", dv);
  expect_nonempty(op, "delta", delta);
  expect_same_dtype(op, {{"q", &q}, {"dout", &dout}, {"dq", &dq}, {"dk", &dk}, {"dv", &dv}, {"delta", &delta}});
  return d;
}

// The backward as the two row functors through for_each, on checked arguments of dtype T: query rows
// first (they write delta), then key rows (they read it). Any backend runs it; backend::cuda also uses
// it for f64.
template <class T, class Backend>
void backward_rows(Backend& be, const tensor& dq, const tensor& dk, const tensor& dv, const tensor& delta, const tensor& dout,
                   const tensor& q, const tensor& k, const tensor& v, const tensor& out, const tensor& lse,
                   const kernel::flash_dims& d, bool causal) {
  const T scale = T(1) / math::sqrt(static_cast<T>(d.D));
  be.for_each(d.B * d.H * d.T_len,
              kernel::flash_attention_backward_query_row<T>{dq.ptr<T>(), delta.ptr<T>(), dout.ptr<T>(), q.ptr<T>(), k.ptr<T>(),
                                                            v.ptr<T>(), out.ptr<T>(), lse.ptr<T>(), d, scale, causal},
              6 * d.D * d.T_len);
  be.for_each(d.B * d.KVH * d.T_len,
              kernel::flash_attention_backward_key_row<T>{dk.ptr<T>(), dv.ptr<T>(), dout.ptr<T>(), q.ptr<T>(), k.ptr<T>(),
                                                          v.ptr<T>(), lse.ptr<T>(), delta.ptr<T>(), d, scale, causal},
              8 * d.D * d.T_len * d.group());
}

}  // namespace flash_detail

// out = softmax(q k^T / sqrt(D) + mask) v per batch and query head, as attention_forward, and
// lse[b, h, t] = log sum_j exp(q_t . k_j / sqrt(D)) over the keys row t sees. q, out: (B, T, H, D);
// k, v: (B, T, KVH, D) with KVH dividing H; lse: (B, H, T). Memory beyond the arguments: none. A
// backend that declares the fused kernel (ops/fused.hpp), with a member flash_attention_forward of the same arguments (backend::cuda: a tiled kernel)
// runs it instead of the row functor. out must not overlap q, k or v.
template <class Backend>
void flash_attention_forward(Backend& be, const tensor& out, const tensor& lse, const tensor& q, const tensor& k,
                             const tensor& v, bool causal) {
  constexpr std::string_view op = "flash_attention_forward";
  const kernel::flash_dims d = flash_detail::check_forward(op, out, lse, q, k, v);
  if constexpr (offers_fused_flash_attention<Backend>) {
    be.flash_attention_forward(out, lse, q, k, v, causal);
  } else {
    dispatch_float(op, q.type, [&](auto t) {
      using T = decltype(t);
      const T scale = T(1) / math::sqrt(static_cast<T>(d.D));
      be.for_each(d.B * d.H * d.T_len,
                  kernel::flash_attention_forward_row<T>{out.ptr<T>(), lse.ptr<T>(), q.ptr<T>(), k.ptr<T>(), v.ptr<T>(), d,
                                                         scale, causal},
                  4 * d.D * d.T_len);
    });
  }
}

// Accumulates the gradients of flash_attention_forward into dq, dk, dv (a kv head collects the
// gradients of its whole group of query heads). out and lse are the forward's outputs; delta (B, H, T)
// is scratch, overwritten with dout . out per query row. Deterministic: every gradient element has one
// writer, which loops over the rows that contribute to it. A backend that declares the fused kernel (ops/fused.hpp) with a member
// flash_attention_backward of the same arguments (backend::cuda: tiled kernels) runs it instead of the
// row functors.
template <class Backend>
void flash_attention_backward(Backend& be, const tensor& dq, const tensor& dk, const tensor& dv, const tensor& delta,
                              const tensor& dout, const tensor& q, const tensor& k, const tensor& v, const tensor& out,
                              const tensor& lse, bool causal) {
  constexpr std::string_view op = "flash_attention_backward";
  const kernel::flash_dims d = flash_detail::check_backward(op, dq, dk, dv, delta, dout, q, k, v, out, lse);
  if constexpr (offers_fused_flash_attention<Backend>) {
    be.flash_attention_backward(dq, dk, dv, delta, dout, q, k, v, out, lse, causal);
  } else {
    dispatch_float(op, q.type, [&](auto t) {
      flash_detail::backward_rows<decltype(t)>(be, dq, dk, dv, delta, dout, q, k, v, out, lse, d, causal);
    });
  }
}

}  // namespace lwcl::ops
