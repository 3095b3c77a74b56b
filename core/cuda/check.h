// The status check for the CUDA runtime, generated from FRUGAL_LIBRARY_CHECK (core/error.h): it
// throws LibraryError naming the library, the call, file:line and the runtime's own text for the
// status. Include only from files that are compiled with CUDA.
// Not here: the checks for the libraries above core, generated the same way beside their users:
// cuBLAS and cuDNN in kernels/cuda/library_check.h, NCCL in dist/nccl_check.h. core links only the
// CUDA runtime.
#pragma once

#include <cuda_runtime.h>

#include "core/error.h"

#define FRUGAL_CUDA_CHECK(call) FRUGAL_LIBRARY_CHECK("CUDA", call, cudaSuccess, cudaGetErrorString)

// After a kernel launch: catches bad launch configurations at once (asynchronous faults surface at
// the next synchronising call).
#define FRUGAL_CUDA_CHECK_LAUNCH() FRUGAL_CUDA_CHECK(cudaGetLastError())
