// Allocator: tags, DataPtr, statistics, and the per-device registry of caching allocators.
#include "core/allocator.h"

#include "core/caching_allocator.h"

#include <map>
#include <memory>

#include "core/cuda_status.h"
#include "core/error.h"

#if FRUGAL_WITH_CUDA
#include "core/cuda/runtime.h"
#endif

namespace frugal {

// ---- tags

std::string_view memory_tag_name(MemoryTag tag) {
  switch (tag) {
    case MemoryTag::param: return "param";
    case MemoryTag::grad: return "grad";
    case MemoryTag::optimizer: return "optimizer";
    case MemoryTag::activation: return "activation";
    case MemoryTag::workspace: return "workspace";
    case MemoryTag::data: return "data";
    case MemoryTag::other: return "other";
  }
  FRUGAL_THROW(ValueError, "unknown memory tag ", static_cast<int>(tag));
}

namespace {
thread_local MemoryTag t_current_tag = MemoryTag::other;
}

MemoryTag current_memory_tag() { return t_current_tag; }

MemoryTagScope::MemoryTagScope(MemoryTag tag) : previous_(t_current_tag) { t_current_tag = tag; }
MemoryTagScope::~MemoryTagScope() { t_current_tag = previous_; }

// ---- DataPtr

DataPtr& DataPtr::operator=(DataPtr&& other) noexcept {
  if (this != &other) {
    release();
    ptr_ = other.ptr_;
    bytes_ = other.bytes_;
    tag_ = other.tag_;
    owner_ = other.owner_;
    other.ptr_ = nullptr;
    other.bytes_ = 0;
    other.owner_ = nullptr;
  }
  return *this;
}

void DataPtr::release() noexcept {
  if (ptr_ && owner_) owner_->deallocate(ptr_, bytes_, tag_);
  ptr_ = nullptr;
  owner_ = nullptr;
}

// ---- Allocator

DataPtr Allocator::allocate(std::size_t bytes, Stream stream) {
  if (bytes == 0) return {};
  void* ptr = raw_allocate(bytes, stream);
  const MemoryTag tag = current_memory_tag();
  std::lock_guard lock(stats_mutex_);
  stats_.requested_bytes.increase(static_cast<std::int64_t>(bytes));
  stats_.allocations.increase(1);
  stats_.tag_bytes[static_cast<int>(tag)].increase(static_cast<std::int64_t>(bytes));
  return DataPtr(ptr, bytes, tag, this);
}

void Allocator::deallocate(void* ptr, std::size_t bytes, MemoryTag tag) noexcept {
  raw_deallocate(ptr, bytes);
  std::lock_guard lock(stats_mutex_);
  stats_.requested_bytes.decrease(static_cast<std::int64_t>(bytes));
  stats_.allocations.decrease(1);
  stats_.tag_bytes[static_cast<int>(tag)].decrease(static_cast<std::int64_t>(bytes));
}

AllocatorStats Allocator::stats() const {
  std::lock_guard lock(stats_mutex_);
  return stats_;
}

void Allocator::reset_peak_stats() {
  std::lock_guard lock(stats_mutex_);
  stats_.requested_bytes.reset_peak();
  stats_.allocations.reset_peak();
  for (Stat& tag : stats_.tag_bytes) tag.reset_peak();
}

// ---- registry

namespace {
struct Registry {
  AdaptiveMutex mutex;  // taken for every allocation, by every thread that makes tensors
  std::map<std::pair<DeviceType, int>, Allocator*> overrides;
  std::map<std::pair<DeviceType, int>, std::unique_ptr<CachingAllocator>> defaults;
  std::unique_ptr<CachingAllocator> pinned;
};

Registry& registry() {
  static Registry* instance = new Registry;  // never destroyed: tensors in static objects may outlive main
  return *instance;
}

std::unique_ptr<Backing> default_backing(Device device) {
  switch (device.type()) {
    case DeviceType::CPU:
      return std::make_unique<HostBacking>();
    case DeviceType::CUDA: {
      const CudaStatus& status = cuda_status();
      FRUGAL_CHECK_DEVICE(status.usable, "cannot use ", device, ": ", status.reason);
      FRUGAL_CHECK_DEVICE(device.index() < status.device_count, "cannot use ", device, ": only ", status.device_count,
                          " CUDA device(s) visible");
#if FRUGAL_WITH_CUDA
      return cuda::make_cuda_backing(device.index());
#else
      break;  // unreachable: without CUDA compiled in, status.usable is false
#endif
    }
  }
  FRUGAL_THROW(DeviceError, "unknown device type ", static_cast<int>(device.type()));
}
}  // namespace

namespace {
CachingAllocator& default_caching_allocator_locked(Registry& r, Device device) {
  auto& slot = r.defaults[{device.type(), device.index()}];
  if (!slot) slot = std::make_unique<CachingAllocator>(default_backing(device), CachingOptions::from_environment());
  return *slot;
}
}  // namespace

CachingAllocator& default_caching_allocator(Device device) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return default_caching_allocator_locked(r, device);
}

CachingAllocator& pinned_host_allocator() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (!r.pinned) {
#if FRUGAL_WITH_CUDA
    r.pinned = std::make_unique<CachingAllocator>(cuda::make_pinned_host_backing(), CachingOptions::from_environment());
#else
    r.pinned = std::make_unique<CachingAllocator>(std::make_unique<HostBacking>(), CachingOptions::from_environment());
#endif
  }
  return *r.pinned;
}

void set_memory_limit(Device device, std::size_t bytes) { default_caching_allocator(device).backing().set_capacity(bytes); }

Allocator& allocator_for(Device device) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto found = r.overrides.find({device.type(), device.index()});
  if (found != r.overrides.end()) return *found->second;
  return default_caching_allocator_locked(r, device);
}

Allocator* set_allocator(Device device, Allocator* allocator) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const auto key = std::make_pair(device.type(), device.index());
  Allocator* previous = nullptr;
  if (auto found = r.overrides.find(key); found != r.overrides.end()) previous = found->second;
  if (allocator)
    r.overrides[key] = allocator;
  else
    r.overrides.erase(key);
  return previous;
}

}  // namespace frugal
