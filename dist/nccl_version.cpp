// NCCL's version, loaded and built (see dist/library_versions.h).
#include "dist/library_versions.h"
#include "dist/nccl_check.h"

namespace frugal::dist::cuda {

LibraryVersion nccl_version() {
  LibraryVersion version;
  int loaded = 0;  // 22805 for 2.28.5 (NCCL >= 2.9: major*10000 + minor*100 + patch); needs no device
  if (ncclGetVersion(&loaded) == ncclSuccess)
    version.loaded = version_string(loaded / 10000, loaded % 10000 / 100, loaded % 100);
  version.built = version_string(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
  return version;
}

}  // namespace frugal::dist::cuda
