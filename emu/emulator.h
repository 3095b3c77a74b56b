// The CUDA emulator: runs a kernel's blocks one at a time on the CPU, each CUDA thread a fiber
// (Boost.Context), switching only where CUDA threads must meet: __syncthreads and the warp
// primitives. Deterministic, with a selectable order in which the threads of a block run between
// those points (forward, reverse, a seeded shuffle), so a missing barrier or a race on shared memory
// changes the result and fails a test instead of passing by luck. It also poisons dynamic shared
// memory at each block's start and fences it with guard bytes, and names the kernel, block and
// thread of an out-of-bounds shared write, a deadlock, or a divergent barrier or warp primitive.
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
  bool poison_shared = true;                    // fill dynamic shared memory with 0xFF bytes (NaN, -1)
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

void block_barrier();
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

// The block's dynamic shared memory (the launch's shared_bytes), 16-byte aligned.
void* dynamic_shared_memory();

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
