#pragma once
// How good a collapsed student is, measured against its teacher on calibration tokens, with the
// teacher's side computed once: its hidden state at every layer boundary (and, for the module-wise
// cosine, each layer's state after attention) goes into a feature cache, its next-token distributions
// are kept beside them. An evaluation then runs only the candidate's merged layers, and, for the KL
// terms, the candidate from its first merged layer up (below it the candidate is the teacher).
//
// The measurements (all token means over the calibration set, spans weighted equally):
//   residual similarity  per collapsed span [b, e]: cos(f(h_b) - h_b, h_{e+1} - h_b), f the merged layer
//                        run on the teacher's own h_b (GeLaCo's similarity over residual updates); 1 when
//                        nothing is collapsed.
//   module cosine        per span, the mean of three cosines: the merged layer's attention update
//                        against the sum of the span's attention updates, its MLP update against the sum
//                        of the span's MLP updates, and its output against h_{e+1} (GeLaCo-style
//                        module-wise similarity; pre-norm decoders only).
//   KL                   KL(teacher || candidate) of the next-token distributions, nats per token.
//   top-K KL             the same over the teacher's K most likely tokens at each position, both
//                        distributions renormalised over those K (EvoPress's sparse KL, K >= 512 there);
//                        K >= vocabulary gives the full KL.
// A fitness policy turns them into one number to maximise (quality()) and says which it needs.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

#include "lwcl/cache/feature_cache.hpp"
#include "lwcl/cache/host_store.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/search/gelaco/genome.hpp"
#include "lwcl/search/gelaco/merge.hpp"
#include "lwcl/model/block.hpp"
#include "lwcl/model/layer_map.hpp"
#include "lwcl/model/transformer.hpp"
#include "lwcl/ops/common.hpp"
#include "lwcl/prune/layer_collapse.hpp"
#include "lwcl/prune/surgery.hpp"

