#pragma once
// GPTQ (Frantar et al., 2022, arXiv 2210.17323, Algorithm 1): a linear weight quantised column by column,
// each column's rounding error spread over the columns not yet quantised through the inverse Hessian
// H = 2 X^T X of the layer's calibration inputs, so that ||W X^T - Q X^T|| stays small. As in the paper:
// H^-1 through its upper Cholesky factor, dampening lambda = damp * mean(diag H), lazy batch updates of
// `block` columns, and optionally act-order (columns in order of decreasing diag H). Details the paper
// leaves open, and what lwcl chose:
// - a group's scale is found from its columns' values when the first column of the group is reached, as
//   they stand after every update so far (so a lazy batch is a whole number of groups: `block` is rounded
//   to a multiple of the group width, at least one group);
// - with act-order and groups, the groups stay natural runs of columns and their scales come from the
//   weights before any update (static groups), so a packed weight needs no column permutation;
// - per channel, each row's scale comes from the weights before any error feedback;
// - a column whose diag H is 0 (an input that never fired) is set to zero and its H entry to 1.
// Everything is computed in f64.

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string_view>
#include <vector>

#include "lwcl/backend/host/gemm_openblas.hpp"
#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/quant/format.hpp"
#include "lwcl/quant/packed.hpp"

namespace lwcl::quant {

// The running sum of x x^T over a layer's calibration inputs (n = its input width), and the Hessian of
// the layer's squared error it gives: H = 2 / N * sum x x^T over the N input rows seen.
class hessian {
 public:
  explicit hessian(index_t n) : n_(n), sum_(static_cast<std::size_t>(n * n), 0.0) {
    check(n > 0, "quant::hessian: input width ", n, " (expected at least 1)");
  }

  index_t width() const { return n_; }
  index_t rows_seen() const { return rows_; }

  // Adds `rows` input rows x (rows x width, row by row).
  void add(const float* x, index_t rows) {
    if (rows <= 0) return;
    std::vector<double> xd(x, x + rows * n_);
    for (const double v : xd) check(std::isfinite(v), "quant::hessian: a calibration input is ", v, " (expected finite)");
    gemm::openblas::run(true, false, n_, n_, rows, 1.0, xd.data(), n_, xd.data(), n_, 1.0, sum_.data(), n_);
    rows_ += rows;
  }

  // tr(D S D^T) / tr(W S W^T) for D = W - Q, S = sum x x^T: over the calibration inputs, the squared
  // error of the layer's outputs x Q^T relative to the squared outputs x W^T (0 for Q = W). w and q are
  // (rows x width) row by row.
  double relative_output_error(const float* w, const float* q, index_t rows) const {
    check(rows_ > 0, "quant::hessian: no calibration inputs were added");
    const auto m = static_cast<std::size_t>(rows * n_);
    std::vector<double> W(w, w + m), D(m), WS(m), DS(m);
    for (std::size_t i = 0; i < m; ++i) D[i] = W[i] - static_cast<double>(q[i]);
    gemm::openblas::run(false, false, rows, n_, n_, 1.0, W.data(), n_, sum_.data(), n_, 0.0, WS.data(), n_);
    gemm::openblas::run(false, false, rows, n_, n_, 1.0, D.data(), n_, sum_.data(), n_, 0.0, DS.data(), n_);
    double num = 0, den = 0;
    for (std::size_t i = 0; i < m; ++i) {
      num += DS[i] * D[i];
      den += WS[i] * W[i];
    }
    return den > 0 ? num / den : 0.0;
  }

  std::vector<double> matrix() const {
    check(rows_ > 0, "quant::hessian: no calibration inputs were added");
    std::vector<double> h(sum_);
    for (auto& v : h) v *= 2.0 / static_cast<double>(rows_);
    return h;
  }

