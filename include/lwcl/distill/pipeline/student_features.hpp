#pragma once
// The boundary features a layer-wise recovery reads, and the versions of the student's: student layer
// l carries the version of the weights it was last trained to (0: the pruned weights), the student
// feature at boundary a the newest version among layers [0, a). A feature whose version is older is
// stale: it is recomputed (refresh) before a visit reads it, and a stale read is an error in the
// cache, never a silent one. Teacher features never change.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include <nlohmann/json.hpp>

#include "lwcl/cache/feature_cache.hpp"
#include "lwcl/cache/prefetcher.hpp"
#include "lwcl/core/config.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/distill/student_state.hpp"
#include "lwcl/model/block_stack.hpp"
#include "lwcl/ops/common.hpp"
#include "lwcl/tensor/arena.hpp"

namespace lwcl::distill {

template <class Backend, class Store>
class student_features {
 public:
  // What a refresh did, for metrics.jsonl.
  struct refresh_record {
    index_t boundary = 0, from = 0;
    std::uint64_t version = 0;
    double seconds = 0;
  };

  // boundaries: the layer map (student boundary a reads teacher boundary boundaries[a]); B x T: the
  // batch shape; feature_batches: the cached batches 0 .. feature_batches - 1.
  student_features(Backend& be, cache::feature_cache<Store>& features, const student_state& student,
                   std::vector<index_t> boundaries, index_t B, index_t T, index_t feature_batches)
      : be_(be), cache_(features), st_(student), tlo_(std::move(boundaries)), B_(B), T_(T),
        batches_(feature_batches), layer_version_(static_cast<std::size_t>(student.config.n_layers()), 0) {}

  shape feature_shape() const { return {B_, T_, st_.config.d_model}; }
  std::size_t feature_bytes() const { return static_cast<std::size_t>(B_ * T_ * st_.config.d_model) * dtype_size(st_.type); }
  index_t feature_batches() const { return batches_; }
  const std::vector<index_t>& boundaries() const { return tlo_; }

  // The teacher boundary a student boundary's feature is learned from.
  index_t teacher_in(index_t a) const { return tlo_[static_cast<std::size_t>(a)]; }
  index_t teacher_out(index_t b) const { return tlo_[static_cast<std::size_t>(b)]; }

  // The weights version of the student feature at boundary a (the output of layers [0, a)).
  std::uint64_t version_at(index_t a) const {
    std::uint64_t v = 0;
    for (index_t l = 0; l < a; ++l) v = std::max(v, layer_version_[static_cast<std::size_t>(l)]);
    return v;
  }
  // The key and expected version of the student's input feature at boundary a: the student's own
  // embedding output equals the teacher's (pruning keeps the embeddings), so boundary 0 is read there.
  cache::prefetch_item student_item(index_t a, index_t batch) const {
    if (a == 0) return cache::prefetch_item({0, cache::source::teacher, batch});
    return cache::prefetch_item({a, cache::source::student, batch}, version_at(a));
  }
  cache::prefetch_item teacher_item(index_t boundary, index_t batch) const {
    return cache::prefetch_item({boundary, cache::source::teacher, batch});
  }

  // The feature under `it`, read from the cache and copied into `dst` in backend memory.
  void load(const cache::prefetch_item& it, const tensor& dst) {
    host_.resize(feature_bytes());
    cache_.read_raw(it.key, std::span<std::byte>(host_.data(), host_.size()), it.expected_version);
    be_.from_host(dst.data, host_.data(), host_.size());
  }
  // `src` (backend memory) stored under `k` with `version`.
  void put(const cache::feature_key& k, const tensor& src, std::uint64_t version) {
    host_.resize(feature_bytes());
    be_.to_host(host_.data(), src.data, host_.size());
    cache_.put(k, tensor(host_.data(), st_.type, feature_shape()), version);
  }

  // Whether every cached batch's student feature at boundary b has the current version.
  bool current(index_t b) const {
    if (b == 0) return true;
    const std::uint64_t v = version_at(b);
    for (index_t k = 0; k < batches_; ++k) {
      const auto m = cache_.find_meta({b, cache::source::student, k});
      if (!m || m->version != v) return false;
    }
    return true;
  }

  // The student's feature at boundary a for every cached batch, with the current weights: recomputed
  // from the nearest boundary below whose features are current (boundary 0 always is). Nothing when
  // they are current already.
  std::optional<refresh_record> refresh(index_t a) {
    if (a == 0 || current(a)) return std::nullopt;
    timer t;
    index_t from = a - 1;
    while (!current(from)) --from;
    tensor_layout lay;
    model::add_stack_params(lay, st_.config, from, a);
    buffer<Backend> params(be_, static_cast<std::size_t>(lay.numel()) * dtype_size(st_.type));
    be_.fill_zero(params.data(), params.bytes());
    ops::dispatch_float("pipeline", st_.type, [&](auto z) {
      using E = decltype(z);
      std::vector<E> host(static_cast<std::size_t>(lay.numel()), E(0));
      for (const auto& e : lay.entries()) {
        const auto& src = st_.layout.find(e.name);
        for (index_t i = 0; i < e.shape.numel(); ++i)
          host[static_cast<std::size_t>(e.offset + i)] = static_cast<E>(st_.params[static_cast<std::size_t>(src.offset + i)]);
      }
      be_.from_host(params.data(), host.data(), params.bytes());
    });
    model::block_stack<Backend> stack(be_, st_.config, from, a, lay, params.data(), nullptr, st_.type);
    owned_tensor<Backend> x(be_, st_.type, feature_shape()), y(be_, st_.type, feature_shape());
    const std::uint64_t v = version_at(a);
    cache_.invalidate(a, cache::source::student);
    for (index_t k = 0; k < batches_; ++k) {
      load(student_item(from, k), x.view());
      stack.forward(x.view(), y.view());
      put({a, cache::source::student, k}, y.view(), v);
    }
    return refresh_record{a, from, v, t.seconds()};
  }

  // Layers [first, last) were trained: they get a new version, and the student features above the
  // segment are stale now (those below it are still current).
  void trained(index_t first, index_t last) {
    ++version_counter_;
    for (index_t l = first; l < last; ++l) layer_version_[static_cast<std::size_t>(l)] = version_counter_;
    for (index_t b = first + 1; b <= st_.config.n_layers(); ++b) cache_.invalidate(b, cache::source::student);
  }

  // Whether any student feature at boundary a is stored (current or not).
  bool holds(index_t a) const { return cache_.find_meta({a, cache::source::student, 0}).has_value(); }
  // The student features at boundary a dropped: nothing will read them again (a later read recomputes
  // them by refresh, from the nearest current boundary below).
  void release(index_t a) { cache_.invalidate(a, cache::source::student); }

  // The versions, for checkpoints, and back.
  void save_versions(nlohmann::json& state) const {
    state["layer_version"] = layer_version_;
    state["version_counter"] = version_counter_;
  }
  void restore_versions(const nlohmann::json& state) {
    layer_version_ = state.at("layer_version").get<std::vector<std::uint64_t>>();
    version_counter_ = state.at("version_counter");
  }

 private:
  Backend& be_;
  cache::feature_cache<Store>& cache_;
  const student_state& st_;
  std::vector<index_t> tlo_;
  index_t B_, T_, batches_;
  std::vector<std::uint64_t> layer_version_;
  std::uint64_t version_counter_ = 0;
  std::vector<std::byte> host_;
};

}  // namespace lwcl::distill
