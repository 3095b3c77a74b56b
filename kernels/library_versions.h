// The versions of the GPU libraries kernels/ calls (cuBLAS, cuDNN), for `frugal info`. Answered
// without a device; empty strings in a build without CUDA.
// Not here: the CUDA runtime's version (core/cuda_status.h) or NCCL's (dist/library_versions.h).
#pragma once

#include "core/cuda_status.h"

namespace frugal {

struct KernelLibraryVersions {
  LibraryVersion cublas, cudnn;
};
KernelLibraryVersions kernel_library_versions();

namespace cuda {
KernelLibraryVersions kernel_library_versions();  // kernels/cuda/library_versions.cpp, CUDA builds only
}

}  // namespace frugal
