// Allocator: the interface every tensor's memory comes through, and the seams later layers hang on.
//   - DataPtr: owning handle to one allocation; gives the bytes back to its allocator when it dies.
//   - MemoryTag: what an allocation is for (param, grad, activation, ...). Set per thread by an RAII
//     MemoryTagScope, so a memory report can say what filled the device.
//   - Memory context: who made an allocation ("features.3.conv.1 (Conv2d)", "loss"), an interned
//     label set per thread by MemoryContextScope, so a report can say which layer or op holds it.
//   - Stream: an opaque stream handle, so a pooling allocator can respect stream order.
// The registry that picks the allocator of each device (allocator_for, set_allocator) is
// core/allocator_registry.h, included here so that every user of an allocator finds it.
// Not here: the allocator itself (core/caching_allocator.h: pooling, capacity limits, explained
// OOMs) and where its memory comes from (core/backing.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "core/adaptive_mutex.h"
#include "core/allocator_registry.h"
#include "core/device.h"

namespace frugal {

// ---- tags

enum class MemoryTag : std::uint8_t { param, grad, optimizer, activation, workspace, data, other };
inline constexpr int kNumMemoryTags = 7;
std::string_view memory_tag_name(MemoryTag tag);

MemoryTag current_memory_tag();  // this thread's tag; MemoryTag::other unless a scope says otherwise

// Sets this thread's tag for its lifetime and restores the previous one after:
//   { MemoryTagScope scope(MemoryTag::activation); auto y = layer(x); }
class MemoryTagScope {
 public:
  explicit MemoryTagScope(MemoryTag tag);
  ~MemoryTagScope();
  MemoryTagScope(const MemoryTagScope&) = delete;
  MemoryTagScope& operator=(const MemoryTagScope&) = delete;

 private:
  MemoryTag previous_;
};

// ---- contexts

// Note [Allocation contexts]: the caching allocator records on every block the context in force on
// the allocating thread, as it records the tag. A label is interned once into a 32-bit id (0: no
// context), so a block carries 4 bytes, never a string, and the allocation path reads one more
// thread-local. Labels live until the process ends: intern names that recur (a layer's dotted
// name), not text made fresh each step. The trainer sets the context from module calls
// (train/memory_context.h); reports turn ids back into labels.
using MemoryContextId = std::uint32_t;
inline constexpr MemoryContextId kNoMemoryContext = 0;

// The id of `label` (non-empty), the same for every call with the same text. Thread-safe.
MemoryContextId intern_memory_context(std::string_view label);
// The label of an id from intern_memory_context; "" for kNoMemoryContext; ValueError for others.
std::string memory_context_label(MemoryContextId id);

MemoryContextId current_memory_context();  // this thread's; kNoMemoryContext unless a scope says otherwise
// Sets this thread's context and returns the previous one, for observers whose start and end are
// two calls (a ModuleCallObserver); code with a block to scope uses MemoryContextScope.
MemoryContextId set_memory_context(MemoryContextId id);

// Sets this thread's context for its lifetime and restores the previous one after:
//   { MemoryContextScope made_by("loss"); loss = cross_entropy(logits, labels); }
class MemoryContextScope {
 public:
  explicit MemoryContextScope(MemoryContextId id) : previous_(set_memory_context(id)) {}
  explicit MemoryContextScope(std::string_view label) : MemoryContextScope(intern_memory_context(label)) {}
  ~MemoryContextScope() { set_memory_context(previous_); }
  MemoryContextScope(const MemoryContextScope&) = delete;
  MemoryContextScope& operator=(const MemoryContextScope&) = delete;

 private:
  MemoryContextId previous_;
};

// ---- streams

// An opaque stream: on CUDA a cudaStream_t (nullptr = the legacy default stream); on the host a
// plain number that only tags work. Kept CUDA-type-free so every header can mention streams.
struct Stream {
  void* handle = nullptr;
  constexpr bool operator==(const Stream&) const = default;
};

// Note [A thread's own host blocks]
// The caching allocator hands a freed block only to allocations on the block's stream. Host tensors
// have no stream of their own (Stream{}), so a block one thread freed goes to whichever thread asks
// next. Where threads each run their own slices of a batch (nn/batch_slices.h), that hands a thread
// memory whose cache lines the other core last wrote, and every line written moves across: cheap
// where the two cores share an L3, dear where they do not. The development host's hypervisor moves
// its two vCPUs between those two placements from minute to minute (a cache line's round trip
// between them 50-60 ns in one, 310-370 ns in the other), and in the second the CIFAR stem's eval
// forward on 2 threads took 116-121 ms, 80-84 ms with each thread reusing its own blocks (80-87 ms
// in the first placement either way; measured 2026-12-07, docs/benchmarks.md). So inside a
// ThreadOwnBlocksScope a host allocation with no stream is cached under a stream of this thread's
// own, and the blocks the thread frees come back to it. Outside one (the default) host allocations
// share Stream{}: a layer split among all the threads writes on both cores anyway. A block cached
// under one thread's stream is released to the system like any other when memory runs short.

// The stream a host allocation asking for Stream{} is cached under on this thread: Stream{}, or
// this thread's own inside a ThreadOwnBlocksScope.
Stream host_allocation_stream();

// Sets this thread's host allocations to its own stream for its lifetime, the previous setting after.
class ThreadOwnBlocksScope {
 public:
  ThreadOwnBlocksScope();
  ~ThreadOwnBlocksScope();
  ThreadOwnBlocksScope(const ThreadOwnBlocksScope&) = delete;
  ThreadOwnBlocksScope& operator=(const ThreadOwnBlocksScope&) = delete;

