#pragma once
// prefetcher: a pool of threads that reads and decodes the features the trainer will ask for, in the
// order it will ask, into a bounded ring of staging buffers (pinned under CUDA, so the copy to the GPU
// overlaps compute). next() blocks only when the next feature is not staged yet, and that wait is
// counted as stall time. A failure while staging an item surfaces as lwcl::error from next() at that item.

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/core/timer.hpp"
#include "lwcl/cache/feature_cache.hpp"
#include "lwcl/cache/memory.hpp"

namespace lwcl::cache {

// One feature the trainer will read, with the weights version it expects (required for student
// features, as with feature_cache::get).
struct prefetch_item {
  feature_key key;
  std::optional<std::uint64_t> expected_version;

  prefetch_item(const feature_key& k, std::optional<std::uint64_t> version = std::nullopt)
      : key(k), expected_version(version) {}
};

struct prefetch_options {
  int threads = 2;  // workers reading and decoding
  int ring = 2;     // staging buffers; the trainer holds `hold` of them, so ring > hold overlaps
  int hold = 1;     // delivered features kept staged until a later next() or release() gives them back
                    // (oldest first): an asynchronous copy out of a staging buffer needs it kept
};

// A staged feature: valid until `hold` more next() calls or release(), or the prefetcher's end.
struct staged_feature {
  std::size_t index = 0;  // position in the plan
  feature_key key;
  record_meta meta;       // as stored (dtype, shape, version, encoding on the tier)
  tensor data;            // the decoded elements, in meta.type, in a staging buffer
};

struct prefetch_stats {
  std::size_t planned = 0;
  std::size_t delivered = 0;
  std::size_t ready = 0;            // staged now, waiting for next()
  double mean_depth = 0;            // staged items next() found on entry, averaged over its calls
  std::size_t max_depth = 0;
  std::size_t stalls = 0;           // next() calls that had to wait
  double stall_seconds = 0;         // time the trainer spent waiting in next()
  double work_seconds = 0;          // time workers spent reading and decoding, all threads together
  std::uint64_t bytes_delivered = 0;
  std::uint64_t staging_bytes = 0;  // held by the ring's buffers now
};

template <feature_store Store, staging_memory Memory = heap_memory>
class prefetcher {
 public:
  prefetcher(feature_cache<Store>& cache, std::vector<prefetch_item> plan, prefetch_options options = {})
      : cache_(cache), plan_(std::move(plan)), opt_(options) {
    check(opt_.threads >= 1 && opt_.threads <= 256, "prefetcher: ", opt_.threads, " threads, expected 1 to 256");
    check(opt_.ring >= 1 && opt_.ring <= 4096, "prefetcher: a ring of ", opt_.ring, " buffers, expected 1 to 4096");
    check(opt_.hold >= 1 && opt_.hold <= opt_.ring, "prefetcher: hold ", opt_.hold, " staged features, expected 1 to the ring's ",
          opt_.ring, " buffers");
    slots_.resize(static_cast<std::size_t>(opt_.ring));
    // Each buffer sized up front for the largest item it will stage, of those the cache holds now, so the
    // staging bytes stay put while the consumer runs: a memory sample taken between two of its steps
    // never sees a buffer the tracker counts but staging_bytes does not yet. (An item written later
    // still grows its buffer when it is staged.)
    std::vector<std::size_t> need(slots_.size(), 0);
    for (std::size_t i = 0; i < plan_.size(); ++i)
      if (const std::optional<record_meta> m = cache_.find_meta(plan_[i].key)) {
        std::size_t& n = need[i % need.size()];
        n = std::max(n, static_cast<std::size_t>(m->raw_bytes()));
      }
    for (std::size_t k = 0; k < slots_.size(); ++k)
      if (need[k] > 0) grow(slots_[k], need[k]);
    try {
      for (int t = 0; t < opt_.threads; ++t) workers_.emplace_back([this] { work(); });
    } catch (...) {
      shut_down();
      throw;
    }
  }
  // Stops the workers and waits for them; an item being read is finished first.
  ~prefetcher() { shut_down(); }
  prefetcher(const prefetcher&) = delete;
  prefetcher& operator=(const prefetcher&) = delete;

  // The next feature of the plan, or nullopt once all were delivered. Gives back the buffer of the
  // oldest feature still held when `hold` are held. Throws lwcl::error (naming the item) when staging this item failed, and
  // again on every later call.
  std::optional<staged_feature> next() {
    std::unique_lock lock(mu_);
    if (held_ >= static_cast<std::size_t>(opt_.hold)) release_oldest_locked();
    if (failure_) std::rethrow_exception(failure_);
    if (consumed_ >= plan_.size()) return std::nullopt;
    slot& s = slots_[consumed_ % slots_.size()];
    const std::size_t depth = ready_locked();
    depth_sum_ += depth;
    ++depth_samples_;
    max_depth_ = std::max(max_depth_, depth);
    const auto staged = [&] { return s.ready && s.index == consumed_; };
    if (!staged()) {
      ++stalls_;
      const timer t;
      ready_cv_.wait(lock, staged);
      stall_seconds_ += t.seconds();
    }
    s.ready = false;
    if (s.error) {
      failure_ = with_context(s.error, consumed_);
      failed_ = true;
      space_cv_.notify_all();
      std::rethrow_exception(failure_);
    }
    staged_feature f{consumed_, plan_[consumed_].key, s.meta, tensor(s.buffer.data(), s.meta.type, s.meta.shape)};
    ++held_;
    ++consumed_;
    bytes_delivered_ += s.meta.raw_bytes();
    return f;
  }

