// dist::communicator's allreduce under mpirun, the raw, coded and adaptive wires side by side in one
// run: for f32 values from N(0, s^2) (s differing per rank, as gradients of different shards do) of
// each size, the best of --rounds timed calls per wire, the bytes each rank put on the wire, the
// adaptive wire's choices and its link model. Rank 0 prints the table; every rank checks that the
// three wires' sums are bitwise equal. Run it on a loopback link and on a throttled one (bench/README.md).
//   mpirun -np 2 build/host/bench/dist_allreduce [--sizes 262144,4194304] [--rounds 5]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/dist/communicator.hpp"
#include "lwcl/dist/wire.hpp"
#include "lwcl/tensor/dtype.hpp"

using namespace lwcl;
using namespace lwcl::dist;

namespace {

struct row {
  std::string wire;
  std::size_t n = 0;
  double seconds = 0;
  std::uint64_t raw_bytes = 0, wire_bytes = 0, coded_messages = 0, messages = 0;
};

// Times `rounds` calls of call(), each after an untimed prepare() of its data and followed by an
// untimed check(): the best round's time (the slowest rank's in each) and this rank's traffic per call.
template <class Prepare, class Call, class Check>
row time_calls(communicator& c, std::string_view wire, std::size_t n, int rounds, Prepare prepare, Call call,
               Check check) {
  row r;
  r.wire = std::string(wire);
  r.n = n;
  r.seconds = 1e300;
  const traffic before = c.sent();
  for (int k = 0; k < rounds; ++k) {
    prepare();
    c.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    call();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    r.seconds = std::min(r.seconds, s);
    check();
  }
  const traffic after = c.sent();
  r.raw_bytes = (after.raw_bytes - before.raw_bytes) / static_cast<std::uint64_t>(rounds);
  r.wire_bytes = (after.wire_bytes - before.wire_bytes) / static_cast<std::uint64_t>(rounds);
  r.coded_messages = after.coded_messages - before.coded_messages;
  r.messages = after.messages - before.messages;
  return r;
}

void print_header(const char* what, int ranks, int rounds) {
  std::printf("%s on %d ranks; best of %d calls (the slowest rank's time); bytes per call sent by rank 0\n\n"
              "| values | wire | ms | GB/s of data | raw bytes | wire bytes | wire/raw | coded messages |\n"
              "|---:|---|---:|---:|---:|---:|---:|---:|\n",
              what, ranks, rounds);
}

void print_row(const row& r, std::size_t value_bytes) {
  std::printf("| %zu | %s | %.3f | %.3f | %llu | %llu | %.3f | %llu of %llu |\n", r.n, r.wire.c_str(), r.seconds * 1e3,
              static_cast<double>(value_bytes * r.n) / r.seconds / 1e9, static_cast<unsigned long long>(r.raw_bytes),
              static_cast<unsigned long long>(r.wire_bytes),
              r.raw_bytes ? static_cast<double>(r.wire_bytes) / static_cast<double>(r.raw_bytes) : 0.0,
              static_cast<unsigned long long>(r.coded_messages), static_cast<unsigned long long>(r.messages));
}

std::vector<std::size_t> parse_sizes(const std::string& s) {
  std::vector<std::size_t> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(static_cast<std::size_t>(std::stoull(item)));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  mpi_session mpi(argc, argv);
  try {
    std::vector<std::size_t> sizes = {1 << 16, 1 << 20, 1 << 22};
    int rounds = 5;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      check(i + 1 < argc, "dist_allreduce: option ", a, " needs a value");
      if (a == "--sizes") sizes = parse_sizes(argv[++i]);
      else if (a == "--rounds") rounds = std::max(1, std::atoi(argv[++i]));
      else fail("dist_allreduce: unknown option ", a, " (expected --sizes or --rounds)");
    }
    communicator c(MPI_COMM_WORLD, 1);
    raw_wire raw;
    coded_wire coded;
    adaptive_wire adaptive;
    if (c.rank() == 0) print_header("allreduce of f32", c.size(), rounds);
    for (const std::size_t n : sizes) {
      std::mt19937_64 g(42 + static_cast<std::uint64_t>(c.rank()));
      std::normal_distribution<double> d(0.0, 1e-3 * (1 + c.rank()));
      std::vector<float> mine(n);
      for (auto& x : mine) x = static_cast<float>(d(g));
      std::vector<float> sums[3];
      auto allreduce = [&](auto& w, std::vector<float>& out) {
        return time_calls(
            c, w.name, n, rounds, [&] { out = mine; }, [&] { c.allreduce_sum(w, out); }, [] {});
      };
      const row rows[] = {allreduce(raw, sums[0]), allreduce(coded, sums[1]), allreduce(adaptive, sums[2])};
      check(sums[0] == sums[1] && sums[0] == sums[2], "dist_allreduce: the wires' sums differ on rank ", c.rank());
      if (c.rank() == 0)
        for (const row& r : rows) print_row(r, 4);
    }
    // bf16 broadcasts (features or weights sent from one rank), where the code saves a third.
    if (c.rank() == 0) {
      std::printf("\n");
      print_header("broadcast of bf16 from rank 0", c.size(), rounds);
    }
    for (const std::size_t n : sizes) {
      std::mt19937_64 g(7);
      std::normal_distribution<double> d(0.0, 1.0);
      std::vector<std::byte> root(2 * n);
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint16_t h = bf16(static_cast<float>(d(g))).bits;
        std::memcpy(root.data() + 2 * i, &h, 2);
      }
      auto broadcast = [&](auto& w) {
        std::vector<std::byte> data;
        return time_calls(
            c, w.name, n, rounds, [&] { data = c.rank() == 0 ? root : std::vector<std::byte>(root.size()); },
            [&] { c.broadcast(w, dtype::bf16, data, 0); },
            [&] { check(data == root, "dist_allreduce: broadcast on the ", w.name, " wire lost bytes on rank ", c.rank()); });
      };
      const row rows[] = {broadcast(raw), broadcast(coded), broadcast(adaptive)};
      if (c.rank() == 0)
        for (const row& r : rows) print_row(r, 2);
    }
    if (c.rank() == 0) {
      const auto& h = adaptive.model.rates(dtype::bf16);
      std::printf("\nadaptive wire on rank 0, bf16: encode %.3f GB/s, decode %.3f GB/s, ratio %.3f\n", h.encode / 1e9,
                  h.decode / 1e9, h.ratio);
    }
    if (c.rank() == 0) {
      const auto& f = adaptive.model.rates(dtype::f32);
      std::printf("\nadaptive wire on rank 0: link %.3f GB/s in a ring, %.3f GB/s one way; f32 codec encode %.3f GB/s, "
                  "decode %.3f GB/s, ratio %.3f; chose coded %llu times, raw %llu\n",
                  adaptive.model.bandwidth / 1e9, adaptive.model.one_way / 1e9, f.encode / 1e9, f.decode / 1e9, f.ratio,
                  static_cast<unsigned long long>(adaptive.chose_coded), static_cast<unsigned long long>(adaptive.chose_raw));
      std::printf("sums bitwise equal across the three wires on every rank\n");
    }
  } catch (const lwcl::error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  return 0;
}
