#pragma once
// A deterministic, seeded loader of (B, T) training batches from a shard. Batch k is a pure function
// of (seed, k): each row is a window of T + 1 consecutive tokens starting at a Philox-drawn offset, the
// first T being the inputs and the last T the next-token targets. A run resumed at batch k therefore
// sees exactly the batches an uninterrupted run would.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/core/rng.hpp"
#include "lwcl/data/shards.hpp"

namespace lwcl::data {

// Framing for an encoder's input: every row starts with `first` and ends with `last` (BERT's [CLS] and
// [SEP]), the T - 2 tokens between them a window of the shard; the targets of a framed row are -1.
struct row_frame {
  std::int32_t first = -1, last = -1;
  bool on() const { return first >= 0 && last >= 0; }
};

class batch_loader {
 public:
  batch_loader(const shard& s, index_t B, index_t T, std::uint64_t seed, row_frame frame = {})
      : shard_(s), B_(B), T_(T), seed_(seed), frame_(frame) {
    check(B > 0 && T > 0, "batch_loader: batch ", B, " x ", T, " must be positive");
    check(!frame.on() || T >= 3, "batch_loader: framed rows of ", T, " tokens, expected at least 3 ([CLS] x [SEP])");
    check(s.size() > static_cast<std::uint64_t>(T), "batch_loader: '", s.path(), "' holds ", s.size(),
          " tokens, too few for sequences of ", T, " + 1");
  }

  // Fills tokens and targets (each B * T, row-major) with batch number k.
  void batch(std::uint64_t k, std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& targets) const {
    tokens.resize(static_cast<std::size_t>(B_ * T_));
    targets.resize(tokens.size());
    const std::uint64_t starts = shard_.size() - static_cast<std::uint64_t>(T_);  // valid window starts
    const philox_stream rng{seed_, k};
    for (index_t b = 0; b < B_; ++b) {
      // Two 32-bit draws make a 64-bit offset; the modulo bias is below 2^-32 for any shard here.
      const std::uint64_t r = (static_cast<std::uint64_t>(rng.bits(2 * static_cast<std::uint64_t>(b))) << 32) |
                              rng.bits(2 * static_cast<std::uint64_t>(b) + 1);
      const std::uint64_t start = r % starts;
      if (frame_.on()) {
        std::int32_t* row = tokens.data() + b * T_;
        row[0] = frame_.first;
        for (index_t t = 1; t + 1 < T_; ++t) row[t] = shard_[start + static_cast<std::uint64_t>(t - 1)];
        row[T_ - 1] = frame_.last;
        std::fill_n(targets.begin() + b * T_, T_, -1);
        continue;
      }
      for (index_t t = 0; t < T_; ++t) {
        tokens[static_cast<std::size_t>(b * T_ + t)] = shard_[start + static_cast<std::uint64_t>(t)];
        targets[static_cast<std::size_t>(b * T_ + t)] = shard_[start + static_cast<std::uint64_t>(t) + 1];
      }
    }
  }

  // The tokens of batches 0 .. n - 1 (calibration and feature batches, targets not needed).
  std::vector<std::vector<std::int32_t>> first_batches(index_t n) const {
    std::vector<std::vector<std::int32_t>> out(static_cast<std::size_t>(n));
    std::vector<std::int32_t> targets;
    for (index_t k = 0; k < n; ++k) batch(static_cast<std::uint64_t>(k), out[static_cast<std::size_t>(k)], targets);
    return out;
  }

  index_t batch_size() const { return B_; }
  index_t seq_len() const { return T_; }
  const row_frame& frame() const { return frame_; }

 private:
  const shard& shard_;
  index_t B_, T_;
  std::uint64_t seed_;
  row_frame frame_;
};

// FNV-1a over the token ids of batches 0 .. n - 1 of `loader` (each id's four bytes, low first): which
// data a run read, for checkpoint fingerprints and reports.
inline std::uint64_t batches_hash(const batch_loader& loader, index_t n) {
  std::uint64_t h = 1469598103934665603ULL;
  std::vector<std::int32_t> ids, targets;
  for (index_t b = 0; b < n; ++b) {
    loader.batch(static_cast<std::uint64_t>(b), ids, targets);
    for (std::int32_t id : ids)
      for (int k = 0; k < 4; ++k) {
        h ^= (static_cast<std::uint32_t>(id) >> (8 * k)) & 0xffu;
        h *= 1099511628211ULL;
      }
  }
  return h;
}

}  // namespace lwcl::data
