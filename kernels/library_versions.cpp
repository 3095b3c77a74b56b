// kernel_library_versions (see library_versions.h): forwards to kernels/cuda/ when CUDA is compiled in.
#include "kernels/library_versions.h"

namespace frugal {

KernelLibraryVersions kernel_library_versions() {
#if FRUGAL_WITH_CUDA
  return cuda::kernel_library_versions();
#else
  return {};
#endif
}

}  // namespace frugal
