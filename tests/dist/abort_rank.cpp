// A rank that fails ends the whole MPI job, never leaves the others waiting: under mpirun -np 2, rank 1
// throws lwcl::error while rank 0 is inside an allreduce that needs it. Run by tests/dist/abort_rank.sh,
// which checks that the job ends within seconds, non-zero, with the error printed.
//   abort_rank caught     main catches the error and calls mpi_session::abort
//   abort_rank unwound    the error unwinds out of the session's scope (its destructor aborts)
//   abort_rank clean      no rank fails: the job finishes and exits 0 (the script's control)
#include <cstdio>
#include <span>
#include <string_view>
#include <vector>

#include "lwcl/core/error.hpp"
#include "lwcl/dist/communicator.hpp"
#include "lwcl/dist/wire.hpp"

namespace {

// Three allreduces every rank joins, then a fourth that rank 1 never reaches when `fail` is set.
void work(bool fail) {
  lwcl::dist::communicator comm;
  lwcl::dist::raw_wire wire;
  std::vector<float> v(4096, 1.0f);
  for (int round = 0; round < 4; ++round) {
    if (fail && round == 3 && comm.rank() == 1)
      throw lwcl::error("abort_rank: rank 1 failed on purpose before round 3's allreduce");
    comm.allreduce_sum(wire, std::span<float>(v));
  }
  if (comm.rank() == 0) std::printf("abort_rank: 4 allreduces done, v[0] = %g\n", static_cast<double>(v[0]));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view mode = argc > 1 ? argv[1] : "";
  if (mode == "caught" || mode == "clean") {
    lwcl::dist::mpi_session mpi(argc, argv);
    try {
      work(mode == "caught");
    } catch (const lwcl::error& e) {
      mpi.abort("abort_rank", e.what());
    }
    return 0;
  }
  if (mode == "unwound") {
    try {
      lwcl::dist::mpi_session mpi(argc, argv);
      work(true);
    } catch (const lwcl::error& e) {
      std::fprintf(stderr, "abort_rank: not reached: the session aborts the job while unwinding (%s)\n", e.what());
      return 3;
    }
    return 0;
  }
  std::fprintf(stderr, "abort_rank: give caught, unwound or clean (got '%.*s')\n", static_cast<int>(mode.size()),
               mode.data());
  return 2;
}
