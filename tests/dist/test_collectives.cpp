// dist::communicator (include/lwcl/dist/): point to point, broadcast, allgather, reduce-scatter and
// allreduce, each with the raw, coded and adaptive wires, against the raw twin bit for bit and against
// a serial reference every rank computes from all ranks' inputs (each rank's data comes from its own
// seed, so every rank can make all of it); sizes that leave parts empty; the traffic counted; the
// adaptive switch's rule; bad calls refused by name. Run by ctest under mpirun -np 2 and -np 3.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "lwcl/dist/communicator.hpp"
#include "lwcl/dist/wire.hpp"
#include "lwcl/tensor/dtype.hpp"

using namespace lwcl;
using namespace lwcl::dist;

namespace {

using bytes = std::vector<std::byte>;

communicator& world() {
  static communicator c(MPI_COMM_WORLD, 1);
  return c;
}

std::vector<float> values_of(int rank, std::size_t n, std::uint64_t seed) {
  std::mt19937_64 g(seed * 1000 + static_cast<std::uint64_t>(rank));
  std::normal_distribution<double> d(0.0, 0.5 + rank);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(d(g));
  return v;
}

bytes as_type(dtype t, const std::vector<float>& v) {
  const std::size_t width = dtype_size(t);
  bytes b(v.size() * width);
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (t == dtype::f32) {
      std::memcpy(b.data() + 4 * i, &v[i], 4);
    } else {
      const std::uint16_t h = bf16(v[i]).bits;  // f16 tests reuse the bf16 patterns as half bits
      std::memcpy(b.data() + 2 * i, &h, 2);
    }
  }
  return b;
}

// The ring's sum of part c: rank c + 1's values, then c + 2's, ..., then c's, added in f32.
std::vector<float> ring_order_sum(std::size_t n, int ranks, std::uint64_t seed) {
  std::vector<std::vector<float>> all;
  for (int q = 0; q < ranks; ++q) all.push_back(values_of(q, n, seed));
  std::vector<float> out(n);
  for (int c = 0; c < ranks; ++c) {
    const chunk ch = chunk_of(n, ranks, c);
    for (std::size_t i = ch.first; i < ch.first + ch.count; ++i) {
      float s = all[static_cast<std::size_t>((c + 1) % ranks)][i];
      for (int k = 2; k <= ranks; ++k) s += all[static_cast<std::size_t>((c + k) % ranks)][i];
      out[i] = s;
    }
  }
  return out;
}

const std::size_t sizes[] = {0, 1, 2, 5, 3 * 4096 + 7, 100000};

}  // namespace

TEST_CASE("chunk_of cuts n values into parts that tile them, the first n % parts one longer") {
  for (const std::size_t n : {0, 1, 7, 100})
    for (const int p : {1, 2, 3, 8}) {
      std::size_t at = 0;
      for (int c = 0; c < p; ++c) {
        const chunk ch = chunk_of(n, p, c);
        CHECK(ch.first == at);
        CHECK(ch.count == n / p + (static_cast<std::size_t>(c) < n % p ? 1 : 0));
        at += ch.count;
      }
      CHECK(at == n);
    }
}

TEST_CASE("send and recv return f32, bf16 and f16 bit for bit on every wire, the coded one with fewer bytes") {
  communicator& c = world();
  raw_wire raw;
  coded_wire coded;
  adaptive_wire adaptive;
  for (const dtype t : {dtype::f32, dtype::bf16, dtype::f16})
    for (const std::size_t n : {std::size_t{3}, std::size_t{50000}}) {
      CAPTURE(dtype_name(t));
      CAPTURE(n);
      const bytes mine = as_type(t, values_of(c.rank(), n, 7));
      auto round = [&](auto& w) {
        // Rank 0 sends to every other rank and hears back from each.
        if (c.rank() == 0) {
          for (int q = 1; q < c.size(); ++q) c.send(w, t, mine, q, 5);
          for (int q = 1; q < c.size(); ++q) {
            bytes got(mine.size());
            c.recv(w, t, got, q, 6);
            CHECK(got == as_type(t, values_of(q, n, 7)));
          }
        } else {
          bytes got(mine.size());
          c.recv(w, t, got, 0, 5);
          CHECK(got == as_type(t, values_of(0, n, 7)));
          c.send(w, t, mine, 0, 6);
        }
      };
      const traffic before = c.sent();
      round(raw);
      const traffic after_raw = c.sent();
      round(coded);
      const traffic after_coded = c.sent();
      round(adaptive);
      const std::uint64_t raw_wire_bytes = after_raw.wire_bytes - before.wire_bytes;
      const std::uint64_t coded_wire_bytes = after_coded.wire_bytes - after_raw.wire_bytes;
      CHECK(after_raw.raw_bytes - before.raw_bytes == after_coded.raw_bytes - after_raw.raw_bytes);
      CHECK(raw_wire_bytes == after_raw.raw_bytes - before.raw_bytes + communicator::header_bytes *
                                                                          (after_raw.messages - before.messages));
      if (n > 10000 && t != dtype::f16) CHECK(coded_wire_bytes < raw_wire_bytes);
    }
}

