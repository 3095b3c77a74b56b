// Allocator: tags, DataPtr, statistics, the direct host allocator and the per-device registry.
#include "core/allocator.h"

#include <cstdlib>
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

// ---- DirectHostAllocator

namespace {
constexpr std::size_t kHostAlignment = 64;  // a cache line, and the widest vector load (AVX-512)
}

void* DirectHostAllocator::raw_allocate(std::size_t bytes, Stream) {
  // aligned_alloc wants a multiple of the alignment.
  const std::size_t rounded = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  void* ptr = std::aligned_alloc(kHostAlignment, rounded);
  if (!ptr) FRUGAL_THROW(OutOfMemoryError, "host allocation of ", bytes, " bytes failed");
  return ptr;
}

void DirectHostAllocator::raw_deallocate(void* ptr, std::size_t) noexcept { std::free(ptr); }

// ---- registry

namespace {
struct Registry {
  std::mutex mutex;
  std::map<std::pair<DeviceType, int>, Allocator*> overrides;
  DirectHostAllocator host;
#if FRUGAL_WITH_CUDA
  std::map<int, std::unique_ptr<Allocator>> cuda_direct;
#endif
};

Registry& registry() {
  static Registry* instance = new Registry;  // never destroyed: tensors in static objects may outlive main
  return *instance;
}

Allocator& default_allocator(Registry& r, Device device) {
  switch (device.type()) {
    case DeviceType::CPU:
      return r.host;
    case DeviceType::CUDA: {
#if FRUGAL_WITH_CUDA
      auto& slot = r.cuda_direct[device.index()];
      if (!slot) slot = cuda::make_direct_allocator(device.index());
      return *slot;
#else
      FRUGAL_THROW(DeviceError, "cannot use ", device, ": ", cuda_status().reason);
#endif
    }
  }
  FRUGAL_THROW(DeviceError, "unknown device type ", static_cast<int>(device.type()));
}
}  // namespace

Allocator& allocator_for(Device device) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto found = r.overrides.find({device.type(), device.index()});
  if (found != r.overrides.end()) return *found->second;
  return default_allocator(r, device);
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