namespace lwcl::gelaco {

// Token ids of `batches` calibration batches of (B, T), batch after batch.
struct calibration_set {
  std::vector<std::int32_t> ids;
  index_t B = 0, T = 0;
  index_t batches() const { return B * T > 0 ? static_cast<index_t>(ids.size()) / (B * T) : 0; }
  void validate(index_t vocab, index_t max_seq) const {
    check(B >= 1 && T >= 1, "gelaco: calibration batches of ", B, " x ", T, " tokens, expected at least 1 x 1");
    check(T <= max_seq, "gelaco: calibration sequences of ", T, " tokens, the teacher's limit is ", max_seq);
    check(!ids.empty() && ids.size() % static_cast<std::size_t>(B * T) == 0, "gelaco: ", ids.size(),
          " calibration token ids are not a whole number of ", B, " x ", T, " batches");
    for (std::size_t i = 0; i < ids.size(); ++i)
      check(ids[i] >= 0 && ids[i] < vocab, "gelaco: calibration token ", i, " is ", ids[i], ", outside the vocabulary of ",
            vocab);
  }
};

namespace need {
inline constexpr unsigned residual = 1, modules = 2, kl = 4, kl_top_k = 8;
}

struct measurements {
  double residual_similarity = 1;
  double module_cosine = 1;
  double kl = 0;
  double kl_top_k = 0;
};

// A fitness policy (policies/fitness/gelaco.hpp holds lwcl's): turns the measurements into one number to
// maximise, and says which measurements it needs (need:: flags), so the evaluator computes only those.
template <class F>
concept fitness_policy = requires(const F f, const measurements& m) {
  { F::name } -> std::convertible_to<std::string_view>;
  { f.needs() } -> std::convertible_to<unsigned>;
  { f.quality(m) } -> std::convertible_to<double>;
};

// ---- the arithmetic, on host doubles ---------------------------------------------------------------

namespace fitness_detail {

// Mean over the rows of (N, C) matrices of cos(a_r, b_r); a row where either side is zero counts 0.
inline double mean_row_cosine(const std::vector<double>& a, const std::vector<double>& b, index_t C) {
  check(a.size() == b.size() && C > 0 && !a.empty() && a.size() % static_cast<std::size_t>(C) == 0, "gelaco: cosine of ",
        a.size(), " and ", b.size(), " values in rows of ", C);
  return prune::collapse_detail::mean_cosine(a, b, C);
}

// Row-wise log-softmax of (N, V) logits, in place.
inline void log_softmax_rows(std::vector<double>& x, index_t V) {
  const std::size_t v = static_cast<std::size_t>(V), n = x.size() / v;
  for (std::size_t r = 0; r < n; ++r) {
    double* row = x.data() + r * v;
    const double mx = *std::max_element(row, row + v);
    double s = 0;
    for (std::size_t j = 0; j < v; ++j) s += std::exp(row[j] - mx);
    const double lse = mx + std::log(s);
    for (std::size_t j = 0; j < v; ++j) row[j] -= lse;
  }
}

// Sum over rows of KL(p || q) for row-wise log-probabilities lp, lq of (N, V).
inline double kl_sum(const std::vector<double>& lp, const std::vector<double>& lq) {
  double total = 0;
  for (std::size_t j = 0; j < lp.size(); ++j) total += std::exp(lp[j]) * (lp[j] - lq[j]);
  return total;
}

// Sum over rows of the KL over the K tokens idx[r*K .. r*K+K) of each row, both sides renormalised
// over those tokens.
inline double kl_top_k_sum(const std::vector<double>& lp, const std::vector<double>& lq, const std::vector<std::int32_t>& idx,
                           index_t V, index_t K) {
  const std::size_t v = static_cast<std::size_t>(V), k = static_cast<std::size_t>(K), n = lp.size() / v;
  double total = 0;
  std::vector<double> a(k), b(k);
  for (std::size_t r = 0; r < n; ++r) {
    for (std::size_t j = 0; j < k; ++j) {
      a[j] = lp[r * v + static_cast<std::size_t>(idx[r * k + j])];
      b[j] = lq[r * v + static_cast<std::size_t>(idx[r * k + j])];
    }
    const auto lse = [](const std::vector<double>& x) {
      const double mx = *std::max_element(x.begin(), x.end());
      double s = 0;
      for (double e : x) s += std::exp(e - mx);
      return mx + std::log(s);
    };
    const double za = lse(a), zb = lse(b);
    for (std::size_t j = 0; j < k; ++j) total += std::exp(a[j] - za) * ((a[j] - za) - (b[j] - zb));
  }
  return total;
}

// The K largest entries of each row of (N, V) values (ties to the lower index), by index.
inline std::vector<std::int32_t> top_k_rows(const std::vector<double>& x, index_t V, index_t K) {
  const std::size_t v = static_cast<std::size_t>(V), k = static_cast<std::size_t>(K), n = x.size() / v;
  std::vector<std::int32_t> out(n * k), order(v);
  for (std::size_t r = 0; r < n; ++r) {
    std::iota(order.begin(), order.end(), 0);
    const double* row = x.data() + r * v;
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                      [&](std::int32_t i, std::int32_t j) { return row[i] > row[j] || (row[i] == row[j] && i < j); });
    std::copy_n(order.begin(), k, out.begin() + static_cast<std::ptrdiff_t>(r * k));
  }
  return out;
}

}  // namespace fitness_detail

// ---- the evaluator -----------------------------------------------------------------------------------

struct evaluator_options {
  index_t top_k = 512;   // K of the top-K KL (clipped to the vocabulary)
  bool modules = false;  // also keep each teacher layer's post-attention state (the module-wise cosine)
};

// Measures candidates of one teacher on one calibration set. measure() may run on several threads at
// once: it reads the teacher and the cache and allocates its own buffers.
template <class Backend, cache::feature_store Store = cache::host_store<>>
class evaluator {
 public:
  evaluator(model::transformer<Backend>& teacher, calibration_set cal, evaluator_options o = {})
      : teacher_(teacher), cal_(std::move(cal)), opt_(o) {
    const auto& cfg = teacher.config();
    cal_.validate(cfg.vocab, cfg.max_seq);
    check(opt_.top_k >= 1, "gelaco: top-K KL with K = ", opt_.top_k, ", expected at least 1");
    opt_.top_k = std::min(opt_.top_k, cfg.vocab);
    check(!opt_.modules || !cfg.traits().post_norm, "gelaco: the module-wise cosine needs a pre-norm decoder");
    const auto params = prune::detail::host_params(teacher);
    layers_ = prune::collapse_detail::split(teacher.layout(), params, cfg.n_layers()).layers;
    for (index_t l = 0; l < cfg.n_layers(); ++l) {
      tensor_layout one;
      model::add_block_params(one, model::layer_prefix(0), model::shape_of_layer(cfg, l));
      layer_layouts_.push_back(std::move(one));
    }
    teacher_pass();
  }

