// MPI's entry points in a build without MPI (FRUGAL_MPI=OFF, the default where OpenMPI is not found,
// as on a GPU machine whose packages cannot be installed): CMake compiles this file instead of
// mpi_runtime.cpp and mpi_communicator.cpp. The process is a world of one; whatever needs ranks
// (--ddp, `mpirun frugal bench allreduce`) fails with one line saying why and what to install.
// Not here: anything that pretends to communicate.
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "dist/mpi_communicator.h"
#include "dist/mpi_runtime.h"

namespace frugal::dist {

namespace {
[[noreturn]] void no_mpi(const char* what) {
  FRUGAL_THROW(LibraryError, what, ": this frugal was built without MPI (FRUGAL_MPI=OFF); data parallelism "
               "needs OpenMPI (Debian: libopenmpi-dev openmpi-bin) and a build configured with it");
}

// Started by mpirun, a build without MPI cannot know its rank: every rank would believe it is rank 0.
void refuse_ranks(const char* what) {
  if (mpi_launched()) no_mpi(what);
}
}  // namespace

bool mpi_built() { return false; }

void mpi_init() { no_mpi("mpi_init"); }

int mpi_rank() {
  refuse_ranks("mpi_rank");
  return 0;
}

int mpi_world_size() {
  refuse_ranks("mpi_world_size");
  return 1;
}

int mpi_local_rank() {
  refuse_ranks("mpi_local_rank");
  return 0;
}

void mpi_abort(int exit_code) noexcept {
  std::fflush(nullptr);
  std::_Exit(exit_code);  // one process: ending it ends the job
}

void mpi_mark_broken() noexcept {}                // no communicator can break: none exists
void mpi_note_in_flight(const char*) noexcept {}  // no collective is ever in flight

std::unique_ptr<Communicator> make_mpi_communicator() { no_mpi("the MPI communicator"); }

}  // namespace frugal::dist
