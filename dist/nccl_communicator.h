// The NCCL communicator: collectives between CUDA devices, one rank per GPU, on its own CUDA stream
// ordered after the caller's stream with events, so communication runs beside computation. Ranks
// are started by mpirun; a bootstrap communicator (the MPI one) carries NCCL's unique id from rank 0
// to the others, and compares each collective's description across ranks before it is queued, so a
// mismatch is a DistributedError naming it instead of a hang inside a kernel.
// Deliberately declared without any CUDA or NCCL type: the trainer includes this header in every
// build, and a build without CUDA answers DeviceError.
// Not here: CPU tensors (dist/mpi_communicator.h), gradient buckets (dist/ddp.h).
#pragma once

#include <memory>

#include "dist/communicator.h"

namespace frugal::dist {

// The GPU a rank takes: local_rank % device_count, so ranks on one host spread over its GPUs.
int device_for_local_rank(int local_rank, int device_count);

// An NCCL communicator over `bootstrap`'s ranks on device cuda:`device_index` (made current). Every
// rank calls it together. `bootstrap` must outlive the result. DeviceError without CUDA.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device_index);

namespace cuda {
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device_index);  // CUDA builds only
}

}  // namespace frugal::dist
