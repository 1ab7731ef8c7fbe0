#pragma once
// Calibration statistics for structured pruning, and scoring_input: everything a criterion reads
// (weights in double, statistics, local gradients). One streaming pass walks calibration batches block
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

namespace lwcl::prune {

// Running moments of one activation's channels over the tokens seen so far.
struct channel_stats {
  std::vector<double> sum, sum_sq, sum_abs;
  index_t count = 0;  // tokens

  channel_stats() = default;
  explicit channel_stats(index_t channels)
      : sum(static_cast<std::size_t>(channels), 0.0),
        sum_sq(static_cast<std::size_t>(channels), 0.0),
        sum_abs(static_cast<std::size_t>(channels), 0.0) {}

  index_t channels() const { return static_cast<index_t>(sum.size()); }
  // ||X_j||_2 over every token: the norm Wanda weighs a weight's magnitude with.
  double l2_norm(index_t j) const { return std::sqrt(sum_sq[at(j)]); }
  double mean(index_t j) const { return sum[at(j)] / static_cast<double>(count); }
  // Population variance E[x^2] - E[x]^2 (clamped at 0 against rounding).
  double variance(index_t j) const {
    const double m = mean(j);
    return std::max(0.0, sum_sq[at(j)] / static_cast<double>(count) - m * m);
  }
  double mean_abs(index_t j) const { return sum_abs[at(j)] / static_cast<double>(count); }

  std::vector<double> l2_norms() const { return each(&channel_stats::l2_norm); }
  std::vector<double> means() const { return each(&channel_stats::mean); }
  std::vector<double> variances() const { return each(&channel_stats::variance); }
  std::vector<double> mean_abs_values() const { return each(&channel_stats::mean_abs); }

 private:
  static std::size_t at(index_t j) { return static_cast<std::size_t>(j); }
  std::vector<double> each(double (channel_stats::*f)(index_t) const) const {
    std::vector<double> out(sum.size());
    for (index_t j = 0; j < channels(); ++j) out[at(j)] = (this->*f)(j);
    return out;
  }
};

// The statistics of one block. Head h of the attention output owns channels [h D, (h + 1) D) of o_in.
struct layer_stats {
  channel_stats attn_in;  // input of q, k and v (C): norm1(x) in a pre-norm block
  channel_stats o_in;     // input of the attention output projection (H * D)
  channel_stats mlp_in;   // input of fc, or of gate and up (C): norm2(x2) in a pre-norm block
  channel_stats proj_in;  // input of proj / down (F): gelu(fc) or silu(gate) * up
  std::vector<double> head_norm_sum;  // per query head: sum over tokens of ||att_h||_2 (H)
  double cosine_sum = 0;              // sum over tokens of cos(block input, block output)
  index_t tokens = 0;

  double mean_head_norm(index_t h) const {
    return head_norm_sum[static_cast<std::size_t>(h)] / static_cast<double>(tokens);
  }
  double mean_cosine() const { return cosine_sum / static_cast<double>(tokens); }
};

struct calibration_stats {
  model::model_config config;  // the model the statistics were gathered on
  index_t tokens = 0;
  std::vector<layer_stats> layers;