TEST_CASE("broadcast from every root gives every rank the root's bytes, raw, coded and adaptive") {
  communicator& c = world();
  raw_wire raw;
  coded_wire coded;
  adaptive_wire adaptive;
  for (const std::size_t n : sizes)
    for (int root = 0; root < c.size(); ++root) {
      CAPTURE(n);
      CAPTURE(root);
      const bytes want = as_type(dtype::bf16, values_of(root, n, 11));
      for (int which = 0; which < 3; ++which) {
        bytes data = c.rank() == root ? want : bytes(want.size(), std::byte{0});
        if (which == 0) c.broadcast(raw, dtype::bf16, data, root);
        if (which == 1) c.broadcast(coded, dtype::bf16, data, root);
        if (which == 2) c.broadcast(adaptive, dtype::bf16, data, root);
        CHECK(data == want);
      }
    }
}

TEST_CASE("allgather puts every rank's block in rank order, raw and coded") {
  communicator& c = world();
  raw_wire raw;
  coded_wire coded;
  for (const std::size_t n : sizes)
    for (const dtype t : {dtype::f32, dtype::bf16}) {
      CAPTURE(n);
      const bytes mine = as_type(t, values_of(c.rank(), n, 13));
      bytes want;
      for (int q = 0; q < c.size(); ++q) {
        const bytes b = as_type(t, values_of(q, n, 13));
        want.insert(want.end(), b.begin(), b.end());
      }
      bytes a(want.size()), b(want.size());
      c.allgather(raw, t, mine, a);
      c.allgather(coded, t, mine, b);
      CHECK(a == want);
      CHECK(b == want);
    }
}

TEST_CASE("reduce-scatter and allreduce: coded equals raw bit for bit, both the serial ring-order sum") {
  communicator& c = world();
  raw_wire raw;
  coded_wire coded;
  adaptive_wire adaptive;
  for (const std::size_t n : sizes) {
    CAPTURE(n);
    const std::vector<float> mine = values_of(c.rank(), n, 17);
    const std::vector<float> want = ring_order_sum(n, c.size(), 17);
    const chunk part = chunk_of(n, c.size(), c.rank());
    std::vector<float> rs_raw(part.count), rs_coded(part.count);
    c.reduce_scatter_sum(raw, mine, rs_raw);
    c.reduce_scatter_sum(coded, mine, rs_coded);
    CHECK(std::memcmp(rs_raw.data(), rs_coded.data(), rs_raw.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(rs_raw.data(), want.data() + part.first, part.count * sizeof(float)) == 0);

    std::vector<float> a = mine, b = mine, d = mine;
    c.allreduce_sum(raw, a);
    c.allreduce_sum(coded, b);
    c.allreduce_sum(adaptive, d);
    CHECK(std::memcmp(a.data(), want.data(), n * sizeof(float)) == 0);
    CHECK(std::memcmp(b.data(), want.data(), n * sizeof(float)) == 0);
    CHECK(std::memcmp(d.data(), want.data(), n * sizeof(float)) == 0);
    // And the sum is the sum: against double precision, within f32's rounding of a few terms.
    std::vector<std::vector<float>> all;
    for (int q = 0; q < c.size(); ++q) all.push_back(values_of(q, n, 17));
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i) {
      double s = 0, mag = 0;
      for (const auto& v : all) {
        s += v[i];
        mag += std::fabs(v[i]);
      }
      worst = std::max(worst, std::fabs(a[i] - s) / (mag * 6e-8 * c.size()));
    }
    CHECK(worst <= 1.0);
  }
}

