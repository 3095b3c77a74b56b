// NCCL's entry points in the FRUGAL_CUDA=emulated build, which runs on the CPU where NCCL cannot:
// no version, and a communicator request that says so (frugal info and --ddp report it). Data
// parallelism across CPU ranks (MPI) is unaffected.
#include "core/dispatch.h"
#include "dist/library_versions.h"
#include "dist/nccl_communicator.h"

namespace frugal::dist::cuda {

LibraryVersion nccl_version() { return {}; }

std::unique_ptr<Communicator> make_nccl_communicator(Communicator&, int) {
  throw_library_unavailable("NCCL", "make_nccl_communicator", "use CPU ranks (--device cpu) for data parallelism here");
}

}  // namespace frugal::dist::cuda
