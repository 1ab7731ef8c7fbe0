// main of test_dist, run under mpirun (-np 2 and -np 3 in ctest): MPI for the whole run, every rank
// runs every test case in the same order (the collectives inside must match up), and only rank 0
// prints the summary; any rank's failure fails the job.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <mpi.h>

#include "lwcl/dist/communicator.hpp"

int main(int argc, char** argv) {
  lwcl::dist::mpi_session mpi(argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  doctest::Context ctx(argc, argv);
  if (rank != 0) ctx.setOption("minimal", true);
  const int failed = ctx.run();
  int any = failed ? 1 : 0, all = 0;
  MPI_Allreduce(&any, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return all ? 1 : 0;
}
