// The status check for NCCL, generated from FRUGAL_LIBRARY_CHECK (core/error.h) exactly as
// core/cuda/check.h generates the CUDA runtime's: it throws LibraryError naming NCCL, the call,
// file:line and NCCL's own text. Include only from files compiled with CUDA.
#pragma once

#include <nccl.h>

#include "core/cuda/check.h"

#define FRUGAL_NCCL_CHECK(call) FRUGAL_LIBRARY_CHECK("NCCL", call, ncclSuccess, ncclGetErrorString)