TEST_CASE("the adaptive wire codes where the link is slower than the codec and sends raw where it is faster") {
  link_model m;
  m.link(1e8);  // 100 MB/s
  m.encoded(dtype::bf16, 1e6, 1e6 / 1.5, 1e-3);  // 1 GB/s, ratio 1.5
  m.decoded(dtype::bf16, 1e6, 0.5e-3);            // 2 GB/s
  CHECK(m.coded_seconds(dtype::bf16, 1e6) == doctest::Approx(1e-3 + 1e6 / 1.5 / 1e8 + 0.5e-3));
  CHECK(m.raw_seconds(1e6) == doctest::Approx(1e-2));
  CHECK(m.prefer_coded(dtype::bf16, 1e6));
  link_model fast = m;
  fast.bandwidth = 1e10;  // 10 GB/s: coding costs more than it saves
  CHECK(!fast.prefer_coded(dtype::bf16, 1e6));
  CHECK(!m.prefer_coded(dtype::f32, 1e6));  // nothing measured for f32 yet
  // A link that gives one-way transfers twice the ring's rate: a one-way message at the boundary goes
  // raw where a ring's is coded.
  link_model shared = m;
  shared.one_way = 4 * shared.bandwidth;
  CHECK(shared.bandwidth_for(traffic_pattern::one_way) == doctest::Approx(4 * shared.bandwidth));
  CHECK(shared.prefer_coded(dtype::bf16, 1e6, traffic_pattern::ring));
  CHECK(!shared.prefer_coded(dtype::bf16, 1e6, traffic_pattern::one_way));

  adaptive_wire w;
  w.model = fast;
  w.explore = 4;
  int coded = 0;
  for (int i = 0; i < 8; ++i) coded += w.choose(dtype::bf16, 1 << 20, traffic_pattern::ring) == codec::encoding::gauss;
  CHECK(coded == 2);  // every 4th, to keep the ratio current
  CHECK(w.choose(dtype::f32, 1 << 20, traffic_pattern::ring) == codec::encoding::gauss);  // unmeasured: code once to learn
  CHECK(w.choose(dtype::bf16, 100, traffic_pattern::ring) == codec::encoding::raw);       // below a block
  CHECK(w.choose(dtype::i32, 1 << 20, traffic_pattern::ring) == codec::encoding::raw);

  // On this machine's loopback the communicator measures the link itself.
  communicator& c = world();
  const double b = c.measure_link(1 << 20, 2), one = c.measure_one_way(1 << 20, 2);
  if (c.size() > 1) CHECK(b > 0);
  const bool paired = (c.rank() % 2 == 0 ? c.rank() + 1 : c.rank() - 1) < c.size();
  CHECK((one > 0) == paired);
  MESSAGE("rank ", c.rank(), ": ring link measured at ", b / 1e9, " GB/s, one way ", one / 1e9, " GB/s");
}

TEST_CASE("bad calls are refused by name") {
  communicator& c = world();
  raw_wire raw;
  const bytes four(4);
  CHECK_THROWS_WITH_AS(c.send(raw, dtype::f32, four, c.size(), 1), doctest::Contains("send rank"), lwcl::error);
  bytes out(4);
  CHECK_THROWS_WITH_AS(c.broadcast(raw, dtype::f32, out, -1), doctest::Contains("broadcast: root rank -1"), lwcl::error);
  bytes small(4 * static_cast<std::size_t>(c.size()) - 1);
  CHECK_THROWS_WITH_AS(c.allgather(raw, dtype::f32, four, small), doctest::Contains("needs"), lwcl::error);
  // A message of another size or type than the receiver expects.
  if (c.size() > 1) {
    if (c.rank() == 0) {
      c.send(raw, dtype::f32, bytes(8), 1, 9);
      c.send(raw, dtype::bf16, bytes(8), 1, 9);
    } else if (c.rank() == 1) {
      bytes got(4);
      CHECK_THROWS_WITH_AS(c.recv(raw, dtype::f32, got, 0, 9), doctest::Contains("holds 8 bytes, expected 4"), lwcl::error);
      bytes got8(8);
      CHECK_THROWS_WITH_AS(c.recv(raw, dtype::f32, got8, 0, 9), doctest::Contains("holds bf16 elements, expected f32"),
                           lwcl::error);
    }
  }
  c.barrier();
}