 private:
  index_t n_;
  index_t rows_ = 0;
  std::vector<double> sum_;
};

struct gptq_options {
  double damp = 0.01;     // lambda as a fraction of mean(diag H)
  index_t block = 128;    // columns per lazy batch update
  bool act_order = false; // quantise columns in order of decreasing diag H
};


namespace detail {

// In place: a (n x n, row-major, symmetric positive definite) becomes its lower Cholesky factor L (a = L L^T),
// upper triangle zeroed. Fails naming `what` when a pivot is not positive.
inline void cholesky_lower(std::vector<double>& a, index_t n, std::string_view what) {
  for (index_t j = 0; j < n; ++j) {
    double d = a[j * n + j];
    for (index_t k = 0; k < j; ++k) d -= a[j * n + k] * a[j * n + k];
    check(d > 0.0 && std::isfinite(d), "quant::gptq: ", what, ": the dampened Hessian is not positive definite at column ", j,
          " (pivot ", d, "); raise the dampening");
    const double ljj = std::sqrt(d);
    a[j * n + j] = ljj;
    for (index_t i = j + 1; i < n; ++i) {
      double s = a[i * n + j];
      for (index_t k = 0; k < j; ++k) s -= a[i * n + k] * a[j * n + k];
      a[i * n + j] = s / ljj;
    }
    for (index_t k = j + 1; k < n; ++k) a[j * n + k] = 0.0;
  }
}

// The upper factor U of H^-1 = U^T U, from H (n x n).
inline std::vector<double> inverse_upper_cholesky(std::vector<double> h, index_t n, std::string_view what) {
  cholesky_lower(h, n, what);
  // L^-1 by forward substitution, column by column.
  std::vector<double> li(static_cast<std::size_t>(n * n), 0.0);
  for (index_t c = 0; c < n; ++c) {
    li[c * n + c] = 1.0 / h[c * n + c];
    for (index_t i = c + 1; i < n; ++i) {
      double s = 0.0;
      for (index_t k = c; k < i; ++k) s += h[i * n + k] * li[k * n + c];
      li[i * n + c] = -s / h[i * n + i];
    }
  }
  std::vector<double> hinv(static_cast<std::size_t>(n * n), 0.0);  // H^-1 = L^-T L^-1
  gemm::openblas::run(true, false, n, n, n, 1.0, li.data(), n, li.data(), n, 0.0, hinv.data(), n);
  cholesky_lower(hinv, n, what);
  std::vector<double> u(static_cast<std::size_t>(n * n), 0.0);
  for (index_t i = 0; i < n; ++i)
    for (index_t j = 0; j <= i; ++j) u[j * n + i] = hinv[i * n + j];
  return u;
}

}  // namespace detail

// w: the (rows x cols) f32 weight, row by row; h: its layer's Hessian (width cols).
inline quantized quantize_gptq(const float* w, index_t rows, index_t cols, const hessian& h, const weight_format& f,
                                 const gptq_options& o, std::string_view what) {
  check(h.width() == cols, "quant::gptq: ", what, ": a Hessian of width ", h.width(), " for a layer of ", cols, " input columns");
  check(o.damp >= 0.0 && std::isfinite(o.damp), "quant::gptq: ", what, ": dampening ", o.damp, " (expected a finite value >= 0)");
  check(o.block > 0, "quant::gptq: ", what, ": block ", o.block, " (expected at least 1 column)");
  quantized res;
  res.weight = make_packed(rows, cols, f, what);
  packed_weight& p = res.weight;
  const index_t n = cols, gw = f.group_width(cols);
  const bool static_params = f.group == 0 || o.act_order;
  const index_t block = static_params ? o.block : std::max(gw, o.block / gw * gw);

  std::vector<double> H = h.matrix();
  std::vector<double> W(w, w + rows * cols);
  for (index_t i = 0; i < n; ++i)
    if (H[i * n + i] == 0.0) {
      H[i * n + i] = 1.0;
      for (index_t r = 0; r < rows; ++r) W[r * n + i] = 0.0;
    }

  // Scales fixed before any error feedback: per channel, and the static groups of act-order.
  if (static_params)
    for (index_t r = 0; r < rows; ++r)
      for (index_t g = 0; g < p.groups(); ++g) set_params(p, r, g, find_params(W.data() + r * n + g * gw, gw, 1, f, what));

  std::vector<index_t> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), index_t(0));
  if (o.act_order)
    std::stable_sort(perm.begin(), perm.end(), [&](index_t a, index_t b) { return H[a * n + a] > H[b * n + b]; });
  std::vector<double> Wp(W.size()), Hp(H.size());
  for (index_t r = 0; r < rows; ++r)
    for (index_t k = 0; k < n; ++k) Wp[r * n + k] = W[r * n + perm[k]];
  for (index_t a = 0; a < n; ++a)
    for (index_t b = 0; b < n; ++b) Hp[a * n + b] = H[perm[a] * n + perm[b]];

  double mean_diag = 0.0;
  for (index_t i = 0; i < n; ++i) mean_diag += Hp[i * n + i];
  mean_diag /= static_cast<double>(n);
  for (index_t i = 0; i < n; ++i) Hp[i * n + i] += o.damp * mean_diag;
  const std::vector<double> U = detail::inverse_upper_cholesky(std::move(Hp), n, what);

  // Rows are independent given U: each thread takes whole rows through every column.
  const index_t chunk = 8;
  const index_t chunks = (rows + chunk - 1) / chunk;
  double loss = 0.0;
#pragma omp parallel for schedule(dynamic) reduction(+ : loss)
  for (index_t ch = 0; ch < chunks; ++ch) {
    const index_t r0 = ch * chunk, r1 = std::min(rows, r0 + chunk), nr = r1 - r0;
    std::vector<double> E(static_cast<std::size_t>(nr * block));
    std::vector<group_params> gp(static_cast<std::size_t>(nr));
    for (index_t i1 = 0; i1 < n; i1 += block) {
      const index_t i2 = std::min(n, i1 + block), bw = i2 - i1;
      for (index_t k = i1; k < i2; ++k) {
        const index_t c = perm[k], g = c / gw;
        const double d = U[k * n + k];
        for (index_t r = r0; r < r1; ++r) {
          double* row = Wp.data() + r * n;
          group_params q;
          if (static_params) {
            q = p.params(r, g);
          } else {
            if (c % gw == 0) {
              gp[r - r0] = find_params(row + k, gw, 1, f, what);
              set_params(p, r, g, gp[r - r0]);
            }
            q = gp[r - r0];
          }
          const int code = quantize_value(row[k], q, f);
          set_code(p, r, c, code);
          const double err = (row[k] - dequantize_value<double>(code, q)) / d;
          loss += err * err / 2.0;
          for (index_t j = k + 1; j < i2; ++j) row[j] -= err * U[k * n + j];
          E[(r - r0) * block + (k - i1)] = err;
        }
      }
      if (i2 < n)  // the lazy update of every later column: W[:, i2:] -= E U[i1:i2, i2:]
        gemm::openblas::run(false, false, nr, n - i2, bw, -1.0, E.data(), block, U.data() + i1 * n + i2, n, 1.0,
                            Wp.data() + r0 * n + i2, n);
    }
  }
  res.loss = loss;
  return res;
}

}  // namespace lwcl::quant
