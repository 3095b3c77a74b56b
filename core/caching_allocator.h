// CachingAllocator: frugal's pooling allocator, the centre of its memory story. Device-agnostic
// policy (rounding, pools, best fit, splitting, merging, streams, retries, explained OOMs,
// statistics, snapshots, recording, and on every live block its tag, who made it and its number)
// over a Backing that supplies raw memory (core/backing.h).
// See docs/allocator.md for how a request travels through it.
//
// The default rules follow PyTorch's CUDACachingAllocator so the two can be compared; each constant
// below carries its reason. Going beyond it: expandable segments (one growing segment per stream and
// pool instead of many fixed ones), which avoid the slivers that fixed segments leave when shapes
// change.
// Not here: the backings themselves, the per-device registry (core/allocator_registry.h), trace
// replay (memory/alloc_trace.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <ostream>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/backing.h"

namespace frugal {

// ---- the rules, as named constants

// Every request is rounded up to a multiple of this: blocks stay aligned for any vector load, and
// tiny tensors do not each leave an odd-sized hole.
inline constexpr std::size_t kMinBlockSize = 512;
// Requests up to this size (after rounding) are "small" and share 2 MiB segments, so thousands of
// scalars and biases cost a handful of device calls.
inline constexpr std::size_t kSmallSize = 1 << 20;
// The segment size of the small pool.
inline constexpr std::size_t kSmallBuffer = 2 << 20;
// Requests above kSmallSize and below this get a kLargeBuffer segment, which several of them share.
inline constexpr std::size_t kMinLargeAlloc = 10 << 20;
// The segment size for requests between 1 and 10 MiB.
inline constexpr std::size_t kLargeBuffer = 20 << 20;
// Requests of 10 MiB or more get a segment of their own, rounded up to a multiple of this.
inline constexpr std::size_t kRoundLarge = 2 << 20;
// A free large block is split only when the remainder exceeds this: smaller remainders would be
// slivers that no large request can use; the whole block is handed out instead.
inline constexpr std::size_t kLargeSplitRemainder = 1 << 20;
// An oversize request (>= max_split_size) may take a cached block at most this much bigger, since
// such blocks are never split and the excess is wasted while the block lives.
inline constexpr std::size_t kMaxNonSplitRounding = 20 << 20;
// Expandable segments map physical memory in chunks of this size (CUDA's usual granularity).
inline constexpr std::size_t kExpandableChunk = 2 << 20;
// Larger requests are out of memory without further ado: no device holds 4 EiB, and keeping every
// size below this keeps sums and roundings far from overflowing.
inline constexpr std::size_t kMaxRequest = std::size_t{1} << 62;

struct CachingOptions {
  // Blocks at or above this size are never split and never handed to a smaller request
  // (kUnlimited: no such limit, PyTorch's default). At least kLargeBuffer (20 MiB), as in PyTorch.
  std::size_t max_split_size = kUnlimited;
  // One growing segment per stream and pool, mapped in kExpandableChunk steps. Falls back to fixed
  // segments when the backing cannot reserve address space.
  bool expandable_segments = true;
  // Bypass: every request goes straight to the backing and every free straight back (FRUGAL_ALLOC=
  // direct), so sanitizers and compute-sanitizer see each buffer. Statistics and OOMs still work.
  bool bypass = false;
  // Address space reserved per expandable segment when neither a capacity nor the device's size is
  // known (a simulated device without a limit).
  std::size_t expandable_reserve = std::size_t{64} << 30;