  const model::transformer<Backend>& teacher() const { return teacher_; }
  const calibration_set& calibration() const { return cal_; }
  index_t top_k() const { return opt_.top_k; }
  cache::cache_stats feature_stats() const { return features_.stats(); }

  // What `needs` (need:: flags) asks for of the student g describes.
  measurements measure(const decoded_genome& g, unsigned needs) const {
    const auto& cfg = teacher_.config();
    check(g.teacher_layers == cfg.n_layers(), "gelaco: a genome for ", g.teacher_layers, " layers, the teacher has ",
          cfg.n_layers());
    if (g.spans.empty()) return {};
    const dtype t = teacher_.type();
    std::vector<buffer<Backend>> merged;  // the merged layers' weights, one buffer each
    for (const auto& s : g.spans) merged.push_back(merged_weights(s, g.alpha));
    std::vector<model::block_weights> w;
    std::vector<model::block_shape> sh;
    std::size_t at = 0;
    for (index_t i = 0; i < g.student_layers(); ++i) {
      const index_t b = g.boundaries[static_cast<std::size_t>(i)];
      sh.push_back(model::shape_of_layer(cfg, b));
      if (at < g.spans.size() && g.spans[at].first == b)
        w.push_back(model::bind_block(layer_layouts_[static_cast<std::size_t>(b)], model::layer_prefix(0), merged[at++].data(), t));
      else
        w.push_back(model::bind_block(teacher_.layout(), model::layer_prefix(b), teacher_.params().data, t));
    }
    // Below the first merged layer the candidate is the teacher: the KL pass starts from its state there.
    return measure_layers(g.boundaries, w, sh, g.spans.front().first, needs, g.key());
  }

  // The same of a student model (LaCo's, ShortGPT's, any of the teacher's width) whose layer i stands for
  // teacher layers [boundaries[i], boundaries[i + 1]); its spans are its layers standing for two or more.
  measurements measure(const model::transformer<Backend>& student, const std::vector<index_t>& boundaries, unsigned needs) const {
    const auto& cfg = teacher_.config();
    const auto& scfg = student.config();
    model::check_boundary_map(boundaries, scfg.n_layers(), cfg.n_layers(), "gelaco");
    check(scfg.d_model == cfg.d_model && scfg.vocab == cfg.vocab && student.type() == teacher_.type(), "gelaco: a student of ",
          "width ", scfg.d_model, ", vocabulary ", scfg.vocab, " and dtype ", dtype_name(student.type()), " for a teacher of ",
          cfg.d_model, ", ", cfg.vocab, " and ", dtype_name(teacher_.type()));
    std::vector<model::block_weights> w;
    std::vector<model::block_shape> sh;
    for (index_t i = 0; i < scfg.n_layers(); ++i) {
      sh.push_back(model::shape_of_layer(scfg, i));
      w.push_back(model::bind_block(student.layout(), model::layer_prefix(i), student.params().data, student.type()));
    }
    return measure_layers(boundaries, w, sh, 0, needs, "a student model");
  }