 private:
  Stream previous_;
};

// ---- allocations

class Allocator;

// Owns one allocation. Move-only; the memory goes back to its allocator in the destructor.
class DataPtr {
 public:
  DataPtr() = default;
  DataPtr(void* ptr, std::size_t bytes, MemoryTag tag, Allocator* owner)
      : ptr_(ptr), bytes_(bytes), tag_(tag), owner_(owner) {}
  DataPtr(DataPtr&& other) noexcept { *this = static_cast<DataPtr&&>(other); }
  DataPtr& operator=(DataPtr&& other) noexcept;
  DataPtr(const DataPtr&) = delete;
  DataPtr& operator=(const DataPtr&) = delete;
  ~DataPtr() { release(); }

  void* get() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }  // as requested (the allocator may have rounded up)
  MemoryTag tag() const { return tag_; }
  Allocator* owner() const { return owner_; }

 private:
  void release() noexcept;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  MemoryTag tag_ = MemoryTag::other;
  Allocator* owner_ = nullptr;
};

// One statistic, kept four ways (as PyTorch's allocator keeps them): its value now, its high-water
// mark since the last reset_peak(), and the running totals of what was added and taken away.
struct Stat {
  std::int64_t current = 0;
  std::int64_t peak = 0;
  std::int64_t allocated = 0;  // total ever added
  std::int64_t freed = 0;      // total ever taken away
  void increase(std::int64_t amount) {
    current += amount;
    allocated += amount;
    if (current > peak) peak = current;
  }
  void decrease(std::int64_t amount) {
    current -= amount;
    freed += amount;
  }
  void adjust(std::int64_t delta) { delta >= 0 ? increase(delta) : decrease(-delta); }
  void reset_peak() { peak = current; }
};

// What every allocator reports: sizes as callers asked for them, before any rounding. The caching
// allocator adds what it reserved and how (core/caching_allocator.h).
struct AllocatorStats {
  Stat requested_bytes;                           // live requested bytes
  Stat allocations;                               // live allocations (a count)
  std::array<Stat, kNumMemoryTags> tag_bytes{};   // requested bytes per MemoryTag
};

// Note [One lock per allocator]: an allocation or a free takes one lock, the allocator's own
// mutex_, and holds it across raw_allocate/raw_deallocate and the statistics below; an allocator
// guards its own state with the same mutex_. (Two locks, one for the memory and one for the
// statistics, cost two lock round trips per tensor, contended by every thread that makes tensors.)
class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory for `bytes` (an empty DataPtr for 0 bytes), tagged with this thread's tag. On
  // the host, Stream{} means host_allocation_stream() (Note [A thread's own host blocks]).
  // Throws OutOfMemoryError when the request cannot be met.
  DataPtr allocate(std::size_t bytes, Stream stream = {});
  virtual Device device() const = 0;
  virtual std::string_view name() const = 0;
  AllocatorStats stats() const;
  virtual void reset_peak_stats();

 protected:
  // Both run with mutex_ held (Note [One lock per allocator]).
  virtual void* raw_allocate(std::size_t bytes, Stream stream) = 0;
  virtual void raw_deallocate(void* ptr, std::size_t bytes) noexcept = 0;
  // The allocator's one lock: tensors are made and freed from loader and autograd threads too.
  mutable AdaptiveMutex mutex_;
  // The statistics, for a caller that holds mutex_ (an invariant checker comparing them with its blocks).
  const AllocatorStats& stats_while_locked() const { return stats_; }

 private:
  friend class DataPtr;
  void deallocate(void* ptr, std::size_t bytes, MemoryTag tag) noexcept;
  AllocatorStats stats_;  // under mutex_
};

}  // namespace frugal
