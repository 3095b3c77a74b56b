// make_nccl_communicator (see nccl_communicator.h): forwards to NCCL when CUDA is compiled in.
#include "core/error.h"
#include "dist/nccl_communicator.h"

namespace frugal::dist {

int device_for_local_rank(int local_rank, int device_count) {
  FRUGAL_CHECK_VALUE(local_rank >= 0, "device_for_local_rank: local rank ", local_rank, " is negative");
  FRUGAL_CHECK_DEVICE(device_count > 0, "device_for_local_rank: no CUDA device for local rank ", local_rank);
  return local_rank % device_count;
}

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, int device_index) {
#if FRUGAL_WITH_CUDA
  return cuda::make_nccl_communicator(bootstrap, device_index);
#else
  (void)bootstrap;
  FRUGAL_THROW(DeviceError, "the NCCL communicator for cuda:", device_index,
               " needs a build with CUDA (this one was built with FRUGAL_CUDA=OFF)");
#endif
}

}  // namespace frugal::dist
