// What a hand-written CUDA kernel source includes. The same source is built in three ways:
//   - by nvcc, for the GPU: CUDA's own headers, and FRUGAL_LAUNCH is <<<...>>>;
//   - by the host compiler, for the emulator (emu/): emu/cuda_emu.h supplies CUDA's names
//     and FRUGAL_LAUNCH runs the kernel's blocks as fibers on the CPU, at once;
//   - by the host compiler in the FRUGAL_CUDA=emulated build (FRUGAL_CUDA_SOURCE_EMULATED): the
//     framework's own launchers, with FRUGAL_LAUNCH queueing the grid on a stream of the emulated
//     CUDA runtime (emu/runtime/).
// Nothing else in a kernel source needs to know which of the two it is.
//
//   FRUGAL_LAUNCH(grid, block, shared_bytes, stream, kernel)(args...);
//   FRUGAL_DYNAMIC_SHARED(float, tile);       // the launch's dynamic shared memory, as floats
//   FRUGAL_SHARED_ARRAY(float, partial, 64);  // __shared__ float partial[64];
//   SharedPtr<Acc> per_warp                   // a parameter pointing into shared memory
//   namespace frugal::FRUGAL_CUDA_NAMESPACE { ... launchers ... }
//
// The kernel comes last in FRUGAL_LAUNCH so that a template kernel's commas (kernel<To, From>) need
// no parentheses. Shared memory is declared through these two macros so that the emulator can check
// every access to it (bounds and races, emu/shared_memory.h); under nvcc they are plain CUDA.
// FRUGAL_DYNAMIC_SHARED takes any type, templates' too: the memory is one byte array, as CUDA
// requires (two `extern __shared__` arrays of different types in one program would clash).
#pragma once

#if defined(__CUDACC__)

#include "core/cuda/check.h"

#define FRUGAL_LAUNCH(grid, block, shared_bytes, stream, ...) __VA_ARGS__<<<grid, block, shared_bytes, stream>>>
#define FRUGAL_DYNAMIC_SHARED(type, name)                                 \
  extern __shared__ __align__(16) unsigned char frugal_dynamic_shared[]; \
  type* const name = reinterpret_cast<type*>(frugal_dynamic_shared)
#define FRUGAL_SHARED_ARRAY(type, name, count) __shared__ type name[count]
// The launchers' namespace: the GPU build defines frugal::cuda::...
#define FRUGAL_CUDA_NAMESPACE cuda
namespace frugal::cuda {
template <typename T>
using SharedPtr = T*;
}

#else  // the host compiler: the kernel emulator runs the grid

#include "emu/cuda_emu.h"

#define FRUGAL_DYNAMIC_SHARED(type, name) const ::frugal::emu::SharedPtr<type> name = ::frugal::emu::dynamic_shared<type>()
// A static array shared by the fibers of the running block (blocks run one at a time, launches take
// turns). All of them live in one section, which the emulator poisons at every block's start.
#define FRUGAL_SHARED_ARRAY(type, name, count)                                         \
  static __attribute__((section("frugal_shared"))) type frugal_shared_##name[count]; \
  const ::frugal::emu::SharedPtr<type> name = ::frugal::emu::static_shared(frugal_shared_##name, #name)

#if defined(FRUGAL_CUDA_SOURCE_EMULATED)
// The FRUGAL_CUDA=emulated build: the framework's own launchers, in frugal::cuda as on a GPU, against
// the emulated CUDA runtime (emu/runtime/): a launch is queued on its stream and runs in the emulator
// when something waits for that stream.
#include "core/cuda/check.h"
#include "emu/runtime/emulated_runtime.h"
#define FRUGAL_LAUNCH(grid, block, shared_bytes, stream, ...) \
  ::frugal::emu::runtime::launch_on_stream(#__VA_ARGS__, __VA_ARGS__, grid, block, shared_bytes, stream)
#define FRUGAL_CUDA_NAMESPACE cuda
#else
// The kernel tests: the grid runs at once, and the launchers live in frugal::cuda_emulated, so that
// they link into one test beside the CPU kernels (and, in a CUDA build, the GPU's) and compare.
#define FRUGAL_LAUNCH(grid, block, shared_bytes, stream, ...) \
  ::frugal::emu::launch(#__VA_ARGS__, __VA_ARGS__, grid, block, shared_bytes, stream)
#define FRUGAL_CUDA_NAMESPACE cuda_emulated
#define FRUGAL_CUDA_CHECK(call) FRUGAL_LIBRARY_CHECK("CUDA (emulated)", call, cudaSuccess, cudaGetErrorString)
#define FRUGAL_CUDA_CHECK_LAUNCH() FRUGAL_CUDA_CHECK(cudaGetLastError())
#endif

namespace frugal::FRUGAL_CUDA_NAMESPACE {
template <typename T>
using SharedPtr = ::frugal::emu::SharedPtr<T>;
}

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
