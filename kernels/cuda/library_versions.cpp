// cuBLAS's and cuDNN's versions, loaded and built (see kernels/library_versions.h).
#include "kernels/library_versions.h"

#include "kernels/cuda/library_check.h"

namespace frugal::cuda {

KernelLibraryVersions kernel_library_versions() {
  KernelLibraryVersions versions;
  // Neither cublasGetProperty nor cudnnGetVersion needs a device.
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS)
    versions.cublas.loaded = version_string(major, minor, patch);
  versions.cublas.built = version_string(CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH);
  const auto cudnn = static_cast<int>(cudnnGetVersion());  // 90100 for 9.1.0 (cuDNN 9: major*10000 + minor*100 + patch)
  versions.cudnn.loaded = version_string(cudnn / 10000, cudnn % 10000 / 100, cudnn % 100);
  versions.cudnn.built = version_string(CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL);
  return versions;
}

}  // namespace frugal::cuda