 private:
  measurements measure_layers(const std::vector<index_t>& bounds, const std::vector<model::block_weights>& w,
                              const std::vector<model::block_shape>& sh, index_t kl_from, unsigned needs,
                              const std::string& who) const {
    check(!(needs & need::modules) || opt_.modules, "gelaco: the module-wise cosine was asked for, but the evaluator ",
          "was built without the teacher's module states (evaluator_options::modules)");
    const auto& cfg = teacher_.config();
    auto& be = teacher_.backend();
    const dtype t = teacher_.type();
    const index_t B = cal_.B, T = cal_.T, C = cfg.d_model, V = cfg.vocab, N = B * T;
    const auto n_layers = static_cast<index_t>(w.size());
    std::vector<index_t> spans;  // student layers standing for two or more teacher layers
    for (index_t i = 0; i < n_layers; ++i)
      if (bounds[static_cast<std::size_t>(i) + 1] - bounds[static_cast<std::size_t>(i)] > 1) spans.push_back(i);
    measurements m;
    double res = 0, mod = 0, kl = 0, klk = 0;
    owned_tensor<Backend> x(be, t, {B, T, C}), y(be, t, {B, T, C}), logits(be, t, {B, T, V});
    for (index_t batch = 0; batch < cal_.batches(); ++batch) {
      if (needs & (need::residual | need::modules)) {
        for (index_t i : spans) {
          const index_t b = bounds[static_cast<std::size_t>(i)], e = bounds[static_cast<std::size_t>(i) + 1] - 1;
          model::block_acts<Backend> a(be, sh[static_cast<std::size_t>(i)], B, T, t);
          features_.get({b, cache::source::teacher, batch}, x.view());
          model::block_forward(be, sh[static_cast<std::size_t>(i)], w[static_cast<std::size_t>(i)], a, x.view(), y.view());
          const auto hb = ops::to_host_doubles(be, x.view(), "gelaco");
          const auto out = ops::to_host_doubles(be, y.view(), "gelaco");
          const auto he = feature(e + 1, batch);
          if (needs & need::residual) {
            std::vector<double> du(hb.size()), dt(hb.size());
            for (std::size_t k = 0; k < hb.size(); ++k) du[k] = out[k] - hb[k], dt[k] = he[k] - hb[k];
            res += fitness_detail::mean_row_cosine(du, dt, C);
          }
          if (needs & need::modules) {
            const auto mid = ops::to_host_doubles(be, a.x2, "gelaco");
            std::vector<double> sa(hb.size()), ta(hb.size(), 0.0), sm(hb.size()), tm(hb.size(), 0.0);
            for (std::size_t k = 0; k < hb.size(); ++k) sa[k] = mid[k] - hb[k], sm[k] = out[k] - mid[k];
            for (index_t l = b; l <= e; ++l) {
              const auto hl = feature(l, batch), ml = module_feature(l, batch), hl1 = feature(l + 1, batch);
              for (std::size_t k = 0; k < hb.size(); ++k) ta[k] += ml[k] - hl[k], tm[k] += hl1[k] - ml[k];
            }
            mod += (fitness_detail::mean_row_cosine(sa, ta, C) + fitness_detail::mean_row_cosine(sm, tm, C) +
                    fitness_detail::mean_row_cosine(out, he, C)) /
                   3.0;
          }
        }
      }
      if (needs & (need::kl | need::kl_top_k)) {
        features_.get({kl_from, cache::source::teacher, batch}, x.view());
        for (index_t i = 0; i < n_layers; ++i) {
          if (bounds[static_cast<std::size_t>(i)] < kl_from) continue;
          model::block_acts<Backend> a(be, sh[static_cast<std::size_t>(i)], B, T, t);
          model::block_forward(be, sh[static_cast<std::size_t>(i)], w[static_cast<std::size_t>(i)], a, x.view(), y.view());
          std::swap(x, y);
        }
        teacher_.head_logits(x.view(), logits.view());
        auto lq = ops::to_host_doubles(be, logits.view(), "gelaco");
        fitness_detail::log_softmax_rows(lq, V);
        const auto& lp = teacher_logprobs_[static_cast<std::size_t>(batch)];
        if (needs & need::kl) kl += fitness_detail::kl_sum(lp, lq);
        if (needs & need::kl_top_k)
          klk += fitness_detail::kl_top_k_sum(lp, lq, teacher_top_k_[static_cast<std::size_t>(batch)], V, opt_.top_k);
      }
    }
    const double nb = static_cast<double>(cal_.batches()), ns = static_cast<double>(std::max<std::size_t>(spans.size(), 1));
    if (!spans.empty() && (needs & need::residual)) m.residual_similarity = res / (nb * ns);
    if (!spans.empty() && (needs & need::modules)) m.module_cosine = mod / (nb * ns);
    if (needs & need::kl) m.kl = kl / (nb * static_cast<double>(N));
    if (needs & need::kl_top_k) m.kl_top_k = klk / (nb * static_cast<double>(N));
    for (double v : {m.residual_similarity, m.module_cosine, m.kl, m.kl_top_k})
      check(std::isfinite(v), "gelaco: ", who, " measures non-finite (residual ", m.residual_similarity, ", module ",
            m.module_cosine, ", KL ", m.kl, ", top-K KL ", m.kl_top_k, ")");
    return m;
  }

