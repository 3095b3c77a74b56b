// The allocator registry (see allocator_registry.h).
//
// Note [A look-up without a lock]: every tensor's storage asks allocator_for(device), from every
// thread that makes tensors (autograd, loader workers), so the look-up is one atomic load from a
// fixed table indexed by device type and index. A slot is null until its device is first used;
// it is written only under the registry's lock (first use, set_allocator), with release ordering,
// so a reader that loads it with acquire ordering sees the allocator fully built. Default
// allocators are never freed, so a pointer once read stays valid.
#include "core/allocator_registry.h"

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <utility>

#include "core/adaptive_mutex.h"
#include "core/caching_allocator.h"
#include "core/cuda_status.h"
#include "core/error.h"

#if FRUGAL_WITH_CUDA
#include "core/cuda/runtime.h"
#endif

namespace frugal {

namespace {


struct Slot {
  std::atomic<Allocator*> serving{nullptr};          // what allocator_for returns
  std::atomic<CachingAllocator*> caching{nullptr};   // the device's default, once made
  Allocator* replacement = nullptr;                  // set_allocator's, under the lock
};

struct Registry {
  AdaptiveMutex mutex;  // taken to make or replace an allocator, never to look one up
  std::array<std::array<Slot, kMaxDevicesPerType>, kNumDeviceTypes> slots;
  std::atomic<CachingAllocator*> pinned{nullptr};
};

Registry& registry() {
  static Registry* instance = new Registry;  // never destroyed: tensors in static objects may outlive main
  return *instance;
}

Slot& slot_for(Device device) {
  FRUGAL_CHECK_DEVICE(device.index() >= 0 && device.index() < kMaxDevicesPerType, "cannot use ", device,
                      ": device indices run from 0 to ", kMaxDevicesPerType - 1);
  return registry().slots[static_cast<std::size_t>(device.type())][static_cast<std::size_t>(device.index())];
}

// The allocator in `slot`, made by `make` under the registry's lock if it is not there yet
// (Note [A look-up without a lock]). `make` may throw; the slot then stays empty.
template <typename Make>
CachingAllocator& get_or_make(std::atomic<CachingAllocator*>& slot, Make make) {
  if (CachingAllocator* made = slot.load(std::memory_order_acquire)) return *made;
  std::lock_guard lock(registry().mutex);
  CachingAllocator* made = slot.load(std::memory_order_relaxed);
  if (!made) {
    made = make().release();  // lives until the process ends
    slot.store(made, std::memory_order_release);
  }
  return *made;
}

std::unique_ptr<Backing> default_backing(Device device) {
  switch (device.type()) {
    case DeviceType::CPU:
      return std::make_unique<HostBacking>();
    case DeviceType::Meta:  // addresses without memory; limits and statistics work as on any device
      return std::make_unique<SimulatedBacking>(Device::meta());
    case DeviceType::CUDA:
      check_device_usable(device);  // CUDA usable, and the index among the visible devices
#if FRUGAL_WITH_CUDA
      return cuda::make_cuda_backing(device.index());
#else
      break;  // unreachable: without CUDA compiled in, CUDA is never usable
#endif
  }
  FRUGAL_THROW(DeviceError, "unknown device type ", static_cast<int>(device.type()));
}

std::unique_ptr<Backing> pinned_backing() {
#if FRUGAL_WITH_CUDA
  return cuda::make_pinned_host_backing();
#else
  return std::make_unique<HostBacking>();
#endif
}

}  // namespace

CachingAllocator& default_caching_allocator(Device device) {
  return get_or_make(slot_for(device).caching, [device] {
    return std::make_unique<CachingAllocator>(default_backing(device), CachingOptions::from_environment());
  });
}

CachingAllocator& pinned_host_allocator() {
  return get_or_make(registry().pinned, [] {
    return std::make_unique<CachingAllocator>(pinned_backing(), CachingOptions::from_environment());
  });
}

void set_memory_limit(Device device, std::size_t bytes) {
  CachingAllocator& allocator = default_caching_allocator(device);
  allocator.empty_cache();  // cached blocks would otherwise serve requests past the new limit
  allocator.backing().set_capacity(bytes);
}

Allocator& allocator_for(Device device) {
  Slot& slot = slot_for(device);
  if (Allocator* serving = slot.serving.load(std::memory_order_acquire)) return *serving;
  // The device's first use: make its default, then fill the slot unless set_allocator did meanwhile.
  CachingAllocator& made = default_caching_allocator(device);
  std::lock_guard lock(registry().mutex);
  if (!slot.serving.load(std::memory_order_relaxed)) slot.serving.store(&made, std::memory_order_release);
  return *slot.serving.load(std::memory_order_relaxed);
}

Allocator* set_allocator(Device device, Allocator* allocator) {
  Slot& slot = slot_for(device);
  std::lock_guard lock(registry().mutex);
  // Restoring the default before it exists leaves the slot empty: the next allocator_for makes it
  // (making it here could throw, for a CUDA device that cannot be used).
  Allocator* serving = allocator ? allocator : slot.caching.load(std::memory_order_relaxed);
  slot.serving.store(serving, std::memory_order_release);
  return std::exchange(slot.replacement, allocator);
}

}  // namespace frugal