  // Reads FRUGAL_ALLOC (caching|direct) and FRUGAL_ALLOC_CONF ("expandable:on|off,max_split:SIZE").
  // Throws ValueError naming the variable on anything it does not understand.
  static CachingOptions from_environment();
};

// Bytes from text: "512", "4096B", "1.5KiB", "512MiB", "2GiB", "1GB" (powers of 1000 for kB/MB/GB,
// of 1024 for KiB/MiB/GiB). ValueError on anything else or on overflow.
std::size_t parse_size(std::string_view text);
std::string format_size(std::size_t bytes);  // "512 B", "2.00 MiB"

// Everything the allocator counts. Byte figures are the sizes of blocks (rounded), unlike
// Allocator::stats(), which counts what callers asked for.
struct CachingStats {
  Stat allocated_bytes;       // blocks handed out to callers
  Stat reserved_bytes;        // segments and mapped chunks held from the backing
  Stat active_bytes;          // allocated, plus freed blocks still waiting for other streams
  Stat inactive_split_bytes;  // free blocks inside segments that are split: cannot be returned
  Stat allocations;           // live blocks (count)
  Stat segments;              // live segments (count)
  std::int64_t num_ooms = 0;       // OutOfMemoryErrors thrown
  std::int64_t alloc_retries = 0;  // times the cache was emptied to retry a failed request
  std::int64_t backing_allocs = 0, backing_frees = 0, backing_maps = 0, backing_unmaps = 0;
  // Blocks looked at through the segments' block lists while allocating, freeing, growing and
  // trimming (reports and checks are not counted): a few per operation, never a walk of a whole
  // segment. A test holds it there.
  std::int64_t blocks_visited = 0;
};

// What an OOM observer is told, before the OutOfMemoryError is thrown.
struct OomReport {
  Device device;
  std::size_t requested = 0;      // as the caller asked
  std::size_t rounded = 0;        // after rounding to a block size
  std::size_t segment_bytes = 0;  // what the allocator tried to get from the backing
  std::size_t capacity = kUnlimited;
  std::size_t device_total = 0, device_free = 0;
  std::size_t allocated = 0, reserved = 0, largest_free_block = 0;
  bool fragmentation = false;  // enough bytes were cached, just not in one piece
  bool rounding = false;       // the request fits in what is free; the segment it was rounded to does not
  std::string message;
};

// One live block: what a report needs to say which tensor holds memory and who made it.
struct LiveBlock {
  std::uintptr_t address = 0;
  std::size_t size = 0;       // the block, after rounding
  std::size_t requested = 0;  // what the caller asked for
  MemoryTag tag = MemoryTag::other;
  MemoryContextId context = kNoMemoryContext;  // who made it (Note [Allocation contexts] in allocator.h)
  std::uint64_t serial = 0;   // its number: the n-th block this allocator handed out, from 1
};

// The live blocks and the totals they belong to, read under one lock, so they agree.
struct LiveBlocks {
  std::vector<LiveBlock> blocks;  // in no particular order
  std::size_t allocated = 0, reserved = 0, inactive_split = 0;  // the statistics' current values
};

// One recorded event (start_recording), in the order it happened.
struct AllocEvent {
  enum class Kind : std::uint8_t { alloc, free, segment_alloc, segment_free, map, unmap, oom };
  Kind kind;
  std::int64_t time_ns;  // since the allocator was created
  std::uintptr_t address;
  std::size_t bytes;      // block, segment or chunk size; for oom the rounded request
  std::size_t requested;  // alloc/free/oom: what the caller asked for
  Stream stream;
  MemoryTag tag;
  std::size_t allocated_total;  // allocated bytes after the event
  std::size_t reserved_total;   // reserved bytes after the event
};
std::string_view alloc_event_name(AllocEvent::Kind kind);

class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(std::unique_ptr<Backing> backing, CachingOptions options = {});
  ~CachingAllocator() override;

  Device device() const override { return backing_->device(); }
  std::string_view name() const override { return options_.bypass ? "direct" : "caching"; }
  Backing& backing() { return *backing_; }
  const CachingOptions& options() const { return options_; }

  // The block holding `ptr` is also used by work on `stream`: when it is freed, it is not reused
  // until that stream's work, recorded as an event at free time, is done.
  void record_stream(void* ptr, Stream stream);

  // Returns every cached segment that holds no live block (and unmaps the free tails of expandable
  // segments). Returns the bytes given back.
  std::size_t empty_cache();

  CachingStats caching_stats() const;
  void reset_peak_stats() override;
  std::string memory_summary() const;  // a readable table of every statistic
  // Every segment with its blocks: {"device", "capacity", "segments": [{"address", "size", "stream",
  // "pool", "expandable", "blocks": [{"offset", "size", "requested", "state", "tag", "context"}]}]}.
  nlohmann::json snapshot() const;
  // Every live block with its tag, context and number, for reports that say who holds what. A walk
  // of all of them: for reports, never per allocation.
  LiveBlocks live_blocks() const;
  // The number of the latest block handed out (0 before the first): blocks with a larger serial were
  // made after this call. Two reads of it bracket a stretch of work, such as a training step.
  std::uint64_t last_serial() const;

