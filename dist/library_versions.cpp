// nccl_version (see library_versions.h): forwards to NCCL when CUDA is compiled in.
#include "dist/library_versions.h"

namespace frugal::dist {

LibraryVersion nccl_version() {
#if FRUGAL_WITH_CUDA
  return cuda::nccl_version();
#else
  return {};
#endif
}

}  // namespace frugal::dist
