// What a hand-written CUDA kernel source includes. The same source is built twice:
//   - by nvcc, for the GPU: CUDA's own headers, and FRUGAL_LAUNCH is <<<...>>>;
//   - by the host compiler, for the emulator (core/emu/): core/emu/cuda_emu.h supplies CUDA's names
//     and FRUGAL_LAUNCH runs the kernel's blocks as fibers on the CPU.
// Nothing else in a kernel source needs to know which of the two it is.
//
//   FRUGAL_LAUNCH(grid, block, shared_bytes, stream, kernel)(args...);
//   FRUGAL_DYNAMIC_SHARED(float, tile);   // extern __shared__ float tile[];
//   namespace frugal::FRUGAL_CUDA_NAMESPACE { ... launchers ... }
//
// The kernel comes last in FRUGAL_LAUNCH so that a template kernel's commas (kernel<To, From>) need
// no parentheses.
#pragma once

#if defined(__CUDACC__)

#include "core/cuda/check.h"

#define FRUGAL_LAUNCH(grid, block, shared_bytes, stream, ...) __VA_ARGS__<<<grid, block, shared_bytes, stream>>>
#define FRUGAL_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
// The launchers' namespace: the GPU build defines frugal::cuda::...
#define FRUGAL_CUDA_NAMESPACE cuda

#else

#include "core/emu/cuda_emu.h"

#define FRUGAL_LAUNCH(grid, block, shared_bytes, stream, ...) \
  ::frugal::emu::launch(#__VA_ARGS__, __VA_ARGS__, grid, block, shared_bytes, stream)
#define FRUGAL_DYNAMIC_SHARED(type, name) type* name = static_cast<type*>(::frugal::emu::dynamic_shared_memory())
// ... and the emulated build frugal::cuda_emulated::..., so both link into one test and compare.
#define FRUGAL_CUDA_NAMESPACE cuda_emulated
#define FRUGAL_CUDA_CHECK(call) FRUGAL_LIBRARY_CHECK("CUDA (emulated)", call, cudaSuccess, cudaGetErrorString)
#define FRUGAL_CUDA_CHECK_LAUNCH() FRUGAL_CUDA_CHECK(cudaGetLastError())

#endif
