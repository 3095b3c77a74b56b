// FRUGAL_HOST_DEVICE marks functions that both the host compiler and nvcc compile: index math and
// per-element work shared by CPU loops and CUDA kernels, so CPU tests exercise what GPU kernels run.
#pragma once

#if defined(__CUDACC__)
#define FRUGAL_HOST_DEVICE __host__ __device__
#else
#define FRUGAL_HOST_DEVICE
#endif
