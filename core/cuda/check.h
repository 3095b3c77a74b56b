// Status checks for CUDA, cuBLAS, cuDNN and NCCL, all generated from FRUGAL_LIBRARY_CHECK
// (core/error.h): each throws LibraryError naming the library, the call, file:line and the
// library's own text for the status. Include only from files that are compiled with CUDA.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include "core/error.h"

#define FRUGAL_CUDA_CHECK(call) FRUGAL_LIBRARY_CHECK("CUDA", call, cudaSuccess, cudaGetErrorString)
#define FRUGAL_CUBLAS_CHECK(call) FRUGAL_LIBRARY_CHECK("cuBLAS", call, CUBLAS_STATUS_SUCCESS, cublasGetStatusString)
#define FRUGAL_CUDNN_CHECK(call) FRUGAL_LIBRARY_CHECK("cuDNN", call, CUDNN_STATUS_SUCCESS, cudnnGetErrorString)
#define FRUGAL_NCCL_CHECK(call) FRUGAL_LIBRARY_CHECK("NCCL", call, ncclSuccess, ncclGetErrorString)

// After a kernel launch: catches bad launch configurations at once (asynchronous faults surface at
// the next synchronising call).
#define FRUGAL_CUDA_CHECK_LAUNCH() FRUGAL_CUDA_CHECK(cudaGetLastError())
