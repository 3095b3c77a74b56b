// Status checks for cuBLAS and cuDNN, the GPU libraries kernels/ calls, generated from
// FRUGAL_LIBRARY_CHECK (core/error.h) exactly as core/cuda/check.h generates the CUDA runtime's:
// each throws LibraryError naming the library, the call, file:line and the library's own text.
// Include only from files compiled with CUDA.
#pragma once

#include <cublas_v2.h>
#include <cudnn.h>

#include "core/cuda/check.h"

#define FRUGAL_CUBLAS_CHECK(call) FRUGAL_LIBRARY_CHECK("cuBLAS", call, CUBLAS_STATUS_SUCCESS, cublasGetStatusString)
#define FRUGAL_CUDNN_CHECK(call) FRUGAL_LIBRARY_CHECK("cuDNN", call, CUDNN_STATUS_SUCCESS, cudnnGetErrorString)
