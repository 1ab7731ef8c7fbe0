#pragma once
// Calibration statistics for structured pruning, and make_scoring_input (the data a criterion reads is in
// prune/scoring_input.hpp). One streaming pass walks calibration batches block
// by block and accumulates, in double, each linear input's channel moments, each query head's output
// norm and each block's input/output cosine; no activation outlives its batch.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/data/loader.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/ops/embedding.hpp"
#include "lwcl/prune/local_gradients.hpp"
#include "lwcl/prune/plan.hpp"
#include "lwcl/prune/scoring_input.hpp"

namespace lwcl::prune {

namespace stats_detail {

// Adds the rows of x (N, K) to per-channel sums, sums of squares and sums of absolute values, for
// columns [i * chunk, (i + 1) * chunk): rows in order within a column, so the sums do not depend on
// how columns are spread over threads (chunks of ops::column_chunk on the host, single columns on a
// GPU, where neighbouring threads then read neighbouring addresses).
template <class T>
struct add_channel_moments {
  double* sum;
  double* sum_sq;
  double* sum_abs;
  const T* x;
  index_t N, K, chunk;

  LWCL_HD void operator()(index_t i) const {
    const index_t c0 = i * chunk, n = math::min(chunk, K - c0);
    for (index_t r = 0; r < N; ++r) {
      const T* row = x + r * K + c0;
      for (index_t j = 0; j < n; ++j) {
        const double v = static_cast<double>(row[j]);
        sum[c0 + j] += v;
        sum_sq[c0 + j] += v * v;
        sum_abs[c0 + j] += math::abs(v);
      }
    }
  }
};

// out[h] += sum over rows of ||att[row, h D : (h + 1) D]||_2 for att (N, H * D).
template <class T>
struct add_head_norms {
  double* out;
  const T* att;
  index_t N, H, D;

  LWCL_HD void operator()(index_t h) const {
    double acc = 0;
    for (index_t r = 0; r < N; ++r) {
      const T* v = att + r * H * D + h * D;
      double ss = 0;
      for (index_t d = 0; d < D; ++d) ss += static_cast<double>(v[d]) * static_cast<double>(v[d]);
      acc += math::sqrt(ss);
    }
    out[h] += acc;
  }
};

// out[r] = cos(a_r, b_r) of rows of C; a row pair with a zero vector gives 0 (no direction to compare).
template <class T>
struct row_cosine {
  double* out;
  const T* a;
  const T* b;
  index_t C;

  LWCL_HD void operator()(index_t r) const {
    double dot = 0, na = 0, nb = 0;
    for (index_t c = 0; c < C; ++c) {
      const double x = static_cast<double>(a[r * C + c]), y = static_cast<double>(b[r * C + c]);
      dot += x * y;
      na += x * x;
      nb += y * y;
    }
    const double den = math::sqrt(na) * math::sqrt(nb);
    out[r] = den > 0 ? dot / den : 0.0;
  }
};

}  // namespace stats_detail

// Accumulates calibration_stats batch by batch: each batch is embedded and walked through the blocks
// one at a time with model::block_forward, and each block's activations are folded into the sums
// before the next block overwrites them. The sums live in backend memory (in double) and are folded by
// the same functors on every backend; stats() copies them out. Memory: one block's activations for one
// (B, T) batch (one set per distinct layer shape), two hidden states and the sums. The net must outlive
// the pass.
template <class Backend>
class calibration_pass {
 public:
  explicit calibration_pass(const model::weights<Backend>& net) : net_(net) {
    const auto& cfg = net.config();
    stats_.config = cfg;
    for (index_t l = 0; l < cfg.n_layers(); ++l) {
      const auto sh = model::shape_of_layer(cfg, l);
      shapes_.push_back(sh);
      weights_.push_back(model::bind_block(net.layout(), model::layer_prefix(l), net.params().data, net.type()));
      layer_stats s;
      s.attn_in = channel_stats(sh.C);
      s.o_in = channel_stats(sh.H * sh.D);
      s.mlp_in = channel_stats(sh.C);
      s.proj_in = channel_stats(sh.F);
      s.head_norm_sum.assign(static_cast<std::size_t>(sh.H), 0.0);
      stats_.layers.push_back(std::move(s));
      // Sums of layer l, in this order: attn_in, o_in, mlp_in, proj_in (sum, sum_sq, sum_abs each),
      // then the head norms.
      offset_.push_back(sums_);
      sums_ += 3 * (2 * sh.C + sh.H * sh.D + sh.F) + sh.H;
    }
    sum_buf_ = buffer<Backend>(net.backend(), static_cast<std::size_t>(sums_) * sizeof(double));
    net.backend().fill_zero(sum_buf_.data(), sum_buf_.bytes());
  }

