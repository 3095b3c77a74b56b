// What a hand-written CUDA kernel source includes. The same source is built twice:
//   - by nvcc, for the GPU: CUDA's own headers, and FRUGAL_LAUNCH is <<<...>>>;
//   - by the host compiler, for the emulator (emu/): emu/cuda_emu.h supplies CUDA's names
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

#include "emu/cuda_emu.h"

#define FRUGAL_LAUNCH(grid, block, shared_bytes, stream, ...) \
  ::frugal::emu::launch(#__VA_ARGS__, __VA_ARGS__, grid, block, shared_bytes, stream)
#define FRUGAL_DYNAMIC_SHARED(type, name) type* name = static_cast<type*>(::frugal::emu::dynamic_shared_memory())
// ... and the emulated build frugal::cuda_emulated::..., so both link into one test and compare.
#define FRUGAL_CUDA_NAMESPACE cuda_emulated
#define FRUGAL_CUDA_CHECK(call) FRUGAL_LIBRARY_CHECK("CUDA (emulated)", call, cudaSuccess, cudaGetErrorString)
#define FRUGAL_CUDA_CHECK_LAUNCH() FRUGAL_CUDA_CHECK(cudaGetLastError())

#endif

#include <algorithm>
#include <cstdint>

namespace frugal::FRUGAL_CUDA_NAMESPACE {

// Grid-stride loops, the shape of every one-thread-per-element kernel:
//   FRUGAL_LAUNCH(grid_for(n), kGridBlockThreads, 0, nullptr, kernel)(..., n);
//   for (std::int64_t i = grid_thread(); i < n; i += grid_threads()) ...
// A multiple of the 32-thread warp that keeps enough warps resident per SM for memory-bound loops.
inline constexpr int kGridBlockThreads = 256;
// Grid-stride loops cover any size; past this many blocks more would only add scheduling work
// (132 SMs on an H100/H200 x 16 resident blocks of 256 threads is about 2100).
inline constexpr std::int64_t kMaxGridBlocks = 4096;

inline int grid_for(std::int64_t work_items) {
  return static_cast<int>(
      std::clamp<std::int64_t>((work_items + kGridBlockThreads - 1) / kGridBlockThreads, 1, kMaxGridBlocks));
}
__device__ inline std::int64_t grid_thread() { return blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; }
__device__ inline std::int64_t grid_threads() { return static_cast<std::int64_t>(blockDim.x) * gridDim.x; }

}  // namespace frugal::FRUGAL_CUDA_NAMESPACE
