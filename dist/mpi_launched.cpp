// mpi_launched (see mpi_runtime.h): the environment a launcher sets, read the same way in builds with
// and without MPI.
#include <cstdlib>

#include "dist/mpi_runtime.h"

namespace frugal::dist {

bool mpi_launched() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr; }

}  // namespace frugal::dist