  // Adds one batch: ids holds B * T token ids (row-major (B, T), host memory), each row a sequence.
  void add(const std::int32_t* ids, index_t B, index_t T) {
    const auto& cfg = net_.config();
    check(B > 0 && T > 0, "calibration_pass: batch ", B, " x ", T, " must be positive");
    check(ids != nullptr, "calibration_pass: the batch's token ids are null");
    check(T <= cfg.max_seq, "calibration_pass: sequence length ", T, " exceeds the model's max_seq ", cfg.max_seq);
    ensure(B, T);
    Backend& be = net_.backend();
    be.from_host(tok_.data(), ids, tok_.bytes());
    net_.embed_inputs(tensor(tok_.data(), dtype::i32, {B, T}), hidden_[0]);
    ops::dispatch_float("calibration_pass", net_.type(), [&](auto z) {
      using E = decltype(z);
      for (std::size_t l = 0; l < shapes_.size(); ++l) {
        const tensor& x = hidden_[l % 2];
        const tensor& y = hidden_[(l + 1) % 2];
        const auto& sh = shapes_[l];
        auto& a = *acts_[slot_of_[l]];
        model::block_forward(be, sh, weights_[l], a, x, y);
        double* at = static_cast<double*>(sum_buf_.data()) + offset_[l];
        const std::initializer_list<const tensor*> inputs = {sh.tr.post_norm ? &x : &a.h1, &a.att,
                                                             sh.tr.post_norm ? &a.x2 : &a.h2, sh.tr.gated_mlp ? &a.s : &a.g};
        for (const tensor* act : inputs) {
          const index_t K = act->shape.last(), N = ops::rows_of(*act);
          const index_t chunk = Backend::is_device ? 1 : ops::column_chunk;
          be.for_each((K + chunk - 1) / chunk,
                      stats_detail::add_channel_moments<E>{at, at + K, at + 2 * K, act->template ptr<E>("calibration_pass"), N,
                                                           K, chunk},
                      3 * chunk * N);
          at += 3 * K;
        }
        be.for_each(sh.H, stats_detail::add_head_norms<E>{at, a.att.template ptr<E>("calibration_pass"), B * T, sh.H, sh.D},
                    3 * sh.D * B * T);
        // Per-row cosines in double, summed by the backend (a CUB reduction on CUDA; in row order on
        // the host), one value back per layer and batch.
        be.for_each(B * T, stats_detail::row_cosine<E>{static_cast<double*>(cos_.data()), x.template ptr<E>("calibration_pass"),
                                                        y.template ptr<E>("calibration_pass"), sh.C},
                    3 * sh.C);
        auto& s = stats_.layers[l];
        s.cosine_sum += be.sum(static_cast<const double*>(cos_.data()), B * T);
        s.tokens += B * T;
      }
    });
    for (auto& s : stats_.layers)
      for (channel_stats* c : {&s.attn_in, &s.o_in, &s.mlp_in, &s.proj_in}) c->count += B * T;
    stats_.tokens += B * T;
    fresh_ = false;
  }
  void add(const std::vector<std::int32_t>& ids, index_t B, index_t T) {
    check(B > 0 && T > 0 && static_cast<index_t>(ids.size()) == B * T, "calibration_pass: a batch of ", B, " x ", T,
          " needs ", B * T, " token ids, got ", ids.size());
    add(ids.data(), B, T);
  }

  index_t tokens() const { return stats_.tokens; }
  // The statistics so far; throws while no batch has been added.
  const calibration_stats& stats() const {
    check(stats_.tokens > 0, "calibration_pass: the calibration set is empty (add at least one batch)");
    if (!fresh_) gather();
    return stats_;
  }

 private:
  // Copies the sums out of backend memory into stats_.
  void gather() const {
    std::vector<double> host(static_cast<std::size_t>(sums_));
    net_.backend().to_host(host.data(), sum_buf_.data(), sum_buf_.bytes());
    for (std::size_t l = 0; l < shapes_.size(); ++l) {
      const double* at = host.data() + offset_[l];
      auto& s = stats_.layers[l];
      for (channel_stats* c : {&s.attn_in, &s.o_in, &s.mlp_in, &s.proj_in}) {
        const std::size_t K = c->sum.size();
        for (std::vector<double>* v : {&c->sum, &c->sum_sq, &c->sum_abs}) {
          std::copy(at, at + K, v->begin());
          at += K;
        }
      }
      std::copy(at, at + s.head_norm_sum.size(), s.head_norm_sum.begin());
    }
    fresh_ = true;
  }