  // Observers run after the allocator's lock is released and before OutOfMemoryError is thrown;
  // they may inspect the allocator (snapshot, live_blocks, summary) but must not allocate from it.
  // add_oom_observer returns a handle for remove_oom_observer.
  std::size_t add_oom_observer(std::function<void(const OomReport&)> observer);
  void remove_oom_observer(std::size_t handle);

  // Recording into a ring buffer of the last `max_events` events (0 stops and clears).
  void record_history(std::size_t max_events);
  std::vector<AllocEvent> history() const;
  // Events recorded so far, up to max_events: an index into history() for marking where a phase starts.
  std::size_t history_size() const;
  // Now, on the clock of AllocEvent::time_ns, so that marks kept beside the history (phases, layers)
  // can be placed among its events.
  std::int64_t history_time_ns() const;
  // The history as a replayable trace ("+ ID BYTES STREAM TAG" / "- ID", see memory/alloc_trace.h),
  // and as Chrome trace-event JSON that Perfetto and chrome://tracing open.
  void write_trace(std::ostream& out) const;
  void write_chrome_trace(std::ostream& out) const;

  // Checks every internal invariant (blocks tile their segments, neighbours are merged, statistics
  // equal the sums they summarise); throws Error naming the first one broken. For tests.
  void check_invariants() const;

 protected:
  void* raw_allocate(std::size_t bytes, Stream stream) override;
  void raw_deallocate(void* ptr, std::size_t bytes) noexcept override;

 private:
  struct Block;
  struct Segment;
  struct Pool;
  struct BlockOrder {
    bool operator()(const Block* a, const Block* b) const;
  };

  Block* allocate_block(std::size_t requested, Stream stream, MemoryTag tag, MemoryContextId context);
  void free_now(void* ptr, std::size_t bytes);
  Block* find_free_block(Pool& pool, std::size_t size, Stream stream);
  Block* grow(Pool& pool, std::size_t size, Stream stream);
  std::size_t wait_for_pending();  // waits for every pending block's events; returns the blocks freed
  Block* new_fixed_segment(Pool& pool, std::size_t size, Stream stream);
  Block* extend_expandable(Pool& pool, std::size_t size, Stream stream);
  Block* take(Block* block, std::size_t size, std::size_t requested, MemoryTag tag, MemoryContextId context);
  void free_block(Block* block);
  void release_to_pool(Block* block);
  void process_events();
  std::size_t release_cached();
  void release_segment(Segment* segment);
  void trim_expandable(Segment* segment);
  void record(AllocEvent::Kind kind, std::uintptr_t address, std::size_t bytes, std::size_t requested,
              Stream stream, MemoryTag tag);
  OomReport describe_oom(std::size_t requested, std::size_t rounded, std::size_t segment_bytes) const;
  std::size_t largest_free_block() const;
  Pool& pool_for(std::size_t rounded);

  std::unique_ptr<Backing> backing_;
  CachingOptions options_;
  // Everything below is guarded by Allocator::mutex_, the one lock (Note [One lock per allocator]).
  std::vector<std::unique_ptr<Segment>> segments_;
  std::unique_ptr<Pool> small_pool_, large_pool_;
  std::unordered_map<void*, Block*> live_;  // handed-out blocks by address (a hash: freeing is hot)
  std::vector<Block*> pending_;   // freed, waiting for events
  CachingStats stats_;
  std::vector<std::pair<std::size_t, std::function<void(const OomReport&)>>> oom_observers_;  // with handles
  std::size_t next_observer_ = 1;
  std::vector<AllocEvent> history_;  // ring buffer
  std::size_t history_capacity_ = 0, history_next_ = 0;
  std::chrono::steady_clock::time_point created_ = std::chrono::steady_clock::now();
};

// Rounds a request to the size of the block that serves it (a multiple of kMinBlockSize).
std::size_t round_block_size(std::size_t requested);
// The segment size a fixed-segment pool asks the backing for, for a block of `rounded` bytes.
std::size_t segment_size_for(std::size_t rounded);

}  // namespace frugal
