#pragma once
// The optimiser state a segment keeps across its visits (pipeline_options::keep_optimizer_state). When a
// visit that took a step ends, its segment's AdamW state (step count, moments and, for bf16 weights, the
// f32 master copy) is kept under the segment's layers [first, last); the next visit of the same layers
// starts from it, its bias correction and moments going on where the last visit left them, while its
// learning-rate schedule (warm-up and cosine) starts again. Keeping a segment drops the states of other
// segments that share a layer with it: their weights changed under them. The states live in host memory,
// counted by the memory tracker in the host tier as compute (on the host backend, in the run's compute
// peak), and go into every checkpoint, so that a resumed run continues them bitwise.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <istream>
#include <ostream>
#include <string>
#include <vector>

#include "lwcl/core/config.hpp"
#include "lwcl/core/error.hpp"
#include "lwcl/core/fs.hpp"
#include "lwcl/core/memory.hpp"

namespace lwcl::distill {

class kept_optimizer {
 public:
  kept_optimizer() = default;
  kept_optimizer(const kept_optimizer&) = delete;
  kept_optimizer& operator=(const kept_optimizer&) = delete;
  ~kept_optimizer() { clear(); }

  // The state kept for exactly layers [first, last), or null.
  const std::vector<char>* find(index_t first, index_t last) const {
    for (const auto& e : entries_)
      if (e.first == first && e.last == last) return &e.state;
    return nullptr;
  }
  // Keeps `state` for layers [first, last), in place of every state that shares a layer with them.
  void keep(index_t first, index_t last, std::vector<char> state) {
    check(0 <= first && first < last, "kept_optimizer: layers [", first, ", ", last, ") are not a segment");
    drop_overlapping(first, last);
    memory().on_alloc(tier::host, state.size());
    entries_.push_back({first, last, std::move(state)});
  }
  void drop_overlapping(index_t first, index_t last) {
    auto it = entries_.begin();
    while (it != entries_.end()) {
      if (it->first < last && first < it->last) {
        memory().on_free(tier::host, it->state.size());
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
  }
  void clear() { drop_overlapping(0, max_layer); }
  std::size_t size() const { return entries_.size(); }
  std::size_t bytes() const {
    std::size_t n = 0;
    for (const auto& e : entries_) n += e.state.size();
    return n;
  }

  // A segment trainer's state into the segment's place, and back out of it: restore leaves a segment
  // with no kept state as it is (a fresh AdamW).
  template <class Segment>
  void keep(const Segment& seg) {
    keep(seg.first(), seg.last(), seg.optimizer_state());
  }
  template <class Segment>
  void restore(Segment& seg) const {
    if (const auto* state = find(seg.first(), seg.last())) seg.load_optimizer_state(*state);
  }

  // ---- the file a checkpoint holds: a magic, the entry count, then per entry its layers, its byte count
  // and its bytes (adamw's own form, checked again when a segment loads it) ----
  void save(const std::filesystem::path& path) const {
    write_stream_atomic(path, [&](std::ostream& os) {
      os.write(magic, sizeof magic);
      write_int(os, static_cast<std::int64_t>(entries_.size()));
      for (const auto& e : entries_) {
        write_int(os, e.first);
        write_int(os, e.last);
        write_int(os, static_cast<std::int64_t>(e.state.size()));
        os.write(e.state.data(), static_cast<std::streamsize>(e.state.size()));
      }
      check(os.good(), "kept_optimizer: writing '", path.string(), "' failed");
    });
  }
  // Replaces what is kept with the file's entries, read whole and checked before anything changes.
  void load(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    check(in.good(), "kept_optimizer: cannot read '", path.string(), "'");
    const std::string where = "kept_optimizer: '" + path.string() + "'";
    char got[sizeof magic];
    in.read(got, sizeof got);
    check(in.good() && std::memcmp(got, magic, sizeof magic) == 0, where, " is not a file of kept optimiser states");
    const std::int64_t n = read_int(in, where);
    check(n >= 0 && n <= max_layer, where, " says it holds ", n, " states");
    std::vector<entry> read;
    for (std::int64_t i = 0; i < n; ++i) {
      entry e;
      e.first = read_int(in, where);
      e.last = read_int(in, where);
      const std::int64_t bytes = read_int(in, where);
      check(0 <= e.first && e.first < e.last && bytes > 0 && bytes <= max_state_bytes, where, ": entry ", i,
            " has layers [", e.first, ", ", e.last, ") and ", bytes, " bytes");
      e.state.resize(static_cast<std::size_t>(bytes));
      in.read(e.state.data(), static_cast<std::streamsize>(bytes));
      check(in.good(), where, " ends inside entry ", i);
      read.push_back(std::move(e));
    }
    check(in.peek() == std::char_traits<char>::eof(), where, " has bytes after its ", n, " entries");
    clear();
    for (auto& e : read) keep(e.first, e.last, std::move(e.state));
  }

 private:
  struct entry {
    index_t first = 0, last = 0;
    std::vector<char> state;
  };
  static constexpr char magic[8] = {'L', 'W', 'C', 'L', 'K', 'O', 'P', '1'};
  static constexpr index_t max_layer = index_t{1} << 30;
  static constexpr std::int64_t max_state_bytes = std::int64_t{1} << 40;

  static void write_int(std::ostream& os, std::int64_t v) { os.write(reinterpret_cast<const char*>(&v), sizeof v); }
  static std::int64_t read_int(std::istream& in, const std::string& where) {
    std::int64_t v = 0;
    in.read(reinterpret_cast<char*>(&v), sizeof v);
    check(in.good(), where, " ends early");
    return v;
  }

  std::vector<entry> entries_;
};

}  // namespace lwcl::distill
