// The CUDA emulator: runs a kernel's blocks one at a time on the CPU, each CUDA thread a fiber
// (Boost.Context), switching only where CUDA threads must meet: __syncthreads and the warp
// primitives. Deterministic, with a selectable order in which the threads of a block run between
// those points (forward, reverse, a seeded shuffle). Every shared-memory access goes through a
// checked pointer (shared_memory.h): one outside its array or the launch's dynamic shared memory is
// an error, and the hazard checker (hazard_checker.h) reports two threads touching one word with
// nothing ordering them. Shared memory is poisoned at each block's start, and the emulator names the
// kernel, block and threads of a hazard, a divergent barrier or warp primitive, or a deadlock. A race
// the checks cannot see (on global memory, say) still changes the result under some schedule, so a
// test fails instead of passing by luck.
//
// What it checks: indices, barriers, warp exchanges, shared memory use, atomics' logic. What it
// cannot: speed, memory coalescing, bank conflicts, real concurrency between blocks (blocks that
// communicate through global memory within one launch are unsupported on GPUs too), the memory
// model's weaker orderings, and library calls (cuBLAS, cuDNN, NCCL). See docs/cuda-emulator.md.
//
// Kernel sources do not include this header directly: core/cuda/kernel_support.h gives them CUDA's
// names (through emu/cuda_emu.h) and FRUGAL_LAUNCH.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <source_location>
#include <string>
#include <tuple>
#include <type_traits>

#include "core/error.h"

namespace frugal::emu {

inline constexpr int kWarpSize = 32;
inline constexpr int kMaxThreadsPerBlock = 1024;           // every CUDA GPU since Fermi
inline constexpr std::size_t kDefaultSharedBytes = 48 << 10;  // dynamic shared memory without opting in

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

struct EmulatedStream;  // streams are accepted and ignored: a launch completes before it returns

// A kernel misbehaved: what, where (kernel, block, thread), and how to see it.
struct KernelError : Error {
  using Error::Error;
};

enum class Schedule : std::uint8_t { forward, reverse, shuffle };
std::string_view schedule_name(Schedule schedule);

struct Options {
  Schedule schedule = Schedule::forward;
  std::uint64_t seed = 0;                       // for Schedule::shuffle
  std::size_t max_shared_bytes = kDefaultSharedBytes;
  bool poison_shared = true;                    // fill shared memory with 0xFF bytes (NaN, -1)
  bool check_hazards = true;                    // report shared-memory races (hazard_checker.h)
};

Options options();
// Sets the options of launches on this OS thread while it lives, and restores the old ones after.
class OptionsScope {
 public:
  explicit OptionsScope(Options options);
  ~OptionsScope();
  OptionsScope(const OptionsScope&) = delete;
  OptionsScope& operator=(const OptionsScope&) = delete;

 private:
  Options previous_;
};

// What threadIdx, blockIdx, blockDim and gridDim read.
struct ThreadIndex {
  dim3 thread_idx, block_idx, block_dim, grid_dim;
};
const ThreadIndex& current_thread();  // KernelError outside a kernel

// ---- what kernels call (through cuda_emu.h)

// `site` tells barriers apart: every live thread of a block must reach the same one.
void block_barrier(const std::source_location& site);
enum class WarpOp : std::uint8_t { shfl_idx, shfl_down, shfl_up, shfl_xor, ballot, all, any, sync };
// Exchanges up to 8 bytes with the other lanes of the warp; returns the bytes this lane receives.
std::uint64_t warp_exchange(unsigned mask, WarpOp op, std::uint64_t bits, int operand, int width);

template <typename T>
T warp_shuffle(unsigned mask, T value, WarpOp op, int operand, int width) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffles move values of at most 8 bytes");
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = warp_exchange(mask, op, bits, operand, width);
  T result;
  std::memcpy(&result, &bits, sizeof(T));
  return result;
}
inline unsigned warp_vote(unsigned mask, WarpOp op, bool predicate) {
  return static_cast<unsigned>(warp_exchange(mask, op, predicate ? 1 : 0, 0, kWarpSize));
}
inline void warp_sync(unsigned mask) { warp_exchange(mask, WarpOp::sync, 0, 0, kWarpSize); }

// ---- shared memory, as kernels reach it through SharedPtr (shared_memory.h)

enum class SharedAccess : std::uint8_t { read, write, atomic };

// One stretch of shared memory a SharedPtr may touch: a static array, or the launch's dynamic
// shared memory (name null).
struct SharedSpan {
  unsigned char* begin = nullptr;
  std::size_t bytes = 0;
  const char* name = nullptr;
};

// The block's dynamic shared memory (the launch's shared_bytes), 16-byte aligned.
SharedSpan dynamic_shared_span();
// Checks that the running thread's access to `bytes` bytes at `offset` lies inside `span`, records
// it for the hazard checker, and returns its address; a KernelError names the kernel, block,
// threads, offset and kind of what is wrong.
void* check_shared_access(const SharedSpan& span, std::ptrdiff_t offset, std::size_t bytes, SharedAccess kind);

// ---- launching

// Runs grid x block threads of `body`, block after block.
void run_grid(const char* kernel, dim3 grid, dim3 block, std::size_t shared_bytes, const std::function<void()>& body);

// `from` as a To by copy-initialisation: only implicit conversions compile.
template <typename To, typename From>
To implicitly(From&& from) {
  return std::forward<From>(from);
}

// FRUGAL_LAUNCH's emulated form: launch(...)(args...) runs the kernel with those arguments.
template <typename... Params>
auto launch(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared_bytes,
            EmulatedStream* /*stream*/) {
  return [=](auto&&... args) {
    // Each thread gets the arguments as a kernel does: by value, converted to the parameter types
    // implicitly (as nvcc does: a void* does not become a float* without a cast).
    const std::tuple<std::decay_t<Params>...> values{implicitly<std::decay_t<Params>>(std::forward<decltype(args)>(args))...};
    run_grid(name, grid, block, shared_bytes, [&] { std::apply(kernel, values); });
  };
}

}  // namespace frugal::emu