  // The merged layer of span s, laid out as a layer 0 of its shape, in the teacher's dtype.
  buffer<Backend> merged_weights(collapse_span s, const std::vector<double>& alpha) const {
    const auto& lay = layer_layouts_[static_cast<std::size_t>(s.first)];
    const auto& cfg = teacher_.config();
    for (index_t k = s.first + 1; k <= s.last; ++k) {
      const auto& lb = cfg.layers[static_cast<std::size_t>(s.first)];
      const auto& lk = cfg.layers[static_cast<std::size_t>(k)];
      check(lk.n_heads == lb.n_heads && lk.n_kv_heads == lb.n_kv_heads && lk.ffn == lb.ffn, "gelaco: teacher layers ",
            s.first, " and ", k, " differ in shape; only layers of one shape merge");
    }
    const auto flat = merge_span(layers_, s, alpha);
    std::vector<double> padded(static_cast<std::size_t>(lay.numel()), 0.0);
    std::size_t at = 0;
    for (const auto& e : lay.entries()) {
      std::copy_n(flat.begin() + static_cast<std::ptrdiff_t>(at), e.shape.numel(), padded.begin() + e.offset);
      at += static_cast<std::size_t>(e.shape.numel());
    }
    auto& be = teacher_.backend();
    buffer<Backend> buf(be, padded.size() * dtype_size(teacher_.type()));
    ops::from_host_doubles(be, padded, tensor(buf.data(), teacher_.type(), {lay.numel()}), "gelaco");
    return buf;
  }

  std::vector<double> feature(index_t boundary, index_t batch) const {
    owned_tensor<Backend> h(teacher_.backend(), teacher_.type(), {cal_.B, cal_.T, teacher_.config().d_model});
    features_.get({boundary, cache::source::teacher, batch}, h.view());
    return ops::to_host_doubles(teacher_.backend(), h.view(), "gelaco");
  }
  std::vector<double> module_feature(index_t layer, index_t batch) const {
    owned_tensor<Backend> h(teacher_.backend(), teacher_.type(), {cal_.B, cal_.T, teacher_.config().d_model});
    module_features_.get({layer, cache::source::teacher, batch}, h.view());
    return ops::to_host_doubles(teacher_.backend(), h.view(), "gelaco");
  }

  // The teacher once over the calibration set: hidden states at every boundary (and post-attention
  // states) into the caches, next-token log-probabilities and their top K kept.
  void teacher_pass() {
    auto& be = teacher_.backend();
    const auto& cfg = teacher_.config();
    const dtype t = teacher_.type();
    const index_t B = cal_.B, T = cal_.T, C = cfg.d_model, V = cfg.vocab;
    owned_tensor<Backend> x(be, t, {B, T, C}), y(be, t, {B, T, C}), logits(be, t, {B, T, V});
    buffer<Backend> tok(be, static_cast<std::size_t>(B * T) * sizeof(std::int32_t));
    for (index_t batch = 0; batch < cal_.batches(); ++batch) {
      be.from_host(tok.data(), cal_.ids.data() + batch * B * T, tok.bytes());
      teacher_.embed_inputs(tensor(tok.data(), dtype::i32, {B, T}), x.view());
      features_.put({0, cache::source::teacher, batch}, x.view(), 0);
      for (index_t l = 0; l < cfg.n_layers(); ++l) {
        const auto sh = model::shape_of_layer(cfg, l);
        model::block_acts<Backend> a(be, sh, B, T, t);
        model::block_forward(be, sh, model::bind_block(teacher_.layout(), model::layer_prefix(l), teacher_.params().data, t), a,
                             x.view(), y.view());
        std::swap(x, y);
        features_.put({l + 1, cache::source::teacher, batch}, x.view(), 0);
        if (opt_.modules) module_features_.put({l, cache::source::teacher, batch}, a.x2, 0);
      }
      teacher_.head_logits(x.view(), logits.view());
      auto lp = ops::to_host_doubles(be, logits.view(), "gelaco");
      fitness_detail::log_softmax_rows(lp, V);
      teacher_top_k_.push_back(fitness_detail::top_k_rows(lp, V, opt_.top_k));
      teacher_logprobs_.push_back(std::move(lp));
    }
  }

  model::transformer<Backend>& teacher_;
  calibration_set cal_;
  evaluator_options opt_;
  std::vector<std::vector<double>> layers_;
  std::vector<tensor_layout> layer_layouts_;
  mutable cache::feature_cache<Store> features_, module_features_;
  std::vector<std::vector<double>> teacher_logprobs_;
  std::vector<std::vector<std::int32_t>> teacher_top_k_;
};

}  // namespace lwcl::gelaco
