// dist::nccl_communicator (backend/cuda/dist/nccl.cuh) under mpirun, one GPU per rank (rank r on
// device r % devices): NCCL's allreduce, broadcast and allgather against sums and copies made on the
// host from every rank's inputs (each rank's data comes from its own seed); the coded allreduce bit for
// bit the host communicator's ring order; the coded broadcast bit for bit the root's bf16. Without a
// GPU the executable says so and exits 77 (ctest: skipped).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "lwcl/backend/cuda/cuda.cuh"
#include "lwcl/backend/cuda/device.cuh"
#include "lwcl/backend/cuda/dist/nccl.cuh"
#include "lwcl/dist/communicator.hpp"
#include "lwcl/tensor/dtype.hpp"
#include "lwcl/tensor/tensor.hpp"

using namespace lwcl;
using namespace lwcl::dist;

namespace {

communicator* host_comm = nullptr;

std::vector<float> values_of(int rank, std::size_t n) {
  std::mt19937_64 g(900 + static_cast<std::uint64_t>(rank));
  std::normal_distribution<double> d(0.0, 1.0 + rank);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(d(g));
  return v;
}

buffer<backend::cuda> upload(backend::cuda& gpu, const void* p, std::size_t bytes) {
  buffer<backend::cuda> b(gpu, bytes);
  gpu.from_host(b.data(), p, bytes);
  return b;
}

}  // namespace

TEST_CASE("nccl allreduce, broadcast and allgather, raw and coded, against the host") {
  communicator& host = *host_comm;
  backend::cuda gpu(host.rank() % backend::cuda_device_count());
  nccl_communicator nc(gpu, host);
  for (const std::size_t n : {std::size_t{1}, std::size_t{4097}, std::size_t{300000}}) {
    CAPTURE(n);
    const std::vector<float> mine = values_of(host.rank(), n);
    // NCCL's own allreduce: its order is its own, so it is held to f32's rounding of the double sum.
    auto d = upload(gpu, mine.data(), n * 4);
    nc.allreduce_sum(static_cast<float*>(d.data()), n);
    std::vector<float> got(n);
    gpu.to_host(got.data(), d.data(), n * 4);
    double worst = 0;
    std::vector<std::vector<float>> all;
    for (int q = 0; q < host.size(); ++q) all.push_back(values_of(q, n));
    for (std::size_t i = 0; i < n; ++i) {
      double s = 0, mag = 0;
      for (const auto& v : all) {
        s += v[i];
        mag += std::fabs(v[i]);
      }
      worst = std::max(worst, std::fabs(got[i] - s) / (mag * 6e-8 * host.size() + 1e-30));
    }
    CHECK(worst <= 1.0);
    // The coded ring: bit for bit the host communicator's raw ring.
    std::vector<float> ring = mine;
    raw_wire raw;
    host.allreduce_sum(raw, ring);
    auto c = upload(gpu, mine.data(), n * 4);
    nc.coded_allreduce_sum(static_cast<float*>(c.data()), n);
    gpu.to_host(got.data(), c.data(), n * 4);
    CHECK(std::memcmp(got.data(), ring.data(), n * 4) == 0);
    // Coded broadcast of bf16 from each root.
    for (int root = 0; root < host.size(); ++root) {
      std::vector<std::uint16_t> h(n);
      const std::vector<float> src = values_of(root, n);
      for (std::size_t i = 0; i < n; ++i) h[i] = bf16(src[i]).bits;
      std::vector<std::uint16_t> start = host.rank() == root ? h : std::vector<std::uint16_t>(n, 0);
      auto b = upload(gpu, start.data(), n * 2);
      nc.coded_broadcast(dtype::bf16, b.data(), n, root);
      std::vector<std::uint16_t> back(n);
      gpu.to_host(back.data(), b.data(), n * 2);
      CHECK(back == h);
    }
    // NCCL's allgather of raw bytes.
    auto m = upload(gpu, mine.data(), n * 4);
    buffer<backend::cuda> everyone(gpu, n * 4 * static_cast<std::size_t>(host.size()));
    nc.allgather(m.data(), everyone.data(), n * 4);
    std::vector<float> gathered(n * static_cast<std::size_t>(host.size()));
    gpu.to_host(gathered.data(), everyone.data(), gathered.size() * 4);
    for (int q = 0; q < host.size(); ++q)
      CHECK(std::memcmp(gathered.data() + static_cast<std::size_t>(q) * n, all[static_cast<std::size_t>(q)].data(), n * 4) == 0);
  }
}

int main(int argc, char** argv) {
  mpi_session mpi(argc, argv);
  communicator host;
  host_comm = &host;
  int devices = backend::cuda_device_count(), fewest = 0;
  MPI_Allreduce(&devices, &fewest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (fewest == 0) {
    if (host.rank() == 0) std::printf("test_cuda_dist: no CUDA device on some rank; nothing run\n");
    return 77;
  }
  doctest::Context ctx(argc, argv);
  if (host.rank() != 0) ctx.setOption("minimal", true);
  const int failed = ctx.run();
  int any = failed ? 1 : 0, all = 0;
  MPI_Allreduce(&any, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return all ? 1 : 0;
}
