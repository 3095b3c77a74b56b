// The allocator registry: which Allocator serves each device. Every tensor asks it once, when its
// storage is made (allocator_for), so the look-up takes no lock: a fixed table of atomic pointers,
// one per device, filled under a lock the first time a device is used and when set_allocator
// replaces an allocator. Each device's default is a CachingAllocator over that device's backing,
// created on first use and kept until the process ends; page-locked staging memory for the data
// loader has an allocator of its own here too.
// Not here: the Allocator interface (core/allocator.h), the caching allocator itself
// (core/caching_allocator.h), where memory comes from (core/backing.h).
#pragma once

#include <cstddef>

#include "core/device.h"

namespace frugal {

class Allocator;
class CachingAllocator;

// Device indices the registry has a slot for: cuda:0 to cuda:63. A machine has at most 16 GPUs in
// practice; a larger index is a DeviceError rather than a slower, locked look-up.
inline constexpr int kMaxDevicesPerType = 64;

// The allocator serving `device`: the device's caching allocator unless set_allocator replaced it.
// Throws DeviceError for a CUDA device when CUDA is not compiled in or not usable, with the reason,
// and for an index outside [0, kMaxDevicesPerType).
Allocator& allocator_for(Device device);
// Replaces the allocator serving `device` (nullptr restores the default); returns the previous
// replacement (nullptr if there was none). The caller keeps `allocator` alive while tensors
// allocated from it exist, and does not replace it while another thread is making tensors on that
// device (such a thread may still be handed the previous allocator).
Allocator* set_allocator(Device device, Allocator* allocator);

// The caching allocator that serves `device` unless set_allocator replaced it: created on first use
// over the device's backing (HostBacking, CudaBacking) with options from the environment
// (CachingOptions::from_environment). It lives until the process ends.
CachingAllocator& default_caching_allocator(Device device);
// Caps what `device`'s caching allocator may hold. On the CPU this is a simulated device of `bytes`:
// every OOM and every mitigation can be shown without a GPU. kUnlimited removes the cap. Cached free
// blocks are released first, so that the limit holds from the next request on.
void set_memory_limit(Device device, std::size_t bytes);
// Page-locked host memory for the data loader's staging buffers (cudaHostAlloc when CUDA is
// compiled in; plain host memory otherwise), with statistics of its own.
CachingAllocator& pinned_host_allocator();

}  // namespace frugal
