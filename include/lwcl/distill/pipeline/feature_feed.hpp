#pragma once
// The feature feed of one visit: each step's boundary features in compute memory, in step order. For
// step s: the teacher input when the student share r < 1, the student input when r > 0, and the
// teacher output, of cached batch (s + batch_offset) mod feature_batches. They come from the prefetcher's staging ring
// by the backend's copy_async (the copy stream on a device), or, for a store in the backend's device
// memory, by a device-to-device copy. With `ahead` the copies of step s + 1 are queued into a second
// feature set before step s computes, so that they overlap it. A staged buffer is given back to the
// prefetcher (by a later next()) only after synchronize_copies, so no copy reads a buffer that a
// worker is refilling.

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <optional>
#include <vector>

#include "lwcl/cache/feature_cache.hpp"
#include "lwcl/cache/prefetcher.hpp"
#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/core/memory.hpp"
#include "lwcl/distill/pipeline/student_features.hpp"
#include "lwcl/tensor/arena.hpp"

namespace lwcl::distill {

// One step's features: teacher input, student input, teacher output at the segment's boundaries.
template <class Backend>
struct feature_set {
  owned_tensor<Backend> xt, xs, y;
};

template <class Backend, class Store, class Staging>
class feature_feed {
 public:
  // A store in the backend's device memory is read in place (copied device to device on the compute
  // stream) rather than through the prefetcher's host staging ring.
  static constexpr bool device_resident = Backend::is_device && Store::memory_tier == lwcl::tier::device;

  // Feature sets a visit holds in compute memory: two when the next step's copies are queued ahead.
  static index_t set_count(bool upload_ahead) { return !device_resident && upload_ahead ? 2 : 1; }

  // Steps [s0, end) of a visit to student layers [first, last); share[s] is step s's student share.
  feature_feed(Backend& be, cache::feature_cache<Store>& features, student_features<Backend, Store>& sf, index_t first,
               index_t last, long s0, long end, const std::vector<double>& share, const cache::prefetch_options& prefetch,
               bool upload_ahead, dtype type, long batch_offset = 0)
      : be_(be), cache_(features), sf_(sf), first_(first), last_(last), end_(end), offset_(batch_offset), share_(share),
        ahead_(set_count(upload_ahead) == 2) {
    for (int i = 0; i < (ahead_ ? 2 : 1); ++i)
      sets_.push_back(feature_set<Backend>{{be_, type, sf_.feature_shape()},
                                           {be_, type, sf_.feature_shape()},
                                           {be_, type, sf_.feature_shape()}});
    if constexpr (!device_resident) {
      std::vector<cache::prefetch_item> plan;
      for (long s = s0; s < end; ++s) for_items(s, [&](const cache::prefetch_item& it, int) { plan.push_back(it); });
      cache::prefetch_options po = prefetch;
      po.hold = Backend::is_device ? 3 : 1;  // a host copy is finished when copy_async returns
      po.ring += po.hold - 1;
      pf_.emplace(cache_, std::move(plan), po);
    }
    if (ahead_ && s0 < end_) upload(s0);
  }
  // Copies still queued read staging buffers and write feature sets that go with this object.
  ~feature_feed() {
    try {
      be_.synchronize_copies();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "pipeline: waiting for feature copies failed: %s\n", e.what());
    }
  }
  feature_feed(const feature_feed&) = delete;
  feature_feed& operator=(const feature_feed&) = delete;

  // Step s's features, ready for the kernels queued next; called for s = s0, s0 + 1, ... in order.
  const feature_set<Backend>& at(long s) {
    if (!ahead_) upload(s);
    be_.compute_wait_for_copies();
    if (ahead_ && s + 1 < end_) {
      be_.copies_wait_for_compute();  // the other set was read by step s - 1
      upload(s + 1);
    }
    return set_of(s);
  }
  // The visit stops before its planned end (a seconds budget's estimate): nothing is copied past it.
  void end_at(long end) { end_ = std::min(end_, end); }
  std::size_t sets() const { return sets_.size(); }
  // The cached batch step s reads.
  index_t batch_of(long s) const { return static_cast<index_t>((s + offset_) % sf_.feature_batches()); }
  cache::prefetch_stats stats() const { return pf_ ? pf_->stats() : cache::prefetch_stats{}; }

 private:
  feature_set<Backend>& set_of(long s) { return sets_[static_cast<std::size_t>(s) % sets_.size()]; }

  template <class F>
  void for_items(long s, F&& f) const {
    const index_t b = batch_of(s);
    const double r = share_[static_cast<std::size_t>(s)];
    if (r < 1) f(sf_.teacher_item(sf_.teacher_in(first_), b), 0);
    if (r > 0) f(sf_.student_item(first_, b), 1);
    f(sf_.teacher_item(sf_.teacher_out(last_), b), 2);
  }

  void upload(long s) {
    be_.synchronize_copies();  // the buffers the next() calls below give back are copied out
    feature_set<Backend>& fs = set_of(s);
    for_items(s, [&](const cache::prefetch_item& it, int which) {
      load(it, which == 0 ? fs.xt.view() : which == 1 ? fs.xs.view() : fs.y.view());
    });
  }

  void load(const cache::prefetch_item& it, const tensor& dst) {
    if constexpr (device_resident) {
      const cache::record_view v = cache_.view(it.key, it.expected_version);
      check(v.meta.enc == cache::encoding::raw && v.meta.type == dst.type && v.meta.shape == dst.shape,
            "pipeline: cached feature ", it.key.str(), " is ", dtype_name(v.meta.type), v.meta.shape.str(), " (",
            cache::encoding_name(v.meta.enc), "), expected ", dst.describe());
      be_.copy(dst.data, v.bytes.data(), v.bytes.size());
    } else {
      auto f = pf_->next();
      check(f.has_value(), "pipeline: the prefetch plan ended early");
      check(f->data.type == dst.type && f->data.shape == dst.shape, "pipeline: cached feature ", f->key.str(), " is ",
            f->data.describe(), ", expected ", dst.describe());
      be_.copy_async(dst.data, f->data.data, f->data.bytes());
    }
  }

  Backend& be_;
  cache::feature_cache<Store>& cache_;
  student_features<Backend, Store>& sf_;
  index_t first_, last_;
  long end_, offset_;
  const std::vector<double>& share_;
  bool ahead_;
  std::vector<feature_set<Backend>> sets_;
  std::optional<cache::prefetcher<Store, Staging>> pf_;
};

}  // namespace lwcl::distill
