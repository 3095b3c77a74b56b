// Allocator: tags, DataPtr and the statistics every allocator keeps (see allocator.h).
// The per-device registry is core/allocator_registry.cpp.
#include "core/allocator.h"

#include <deque>
#include <unordered_map>
#include <utility>

#include "core/error.h"

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

// ---- contexts (Note [Allocation contexts] in allocator.h)

namespace {
thread_local MemoryContextId t_current_context = kNoMemoryContext;

// The interned labels. A deque, so labels never move while another thread reads one; the map's keys
// view them.
struct ContextRegistry {
  std::mutex mutex;
  std::deque<std::string> labels{""};  // id 0: no context
  std::unordered_map<std::string_view, MemoryContextId> ids;
};

ContextRegistry& context_registry() {
  static ContextRegistry* registry = new ContextRegistry;  // never destroyed: blocks may name it until exit
  return *registry;
}
}  // namespace

MemoryContextId intern_memory_context(std::string_view label) {
  FRUGAL_CHECK_VALUE(!label.empty(), "a memory context needs a non-empty label");
  ContextRegistry& registry = context_registry();
  std::lock_guard lock(registry.mutex);
  if (const auto found = registry.ids.find(label); found != registry.ids.end()) return found->second;
  const auto id = static_cast<MemoryContextId>(registry.labels.size());
  registry.labels.emplace_back(label);
  registry.ids.emplace(registry.labels.back(), id);
  return id;
}

std::string memory_context_label(MemoryContextId id) {
  ContextRegistry& registry = context_registry();
  std::lock_guard lock(registry.mutex);
  FRUGAL_CHECK_VALUE(id < registry.labels.size(), "memory context ", id, " was never interned");
  return registry.labels[id];
}

MemoryContextId current_memory_context() { return t_current_context; }

MemoryContextId set_memory_context(MemoryContextId id) { return std::exchange(t_current_context, id); }

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

// ---- a thread's own host blocks (Note [A thread's own host blocks] in allocator.h)

namespace {
thread_local Stream t_host_allocation_stream{};
thread_local char t_own_stream_tag = 0;  // only its address is used: one per thread, never Stream{}'s nullptr
}  // namespace

Stream host_allocation_stream() { return t_host_allocation_stream; }

ThreadOwnBlocksScope::ThreadOwnBlocksScope() : previous_(t_host_allocation_stream) {
  t_host_allocation_stream = Stream{&t_own_stream_tag};
}
ThreadOwnBlocksScope::~ThreadOwnBlocksScope() { t_host_allocation_stream = previous_; }

// ---- Allocator

// One lock for the memory and its statistics (Note [One lock per allocator] in allocator.h).
DataPtr Allocator::allocate(std::size_t bytes, Stream stream) {
  if (bytes == 0) return {};
  if (stream == Stream{} && device().is_cpu()) stream = host_allocation_stream();
  const MemoryTag tag = current_memory_tag();
  std::lock_guard lock(mutex_);
  void* ptr = raw_allocate(bytes, stream);
  stats_.requested_bytes.increase(static_cast<std::int64_t>(bytes));
  stats_.allocations.increase(1);
  stats_.tag_bytes[static_cast<int>(tag)].increase(static_cast<std::int64_t>(bytes));
  return DataPtr(ptr, bytes, tag, this);
}

void Allocator::deallocate(void* ptr, std::size_t bytes, MemoryTag tag) noexcept {
  std::lock_guard lock(mutex_);
  raw_deallocate(ptr, bytes);
  stats_.requested_bytes.decrease(static_cast<std::int64_t>(bytes));
  stats_.allocations.decrease(1);
  stats_.tag_bytes[static_cast<int>(tag)].decrease(static_cast<std::int64_t>(bytes));
}

AllocatorStats Allocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void Allocator::reset_peak_stats() {
  std::lock_guard lock(mutex_);
  stats_.requested_bytes.reset_peak();
  stats_.allocations.reset_peak();
  for (Stat& tag : stats_.tag_bytes) tag.reset_peak();
}

}  // namespace frugal
