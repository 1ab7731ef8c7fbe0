#pragma once
// Memory tracker: current and peak bytes per tier for every allocation the framework makes. Backends
// and caches report through it, so a run's "peak compute bytes" is what lwcl really held.

#include <array>
#include <atomic>
#include <cstddef>
#include <string_view>

namespace lwcl {

enum class tier : int { device = 0, host = 1, pinned = 2, disk = 3 };
inline constexpr int tier_count = 4;

inline constexpr std::string_view tier_name(tier t) {
  switch (t) {
    case tier::device: return "device";
    case tier::host: return "host";
    case tier::pinned: return "pinned";
    case tier::disk: return "disk";
  }
  return "?";
}

// What an allocation is for: compute (weights, gradients, optimiser state, activations, work) or the
// feature cache (its stored records and its staging buffers). The tracker keeps, per tier, the bytes
// and peak of everything, and the peak of compute alone, so a run's compute peak leaves out a cache
// that shares its tier (the host cache on the host backend) at every moment, not only at the end.
enum class purpose : int { compute = 0, cache = 1 };

class memory_tracker {
 public:
  void on_alloc(tier t, std::size_t bytes, purpose p = purpose::compute) {
    auto& s = slots_[static_cast<int>(t)];
    if (p == purpose::cache) s.cache.fetch_add(bytes);  // before the total: compute never seems to grow
    const std::size_t now = s.current.fetch_add(bytes) + bytes;
    raise(s.peak, now);
    if (p == purpose::compute) {
      const std::size_t cache = s.cache.load();
      raise(s.compute_peak, now > cache ? now - cache : 0);
    }
  }
  void on_free(tier t, std::size_t bytes, purpose p = purpose::compute) {
    auto& s = slots_[static_cast<int>(t)];
    s.current.fetch_sub(bytes);
    if (p == purpose::cache) s.cache.fetch_sub(bytes);  // after the total, for the same reason
  }
  std::size_t current(tier t) const { return slots_[static_cast<int>(t)].current.load(); }
  std::size_t peak(tier t) const { return slots_[static_cast<int>(t)].peak.load(); }
  // The cache's bytes in tier t now, and the tier's bytes less the cache's: now and at peak.
  std::size_t cache(tier t) const { return slots_[static_cast<int>(t)].cache.load(); }
  std::size_t current_compute(tier t) const {
    const std::size_t now = current(t), c = cache(t);
    return now > c ? now - c : 0;
  }
  std::size_t peak_compute(tier t) const { return slots_[static_cast<int>(t)].compute_peak.load(); }
  // Starts a new measurement window: the peaks become what is held now.
  void reset_peak(tier t) {
    auto& s = slots_[static_cast<int>(t)];
    s.peak.store(current(t));
    s.compute_peak.store(current_compute(t));
  }
  void reset_peaks() {
    for (int i = 0; i < tier_count; ++i) reset_peak(static_cast<tier>(i));
  }
  // Every tier's peaks, to be put back after work that must not count in them (an evaluation between
  // training steps): restore_peaks makes each peak what it was saved as, or what is held now if more.
  struct peaks {
    std::array<std::size_t, tier_count> total{}, compute{};
  };
  peaks save_peaks() const {
    peaks p;
    for (int i = 0; i < tier_count; ++i) {
      p.total[i] = slots_[i].peak.load();
      p.compute[i] = slots_[i].compute_peak.load();
    }
    return p;
  }
  void restore_peaks(const peaks& p) {
    for (int i = 0; i < tier_count; ++i) {
      const auto t = static_cast<tier>(i);
      slots_[i].peak.store(p.total[i] > current(t) ? p.total[i] : current(t));
      slots_[i].compute_peak.store(p.compute[i] > current_compute(t) ? p.compute[i] : current_compute(t));
    }
  }

 private:
  static void raise(std::atomic<std::size_t>& peak, std::size_t now) {
    std::size_t seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
  }
  struct slot {
    std::atomic<std::size_t> current{0};
    std::atomic<std::size_t> peak{0};
    std::atomic<std::size_t> cache{0};
    std::atomic<std::size_t> compute_peak{0};
  };
  std::array<slot, tier_count> slots_{};
};

// The process-wide tracker every allocation reports to.
inline memory_tracker& memory() {
  static memory_tracker tracker;
  return tracker;
}

}  // namespace lwcl