  // Throws unless these statistics hold tokens and were gathered on a model of cfg's shape; `who`
  // names the caller in the message.
  void expect_fits(const model::model_config& cfg, std::string_view who) const;
};

namespace stats_detail {

// Whether two configs describe models of one shape (family, widths, every layer's heads, KV heads, FFN).
inline bool same_shape(const model::model_config& a, const model::model_config& b) {
  bool same = a.fam == b.fam && a.d_model == b.d_model && a.head_dim == b.head_dim && a.layers.size() == b.layers.size();
  for (std::size_t l = 0; same && l < a.layers.size(); ++l)
    same = a.layers[l].n_heads == b.layers[l].n_heads && a.layers[l].n_kv_heads == b.layers[l].n_kv_heads &&
           a.layers[l].ffn == b.layers[l].ffn;
  return same;
}

inline std::string describe_shape(const model::model_config& c) {
  std::ostringstream os;
  os << model::family_name(c.fam) << " d_model " << c.d_model << ", head_dim " << c.head_dim << ", layers (heads/kv/ffn)";
  for (const auto& L : c.layers) os << ' ' << L.n_heads << '/' << L.n_kv_heads << '/' << L.ffn;
  return os.str();
}

}  // namespace stats_detail

inline void calibration_stats::expect_fits(const model::model_config& cfg, std::string_view who) const {
  check(tokens > 0 && !layers.empty(), who, ": the calibration statistics hold no tokens (gather them with collect_statistics)");
  check(stats_detail::same_shape(config, cfg) && layers.size() == cfg.layers.size(), who,
        ": the calibration statistics were gathered on a model of shape [", stats_detail::describe_shape(config),
        "], expected one of shape [", stats_detail::describe_shape(cfg), "]");
}

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
  explicit calibration_pass(const model::transformer<Backend>& net) : net_(net) {
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
    ops::embedding_forward(be, hidden_[0], tensor(tok_.data(), dtype::i32, {B, T}), net_.param("wte"),
                           net_.layout().contains("wpe") ? net_.param("wpe") : tensor());
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

  const model::transformer<Backend>& net_;
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
calibration_stats collect_statistics(const model::transformer<Backend>& net, const std::vector<std::int32_t>& ids, index_t B,
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
calibration_stats collect_statistics(const model::transformer<Backend>& net, const data::batch_loader& loader, index_t B,
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

// ---- what a criterion reads -----------------------------------------------------------------------

// A read-only row-major matrix inside scoring_input::params; a 1-D parameter is (n, 1); an absent
// parameter is empty.
struct matrix_view {
  const double* data = nullptr;
  index_t rows = 0, cols = 0;

  bool empty() const { return data == nullptr; }
  double operator()(index_t r, index_t c) const { return data[r * cols + c]; }
};

// One block's linear layers and biases (for gated MLPs fc = gate, up = up, proj = down), as in
// model::block_weights.
struct block_matrices {
  matrix_view q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b, fc_w, fc_b, up_w, proj_w, proj_b;
};

struct scoring_input {
  model::model_config config;
  tensor_layout layout;
  std::vector<double> params;               // every parameter in double, laid out by `layout`
  std::optional<calibration_stats> stats;  // absent for criteria that read weights only
  std::optional<local_gradients> gradients;  // for criteria with needs_gradients (Taylor)

  // The parameter `name` (e.g. "layers.0.attn.q.weight"); empty when the model has none.
  matrix_view param(const std::string& name) const {
    if (!layout.contains(name)) return {};
    const auto& e = layout.find(name);
    const index_t rows = e.shape[0], cols = e.shape.rank() >= 2 ? e.shape.numel() / rows : 1;
    return {params.data() + e.offset, rows, cols};
  }
  block_matrices block(index_t layer) const {
    const std::string p = model::layer_prefix(layer);
    const bool gated = config.traits().gated_mlp;
    return {param(p + "attn.q.weight"), param(p + "attn.q.bias"), param(p + "attn.k.weight"), param(p + "attn.k.bias"),
            param(p + "attn.v.weight"), param(p + "attn.v.bias"), param(p + "attn.o.weight"), param(p + "attn.o.bias"),
            param(p + (gated ? "mlp.gate.weight" : "mlp.fc.weight")),   param(p + "mlp.fc.bias"),
            param(p + "mlp.up.weight"), param(p + (gated ? "mlp.down.weight" : "mlp.proj.weight")), param(p + "mlp.proj.bias")};
  }
  // Every parameter of the block (norms and biases included).
  std::vector<matrix_view> layer_params(index_t layer) const {
    const std::string p = model::layer_prefix(layer);
    std::vector<matrix_view> out;
    for (const auto& e : layout.entries())
      if (e.name.compare(0, p.size(), p) == 0) out.push_back(param(e.name));
    return out;
  }
  // The statistics, checked against the model; `criterion` names the reader in the error.
  const calibration_stats& statistics(std::string_view criterion) const {
    check(stats.has_value(), "pruning criterion ", criterion,
          " needs calibration statistics; the scoring input has none (pass collect_statistics' result to "
          "make_scoring_input)");
    stats->expect_fits(config, std::string("pruning criterion ") + std::string(criterion));
    return *stats;
  }
  // The local gradients, checked against the model; `criterion` names the reader in the error.
  const local_gradients& local_gradients_for(std::string_view criterion) const {
    check(gradients.has_value(), "pruning criterion ", criterion,
          " needs gradients of a local loss; the scoring input has none (set scoring_input::gradients from "
          "collect_local_gradients)");
    check(stats_detail::same_shape(gradients->config, config) && gradients->grad.size() == params.size(), "pruning criterion ",
          criterion, ": the gradients were taken on a model of shape [", stats_detail::describe_shape(gradients->config),
          "], expected one of shape [", stats_detail::describe_shape(config), "]");
    return *gradients;
  }
};

// The scoring input of `net` (its weights copied to host memory as double), with optional statistics,
// which must have been gathered on a model of net's shape.
template <class Backend>
scoring_input make_scoring_input(const model::transformer<Backend>& net, std::optional<calibration_stats> stats = std::nullopt) {
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

// ---- helpers for criteria -----------------------------------------------------------------------

// sum over rows [r0, r1) and every column c of f(W(r, c)) * scale[c] (scale null: 1). An empty W sums to 0.
template <class F>
double row_block_sum(const matrix_view& w, index_t r0, index_t r1, F f, const std::vector<double>* scale = nullptr) {
  if (w.empty()) return 0.0;
  double s = 0;
  for (index_t r = r0; r < r1; ++r)
    for (index_t c = 0; c < w.cols; ++c) s += f(w(r, c)) * (scale ? (*scale)[static_cast<std::size_t>(c)] : 1.0);
  return s;
}

// sum over every row r and columns [c0, c1) of f(W(r, c)) * scale[c] (scale null: 1). An empty W sums to 0.
template <class F>
double column_block_sum(const matrix_view& w, index_t c0, index_t c1, F f, const std::vector<double>* scale = nullptr) {
  if (w.empty()) return 0.0;
  double s = 0;
  for (index_t r = 0; r < w.rows; ++r)
    for (index_t c = c0; c < c1; ++c) s += f(w(r, c)) * (scale ? (*scale)[static_cast<std::size_t>(c)] : 1.0);
  return s;
}

// Zero scores of the right sizes for every layer of cfg: H heads, KVH KV groups, F FFN channels.
inline group_scores sized_scores(const model::model_config& cfg, std::string_view criterion) {
  group_scores g;
  g.criterion = std::string(criterion);
  for (const auto& L : cfg.layers) {
    layer_scores s;
    s.heads.assign(static_cast<std::size_t>(L.n_heads), 0.0);
    s.kv_groups.assign(static_cast<std::size_t>(L.n_kv_heads), 0.0);
    s.ffn.assign(static_cast<std::size_t>(L.ffn), 0.0);
    g.layers.push_back(std::move(s));
  }
  return g;
}

// Throws unless `scores` has one entry per layer of cfg with H, KVH and F finite scores.
inline void expect_scores_fit(const model::model_config& cfg, const group_scores& scores) {
  check(scores.layers.size() == cfg.layers.size(), "group_scores (", scores.criterion, "): ", scores.layers.size(),
        " layers, the model has ", cfg.layers.size());
  for (std::size_t l = 0; l < cfg.layers.size(); ++l) {
    const auto& L = cfg.layers[l];
    const auto& s = scores.layers[l];
    check(static_cast<index_t>(s.heads.size()) == L.n_heads && static_cast<index_t>(s.kv_groups.size()) == L.n_kv_heads &&
              static_cast<index_t>(s.ffn.size()) == L.ffn,
          "group_scores (", scores.criterion, "): layer ", l, " has ", s.heads.size(), " head, ", s.kv_groups.size(),
          " KV-group and ", s.ffn.size(), " FFN scores, expected ", L.n_heads, ", ", L.n_kv_heads, " and ", L.ffn);
    auto finite = [&](const std::vector<double>& v, const char* what) {
      for (std::size_t i = 0; i < v.size(); ++i)
        check(std::isfinite(v[i]), "group_scores (", scores.criterion, "): layer ", l, " ", what, " ", i, " is ", v[i]);
    };
    finite(s.heads, "head");
    finite(s.kv_groups, "KV group");
    finite(s.ffn, "FFN channel");
    check(std::isfinite(s.layer), "group_scores (", scores.criterion, "): layer ", l, " score is ", s.layer);
  }
}

}  // namespace lwcl::prune
