// What frugal's own code reaches in the emulated CUDA runtime beyond CUDA's names (those are in
// include/cuda_runtime.h and include/cuda.h): the kernel launch that FRUGAL_LAUNCH becomes in the
// FRUGAL_CUDA=emulated build, and the runtime's counters (kernel launches, copies, deferred work),
// which samples/15_emulated_gpu_step prints.
//
// A launch does not run: it is queued on its stream with the pointers it was given, and runs when
// something waits for the stream (a synchronize, an event, a blocking copy), in the kernel emulator
// (emu/emulator.h) on the waiting thread. Note [Deferred work and poison] in runtime.cpp says why.
// Deliberately not here: anything a kernel source or a dispatch site would branch on; the launch is
// the only entry point they see, through core/cuda/kernel_support.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <vector>

#include "emu/emulator.h"

namespace frugal::emu::runtime {

// A pointer a kernel was given: the runtime checks at launch that it points into device memory
// (or pinned host memory, which a GPU reaches over the bus), and that nothing frees what a pending
// kernel still uses.
struct KernelPointer {
  const void* address = nullptr;
  int argument = 0;  // which of the kernel's pointer arguments (0: the first), for messages
};

// Queues `work` (the grid, run by the kernel emulator) on `stream`; a bad pointer or stream is
// recorded as this thread's last error, which FRUGAL_CUDA_CHECK_LAUNCH reads, as after a real launch.
void enqueue_kernel(cudaStream_t stream, const char* name, const std::vector<KernelPointer>& pointers,
                    std::function<void()> work);

struct Statistics {
  std::int64_t kernel_launches = 0;
  std::int64_t copies_host_to_device = 0, copies_device_to_host = 0, copies_device_to_device = 0;
  std::int64_t memsets = 0;
  std::int64_t bytes_host_to_device = 0, bytes_device_to_host = 0;
  std::int64_t waits = 0;            // calls that made queued work run (synchronize, event, blocking copy)
  std::int64_t most_pending = 0;     // the longest any stream's queue has been
  std::int64_t poisoned_bytes = 0;   // filled with 0xFF: fresh allocations and pending copies' destinations
};
Statistics statistics();
void reset_statistics();

// Makes the runtime's SIGSEGV handler, which names a host access to device memory before handing the
// fault on to the handler it replaces, the process's. The runtime installs it when it starts; a
// test framework that installs its own per case (doctest does) calls this again inside the case.
void install_fault_handler();

template <typename T>
void collect_pointer(std::vector<KernelPointer>& pointers, const T& value) {
  const int position = static_cast<int>(pointers.size());  // counts pointer arguments only
  if constexpr (std::is_pointer_v<T>) pointers.push_back({static_cast<const void*>(value), position});
}

// FRUGAL_LAUNCH's form in the emulated CUDA build: launch_on_stream(...)(args...) converts the
// arguments to the kernel's parameter types (implicitly, as nvcc does) and queues the grid.
template <typename... Params>
auto launch_on_stream(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared_bytes,
                      cudaStream_t stream) {
  return [=](auto&&... args) {
    using Values = std::tuple<std::decay_t<Params>...>;
    auto values = std::make_shared<Values>(implicitly<std::decay_t<Params>>(std::forward<decltype(args)>(args))...);
    std::vector<KernelPointer> pointers;
    std::apply([&](const auto&... value) { (collect_pointer(pointers, value), ...); }, *values);
    const Options options = emu::options();  // the launching thread's schedule, applied where it runs
    enqueue_kernel(stream, name, pointers, [=] {
      OptionsScope scope(options);
      run_grid(name, grid, block, shared_bytes, [&] { std::apply(kernel, *values); });
    });
  };
}

}  // namespace frugal::emu::runtime
