// NCCL's version, for `frugal info`: the library dist/ links for GPU collectives. Answered without a
// device; empty strings in a build without CUDA.
// Not here: the CUDA runtime's version (core/cuda_status.h) or cuBLAS's and cuDNN's
// (kernels/library_versions.h).
#pragma once

#include "core/cuda_status.h"

namespace frugal::dist {

LibraryVersion nccl_version();

namespace cuda {
LibraryVersion nccl_version();  // dist/nccl_version.cpp, CUDA builds only
}

}  // namespace frugal::dist
