// The MPI test program's entry point (doctest): every rank of `mpirun -np N frugal_mpi_tests` runs
// the same cases in the same order, so their collectives meet. MPI starts before the first case and
// ends at exit (dist/mpi_runtime.h). Each rank prints its own report (mpirun --tag-output tells them
// apart); mpirun's exit code is non-zero when any rank failed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <vector>

#include "core/cuda_status.h"
#include "core/error.h"
#include "dist/mpi_runtime.h"
#include "kernels/cpu_runtime.h"
#include "tests/skip.h"

namespace {
// --nccl (gpu.nccl_ranks2): the NCCL cases need a GPU per rank, since NCCL refuses two ranks on one
// GPU. Without them every rank says why and exits with the skip code (CTest: Skipped).
bool gpu_per_rank_missing() {
  const int ranks = frugal::dist::mpi_world_size(), gpus = frugal::cuda_status().device_count;
  if (frugal::cuda_available() && gpus >= ranks) return false;
  if (frugal::dist::mpi_rank() == 0)
    std::cout << "skipped: NCCL across " << ranks << " ranks needs a GPU per rank; this machine has " << gpus
              << " usable (" << frugal::cuda_status().reason << ")\n";
  return true;
}
}  // namespace

int main(int argc, char** argv) {
  frugal::configure_cpu_runtime(argv);  // kernels/cpu_runtime.h
  std::vector<char*> args(argv, argv + argc);
  const auto nccl = std::find_if(args.begin(), args.end(), [](const char* a) { return std::strcmp(a, "--nccl") == 0; });
  const bool nccl_run = nccl != args.end();
  if (nccl_run) args.erase(nccl);
  try {
    frugal::dist::mpi_init();
    if (nccl_run && gpu_per_rank_missing()) return frugal::test::kSkipCode;
  } catch (const frugal::Error& e) {
    std::cerr << "frugal_mpi_tests: " << e.what() << "\n";
    return 1;
  }
  return frugal::test::run_cases(static_cast<int>(args.size()), args.data());
}
