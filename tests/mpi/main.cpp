// The MPI test program's entry point (doctest): every rank of `mpirun -np N frugal_mpi_tests` runs
// the same cases in the same order, so their collectives meet. MPI starts before the first case and
// ends at exit (dist/mpi_runtime.h). Each rank prints its own report (mpirun --tag-output tells them
// apart); mpirun's exit code is non-zero when any rank failed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <iostream>

#include "core/error.h"
#include "dist/mpi_runtime.h"
#include "kernels/cpu_runtime.h"

int main(int argc, char** argv) {
  frugal::configure_cpu_runtime(argv);  // kernels/cpu_runtime.h
  try {
    frugal::dist::mpi_init();
  } catch (const frugal::Error& e) {
    std::cerr << "frugal_mpi_tests: " << e.what() << "\n";
    return 1;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
