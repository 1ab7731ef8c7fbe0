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

class memory_tracker {
 public:
  void on_alloc(tier t, std::size_t bytes) {
    auto& s = slots_[static_cast<int>(t)];
    const std::size_t now = s.current.fetch_add(bytes) + bytes;
    std::size_t peak = s.peak.load();
    while (now > peak && !s.peak.compare_exchange_weak(peak, now)) {
    }
  }
  void on_free(tier t, std::size_t bytes) { slots_[static_cast<int>(t)].current.fetch_sub(bytes); }

  std::size_t current(tier t) const { return slots_[static_cast<int>(t)].current.load(); }
  std::size_t peak(tier t) const { return slots_[static_cast<int>(t)].peak.load(); }
  // Starts a new measurement window: the peak becomes what is held now.
  void reset_peak(tier t) { slots_[static_cast<int>(t)].peak.store(current(t)); }
  void reset_peaks() {
    for (int i = 0; i < tier_count; ++i) reset_peak(static_cast<tier>(i));
  }

 private:
  struct slot {
    std::atomic<std::size_t> current{0};
    std::atomic<std::size_t> peak{0};
  };
  std::array<slot, tier_count> slots_{};
};

// The process-wide tracker every allocation reports to.
inline memory_tracker& memory() {
  static memory_tracker tracker;
  return tracker;
}

}  // namespace lwcl