  void ensure(index_t B, index_t T) {
    if (B == B_ && T == T_) return;
    B_ = B;
    T_ = T;
    acts_.clear();
    slot_of_.clear();
    Backend& be = net_.backend();
    tok_ = buffer<Backend>(be, static_cast<std::size_t>(B * T) * sizeof(std::int32_t));
    cos_ = buffer<Backend>(be, static_cast<std::size_t>(B * T) * sizeof(double));
    mem_ = std::make_unique<arena<Backend>>();
    mem_->declare(hidden_[0], {B, T, net_.config().d_model});
    mem_->declare(hidden_[1], {B, T, net_.config().d_model});
    mem_->allocate(be, net_.type());
    std::vector<std::size_t> owner;  // first layer of each activation set
    for (std::size_t l = 0; l < shapes_.size(); ++l) {
      std::size_t s = 0;
      for (; s < owner.size(); ++s) {
        const auto& o = shapes_[owner[s]];
        if (o.H == shapes_[l].H && o.KVH == shapes_[l].KVH && o.F == shapes_[l].F) break;
      }
      if (s == owner.size()) {
        owner.push_back(l);
        acts_.push_back(std::make_unique<model::block_acts<Backend>>(be, shapes_[l], B, T, net_.type()));
      }
      slot_of_.push_back(s);
    }
  }

  const model::weights<Backend>& net_;
  mutable calibration_stats stats_;  // the sums are copied in from sum_buf_ when read
  mutable bool fresh_ = true;
  std::vector<model::block_shape> shapes_;
  std::vector<index_t> offset_;  // of each layer's sums in sum_buf_
  index_t sums_ = 0;
  buffer<Backend> sum_buf_, tok_, cos_;
  std::vector<model::block_weights> weights_;
  index_t B_ = -1, T_ = -1;
  std::vector<std::unique_ptr<model::block_acts<Backend>>> acts_;
  std::vector<std::size_t> slot_of_;
  tensor hidden_[2];
  std::unique_ptr<arena<Backend>> mem_;
};

// One pass over `ids`, read as consecutive (B, T) batches; ids.size() must be a positive multiple of B * T.
template <class Backend>
calibration_stats collect_statistics(const model::weights<Backend>& net, const std::vector<std::int32_t>& ids, index_t B,
                                     index_t T) {
  check(B > 0 && T > 0, "collect_statistics: batch ", B, " x ", T, " must be positive");
  check(!ids.empty(), "collect_statistics: the calibration set is empty (expected at least one batch of ", B, " x ", T,
        " token ids)");
  const index_t per = B * T, n = static_cast<index_t>(ids.size());
  check(n % per == 0, "collect_statistics: ", n, " token ids do not split into batches of ", B, " x ", T);
  calibration_pass<Backend> pass(net);
  for (index_t i = 0; i < n; i += per) pass.add(ids.data() + i, B, T);
  return pass.stats();
}

// One pass over batches 0 .. n_batches - 1 of `loader`, which must have been built for (B, T) batches.
template <class Backend>
calibration_stats collect_statistics(const model::weights<Backend>& net, const data::batch_loader& loader, index_t B,
                                     index_t T, index_t n_batches) {
  check(n_batches > 0, "collect_statistics: the calibration set is empty (n_batches = ", n_batches, ")");
  calibration_pass<Backend> pass(net);
  std::vector<std::int32_t> ids, targets;
  for (index_t k = 0; k < n_batches; ++k) {
    loader.batch(static_cast<std::uint64_t>(k), ids, targets);
    check(static_cast<index_t>(ids.size()) == B * T, "collect_statistics: the loader's batches hold ", ids.size(),
          " tokens, expected ", B, " x ", T);
    pass.add(ids.data(), B, T);
  }
  return pass.stats();
}

// The scoring input of `net` (its weights copied to host memory as double), with optional statistics,
// which must have been gathered on a model of net's shape.
template <class Backend>
scoring_input make_scoring_input(const model::weights<Backend>& net, std::optional<calibration_stats> stats = std::nullopt) {
  scoring_input in;
  in.config = net.config();
  in.layout = net.layout();
  if (stats) stats->expect_fits(in.config, "make_scoring_input");
  in.stats = std::move(stats);
  const std::size_t n = static_cast<std::size_t>(in.layout.numel());
  ops::dispatch_float("make_scoring_input", net.type(), [&](auto z) {
    using T = decltype(z);
    std::vector<T> host(n);
    net.backend().to_host(host.data(), net.params().data, n * sizeof(T));
    in.params.assign(host.begin(), host.end());
  });
  return in;
}

}  // namespace lwcl::prune
