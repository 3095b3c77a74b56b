// The emulated CUDA runtime's internals shared by its two halves: memory.cpp (device memory, pinned
// host memory, the driver's virtual memory calls, the fault handler) and runtime.cpp (errors,
// devices, streams, events, copies, launches). Not a public header: frugal's code sees only
// include/cuda_runtime.h, include/cuda.h and emulated_runtime.h.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include "emu/runtime/emulated_runtime.h"

namespace frugal::emu::runtime {

// Every call of the emulated runtime holds it: the runtime is one device model shared by all host
// threads, and queued work runs on whichever thread waits for it.
std::recursive_mutex& runtime_mutex();

// ---- errors (runtime.cpp): record `code` with its account as this thread's last error, return it
cudaError_t fail(cudaError_t code, std::string account);
CUresult fail_driver(CUresult code, std::string account);
int current_device();
Statistics& counters();  // under runtime_mutex()
bool valid_device(int device);

// ---- memory (memory.cpp)
int emulated_device_count();             // FRUGAL_EMULATED_DEVICES, 1 by default
std::size_t device_capacity(int device);  // FRUGAL_EMULATED_MEMORY_MIB, 8 GiB by default
std::size_t device_used(int device);

enum class MemoryKind { pageable, pinned, device };
// Where a pointer points. For device and pinned memory, the allocation holding it (`begin`, `bytes`;
// a pointer one past its end counts as inside, as an empty tensor's may be); for a device address in
// no allocation, begin 0.
struct Place {
  MemoryKind kind = MemoryKind::pageable;
  int device = -1;
  std::uintptr_t begin = 0;
  std::size_t bytes = 0;
};
Place locate(const void* pointer);
std::string describe(const void* pointer);  // "cuda:0 memory 0x...", "pinned host memory 0x...", ...

// Device memory is readable and writable by the host only while the runtime runs device work (a
// kernel, a copy): nestable.
class DeviceAccess {
 public:
  DeviceAccess();
  ~DeviceAccess();
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
};
// Fills with 0xFF bytes (NaN in every floating dtype, -1 in the signed ones); device memory needs a
// DeviceAccess.
void poison(void* pointer, std::size_t bytes);
// poison() on device memory, opening it to the host for the fill only.
void poison_device(void* pointer, std::size_t bytes);

// ---- queues (runtime.cpp): what pending work on any stream reads or writes [begin, begin + bytes);
// empty when nothing does.
std::string pending_use(std::uintptr_t begin, std::size_t bytes);

}  // namespace frugal::emu::runtime