  // Gives back the buffers of every feature still held (their staged_features are invalid from here
  // on), so workers can refill them while the trainer still computes.
  void release() {
    std::lock_guard lock(mu_);
    while (held_ > 0) release_oldest_locked();
  }

  std::size_t size() const { return plan_.size(); }
  const prefetch_options& options() const { return opt_; }
  std::size_t ready() const {
    std::lock_guard lock(mu_);
    return ready_locked();
  }

  prefetch_stats stats() const {
    std::lock_guard lock(mu_);
    prefetch_stats s;
    s.planned = plan_.size();
    s.delivered = consumed_;
    s.ready = ready_locked();
    s.mean_depth = depth_samples_ ? static_cast<double>(depth_sum_) / static_cast<double>(depth_samples_) : 0.0;
    s.max_depth = max_depth_;
    s.stalls = stalls_;
    s.stall_seconds = stall_seconds_;
    s.work_seconds = work_seconds_;
    s.bytes_delivered = bytes_delivered_;
    s.staging_bytes = staging_bytes_;
    return s;
  }

 private:
  struct slot {
    memory_block<Memory> buffer;
    std::size_t index = 0;
    bool ready = false;
    record_meta meta;
    std::exception_ptr error;
  };

  // Item i goes to slot i % ring, and is claimed only once item i - ring has been given back, so a
  // worker owns its slot alone until it marks it ready.
  void work() {
    const std::size_t ring = slots_.size();
    for (;;) {
      std::size_t i = 0;
      {
        std::unique_lock lock(mu_);
        space_cv_.wait(lock, [&] { return stop_ || failed_ || claimed_ >= plan_.size() || claimed_ < released_ + ring; });
        if (stop_ || failed_ || claimed_ >= plan_.size()) return;
        i = claimed_++;
      }
      slot& s = slots_[i % ring];
      record_meta meta;
      std::exception_ptr err;
      const timer t;
      try {
        const prefetch_item& item = plan_[i];
        const std::optional<record_meta> m = cache_.find_meta(item.key);
        const std::size_t need = m ? static_cast<std::size_t>(m->raw_bytes()) : 0;
        if (s.buffer.bytes() < need) grow(s, need);
        meta = cache_.read_raw(item.key, std::span<std::byte>(s.buffer.data(), need), item.expected_version);
      } catch (...) {
        err = std::current_exception();
      }
      std::lock_guard lock(mu_);
      s.index = i;
      s.meta = meta;
      s.error = err;
      s.ready = true;
      work_seconds_ += t.seconds();
      if (err) failed_ = true;  // no item after this one will be delivered
      ready_cv_.notify_all();
    }
  }

  void grow(slot& s, std::size_t bytes) {
    const std::size_t old = s.buffer.bytes();
    s.buffer = memory_block<Memory>();  // freed first, so the peak is one buffer, not two
    {
      std::lock_guard lock(mu_);
      staging_bytes_ -= old;
    }
    s.buffer = memory_block<Memory>(bytes);
    std::lock_guard lock(mu_);
    staging_bytes_ += bytes;
  }

  // Items are given back in delivery order, so released_ counts a prefix of the plan and slot
  // i % ring is free for item i once released_ > i - ring.
  void release_oldest_locked() {
    if (held_ == 0) return;
    --held_;
    ++released_;
    space_cv_.notify_all();
  }
  std::size_t ready_locked() const {
    return static_cast<std::size_t>(std::count_if(slots_.begin(), slots_.end(), [](const slot& s) { return s.ready; }));
  }

  std::exception_ptr with_context(std::exception_ptr e, std::size_t i) const {
    const std::string where =
        lwcl::detail::concat("prefetcher: item ", i, " of ", plan_.size(), " (", plan_[i].key.str(), "): ");
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      return std::make_exception_ptr(error(where + x.what()));
    } catch (...) {
      return std::make_exception_ptr(error(where + "unknown exception"));
    }
  }

  void shut_down() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    space_cv_.notify_all();
    for (std::thread& t : workers_)
      if (t.joinable()) t.join();
  }

  feature_cache<Store>& cache_;
  const std::vector<prefetch_item> plan_;
  const prefetch_options opt_;
  std::vector<slot> slots_;
  std::vector<std::thread> workers_;

  mutable std::mutex mu_;
  std::condition_variable space_cv_;  // a slot was given back, or the prefetcher stops
  std::condition_variable ready_cv_;  // an item was staged
  std::size_t claimed_ = 0, consumed_ = 0, released_ = 0, held_ = 0;
  bool stop_ = false, failed_ = false;
  std::exception_ptr failure_;
  std::size_t depth_sum_ = 0, depth_samples_ = 0, max_depth_ = 0, stalls_ = 0;
  double stall_seconds_ = 0, work_seconds_ = 0;
  std::uint64_t bytes_delivered_ = 0, staging_bytes_ = 0;
};

}  // namespace lwcl::cache
