// CachingAllocator (see caching_allocator.h and docs/allocator.md).
//
// Note [Blocks and segments]: a segment is one piece of memory from the backing (a fixed segment)
// or one reserved address range whose prefix is mapped (an expandable segment). Its blocks tile it
// exactly, in address order, as a doubly linked list. A block is allocated (handed to a caller),
// pending (freed, but other streams may still use it) or free (in its pool's best-fit set). Two
// free neighbours never coexist: freeing merges them. Splitting and merging only ever touch blocks
// of one segment, so a segment is returned to the backing when it is one free block again.
#include "core/caching_allocator.h"

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace frugal {

// ---- sizes

std::size_t round_block_size(std::size_t requested) {
  if (requested < kMinBlockSize) return kMinBlockSize;
  FRUGAL_CHECK_VALUE(requested <= kUnlimited - kMinBlockSize, "allocation of ", requested, " bytes overflows");
  return (requested + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

std::size_t segment_size_for(std::size_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  FRUGAL_CHECK_VALUE(rounded <= kUnlimited - kRoundLarge, "allocation of ", rounded, " bytes overflows");
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

namespace {
std::size_t round_up(std::size_t value, std::size_t multiple) { return (value + multiple - 1) / multiple * multiple; }
std::uintptr_t stream_id(Stream stream) { return reinterpret_cast<std::uintptr_t>(stream.handle); }
std::int64_t as_signed(std::size_t bytes) { return static_cast<std::int64_t>(bytes); }
}  // namespace

std::string format_size(std::size_t bytes) {
  if (bytes == kUnlimited) return "unlimited";
  constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = static_cast<double>(bytes);
  int unit = -1;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.2f %s", value, kUnits[unit]);
  return text;
}

std::size_t parse_size(std::string_view text) {
  const std::string original(text);
  std::size_t digits = 0;
  while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.')) ++digits;
  FRUGAL_CHECK_VALUE(digits > 0, "invalid size '", original, "': expected a number with an optional unit (512MiB, 2GiB)");
  const std::string number(text.substr(0, digits));
  const std::string_view unit = text.substr(digits);
  struct Unit {
    std::string_view name;
    double scale;
  };
  constexpr Unit kUnits[] = {{"", 1},         {"B", 1},         {"K", 1024},      {"KiB", 1024},
                             {"kB", 1e3},     {"KB", 1e3},      {"M", 1 << 20},   {"MiB", 1 << 20},
                             {"MB", 1e6},     {"G", 1 << 30},   {"GiB", 1 << 30}, {"GB", 1e9},
                             {"T", 1ull << 40}, {"TiB", 1ull << 40}, {"TB", 1e12}};
  const Unit* found = nullptr;
  for (const Unit& u : kUnits)
    if (u.name == unit) found = &u;
  FRUGAL_CHECK_VALUE(found, "invalid size '", original, "': unknown unit '", unit, "' (use B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)");
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  FRUGAL_CHECK_VALUE(end == number.c_str() + number.size() && std::isfinite(value), "invalid size '", original, "'");
  const double bytes = value * found->scale;
  // 2^64 is exactly representable; anything at or above it does not fit in size_t.
  FRUGAL_CHECK_VALUE(bytes < 18446744073709551616.0, "size '", original, "' is too large");
  FRUGAL_CHECK_VALUE(bytes == std::floor(bytes), "size '", original, "' is not a whole number of bytes");
  return static_cast<std::size_t>(bytes);
}

CachingOptions CachingOptions::from_environment() {
  CachingOptions options;
  if (const char* mode = std::getenv("FRUGAL_ALLOC")) {
    const std::string_view value = mode;
    FRUGAL_CHECK_VALUE(value == "caching" || value == "direct", "FRUGAL_ALLOC='", value,
                       "' is not understood: expected caching or direct");
    options.bypass = value == "direct";
  }
  if (const char* conf = std::getenv("FRUGAL_ALLOC_CONF")) {
    std::stringstream items(conf);
    std::string item;
    while (std::getline(items, item, ',')) {
      if (item.empty()) continue;
      const auto colon = item.find(':');
      FRUGAL_CHECK_VALUE(colon != std::string::npos, "FRUGAL_ALLOC_CONF item '", item, "' is not key:value");
      const std::string key = item.substr(0, colon), value = item.substr(colon + 1);
      if (key == "expandable") {
        FRUGAL_CHECK_VALUE(value == "on" || value == "off", "FRUGAL_ALLOC_CONF expandable:", value, ": expected on or off");
        options.expandable_segments = value == "on";
      } else if (key == "max_split") {
        options.max_split_size = value == "none" ? kUnlimited : parse_size(value);
      } else {
        FRUGAL_THROW(ValueError, "FRUGAL_ALLOC_CONF: unknown key '", key, "' (known: expandable, max_split)");
      }
    }
  }
  return options;
}

std::string_view alloc_event_name(AllocEvent::Kind kind) {
  switch (kind) {
    case AllocEvent::Kind::alloc: return "alloc";
    case AllocEvent::Kind::free: return "free";
    case AllocEvent::Kind::segment_alloc: return "segment_alloc";
    case AllocEvent::Kind::segment_free: return "segment_free";
    case AllocEvent::Kind::map: return "map";
    case AllocEvent::Kind::unmap: return "unmap";
    case AllocEvent::Kind::oom: return "oom";
  }
  return "?";
}

// ---- the structures (Note [Blocks and segments])

enum class BlockState : std::uint8_t { allocated, pending, free };

struct CachingAllocator::Block {
  char* ptr = nullptr;
  std::size_t size = 0;
  std::size_t requested = 0;  // while allocated: what the caller asked for
  Stream stream;              // the stream it was allocated on; reused only for that stream
  Segment* segment = nullptr;
  Block* prev = nullptr;  // neighbours in address order within the segment
  Block* next = nullptr;
  BlockState state = BlockState::free;
  MemoryTag tag = MemoryTag::other;
  MemoryContextId context = kNoMemoryContext;  // while allocated: who made it
  std::uint64_t serial = 0;                     // while allocated: its number (LiveBlock::serial)
  std::vector<Stream> stream_uses;         // other streams using it (record_stream)
  std::vector<Backing::Event> events;      // recorded at free, one per stream use
};

struct CachingAllocator::Segment {
  char* base = nullptr;
  std::size_t size = 0;      // bytes held from the backing (for expandable: mapped)
  std::size_t reserved = 0;  // expandable only: the address space reserved
  bool expandable = false;
  Pool* pool = nullptr;
  Stream stream;
  Block* first = nullptr;
  Block* last = nullptr;  // kept, not searched: expandable segments grow and trim at their end
  std::size_t num_blocks = 0;
  std::size_t free_bytes = 0;  // sizes of its free blocks
  std::int64_t inactive_split() const { return num_blocks > 1 ? as_signed(free_bytes) : 0; }
};

struct CachingAllocator::Pool {
  bool small = false;
  std::set<Block*, BlockOrder> free_blocks;
  std::map<std::uintptr_t, Segment*> expandable;  // by stream
};

namespace {
template <typename Block, typename Segment>
Block* new_block(char* ptr, std::size_t size, Stream stream, Segment* segment) {
  auto* block = new Block;
  block->ptr = ptr;
  block->size = size;
  block->stream = stream;
  block->segment = segment;
  return block;
}
}  // namespace

// Best fit: free blocks ordered by (stream, size, address), so lower_bound finds the smallest block
// of the right stream that is large enough, and ties go to the lowest address (deterministic).
bool CachingAllocator::BlockOrder::operator()(const Block* a, const Block* b) const {
  if (stream_id(a->stream) != stream_id(b->stream)) return stream_id(a->stream) < stream_id(b->stream);
  if (a->size != b->size) return a->size < b->size;
  return a->ptr < b->ptr;
}

// ---- construction

CachingAllocator::CachingAllocator(std::unique_ptr<Backing> backing, CachingOptions options)
    : backing_(std::move(backing)), options_(options), small_pool_(new Pool), large_pool_(new Pool) {
  FRUGAL_CHECK_VALUE(backing_ != nullptr, "CachingAllocator needs a backing");
  // PyTorch's floor, for the same reason: at or below it, the 20 MiB segments of 1-10 MiB requests
  // would count as oversize and never be shared.
  FRUGAL_CHECK_VALUE(options_.max_split_size > kLargeBuffer, "max_split_size must be above ",
                     format_size(kLargeBuffer), ", got ", format_size(options_.max_split_size));
  small_pool_->small = true;
}

CachingAllocator::~CachingAllocator() {
  // Anything still allocated would point into memory given back here: the allocator must outlive
  // its allocations (the per-device ones live until the process ends). Bypass blocks first: the
  // loop below deletes the blocks of segments, which live_ also points to.
  for (auto& [ptr, block] : live_)
    if (!block->segment) {
      backing_->free(ptr, block->size);
      delete block;
    }
  for (auto& segment : segments_) {
    for (Block* block = segment->first; block;) {
      for (Backing::Event event : block->events) backing_->destroy_event(event);
      Block* next = block->next;
      delete block;
      block = next;
    }
    if (segment->expandable) {
      if (segment->size) backing_->unmap(segment->base, segment->size);
      backing_->release(segment->base, segment->reserved);
    } else {
      backing_->free(segment->base, segment->size);
    }
  }
}

CachingAllocator::Pool& CachingAllocator::pool_for(std::size_t rounded) {
  return rounded <= kSmallSize ? *small_pool_ : *large_pool_;
}

// ---- allocation

namespace {
// Releases a lock the caller holds for its lifetime, and takes it again after, also when an
// exception leaves the scope.
class Unlocked {
 public:
  explicit Unlocked(AdaptiveMutex& mutex) : mutex_(mutex) { mutex_.unlock(); }
  ~Unlocked() { mutex_.lock(); }
  Unlocked(const Unlocked&) = delete;
  Unlocked& operator=(const Unlocked&) = delete;

 private:
  AdaptiveMutex& mutex_;
};
}  // namespace

// Runs with mutex_ held (Note [One lock per allocator]).
void* CachingAllocator::raw_allocate(std::size_t bytes, Stream stream) {
  const MemoryTag tag = current_memory_tag();
  Block* block = bytes <= kMaxRequest ? allocate_block(bytes, stream, tag, current_memory_context()) : nullptr;
  if (block) return block->ptr;
  // Out of memory. Observers run without the lock, so they may take snapshots.
  const std::size_t rounded = options_.bypass || bytes > kMaxRequest ? bytes : round_block_size(bytes);
  const bool expandable = options_.expandable_segments && backing_->supports_expandable() && !options_.bypass;
  const std::size_t asked_of_backing = options_.bypass || bytes > kMaxRequest ? rounded
                                       : expandable     ? round_up(rounded, backing_->map_granularity())
                                                        : segment_size_for(rounded);
  const OomReport report = describe_oom(bytes, rounded, asked_of_backing);
  stats_.num_ooms += 1;
  record(AllocEvent::Kind::oom, 0, rounded, bytes, stream, tag);
  const auto observers = oom_observers_;
  {
    const Unlocked unlocked(mutex_);
    for (const auto& entry : observers) entry.second(report);
  }
  FRUGAL_THROW(OutOfMemoryError, report.message);
}

CachingAllocator::Block* CachingAllocator::allocate_block(std::size_t requested, Stream stream, MemoryTag tag,
                                                          MemoryContextId context) {
  if (options_.bypass) {
    void* ptr = backing_->allocate(requested, stream);
    if (!ptr) return nullptr;
    stats_.backing_allocs += 1;
    stats_.reserved_bytes.increase(as_signed(requested));
    stats_.segments.increase(1);
    auto* block = new_block<Block, Segment>(static_cast<char*>(ptr), requested, stream, nullptr);
    return take(block, requested, requested, tag, context);
  }
  process_events();
  const std::size_t rounded = round_block_size(requested);
  Pool& pool = pool_for(rounded);
  Block* block = find_free_block(pool, rounded, stream);
  if (!block) block = grow(pool, rounded, stream);
  // The OOM ladder. First wait for the blocks still held for other streams' work (a loader's batches
  // freed while the kernels reading them run): they may be all that is missing.
  if (!block && wait_for_pending() > 0) {
    block = find_free_block(pool, rounded, stream);
    if (!block) block = grow(pool, rounded, stream);
  }
  if (!block && release_cached() > 0) {  // then give the cache back, and try once more
    stats_.alloc_retries += 1;
    block = grow(pool, rounded, stream);
  }
  return block ? take(block, rounded, requested, tag, context) : nullptr;
}

CachingAllocator::Block* CachingAllocator::find_free_block(Pool& pool, std::size_t size, Stream stream) {
  Block key;
  key.stream = stream;
  key.size = size;
  auto found = pool.free_blocks.lower_bound(&key);
  if (found == pool.free_blocks.end() || stream_id((*found)->stream) != stream_id(stream)) return nullptr;
  Block* block = *found;
  // max_split, for blocks of large fixed segments, the only ones take() does not always split:
  // oversize blocks are never handed to smaller requests, and an oversize request takes an
  // oversize block only if the waste stays under kMaxNonSplitRounding. (Small-pool and expandable
  // blocks are split to the request whatever their size, so the rule would only strand them.)
  const std::size_t max_split = options_.max_split_size;
  const bool whole_block_rules = !pool.small && !block->segment->expandable;
  if (whole_block_rules && size < max_split && block->size >= max_split) return nullptr;
  if (whole_block_rules && size >= max_split && block->size - size >= kMaxNonSplitRounding) return nullptr;
  pool.free_blocks.erase(found);
  Segment* segment = block->segment;
  const std::int64_t inactive_before = segment->inactive_split();
  segment->free_bytes -= block->size;  // no longer free; take() decides what part becomes free again
  stats_.inactive_split_bytes.adjust(segment->inactive_split() - inactive_before);
  return block;
}

CachingAllocator::Block* CachingAllocator::grow(Pool& pool, std::size_t size, Stream stream) {
  if (options_.expandable_segments && backing_->supports_expandable()) {
    if (Block* block = extend_expandable(pool, size, stream)) return block;
    // No address space left to grow into, or no memory: a fixed segment is the last resort (over
    // the capacity it is refused before the device is asked, so trying costs nothing).
  }
  return new_fixed_segment(pool, size, stream);
}

CachingAllocator::Block* CachingAllocator::new_fixed_segment(Pool& pool, std::size_t size, Stream stream) {
  const std::size_t segment_bytes = pool.small ? kSmallBuffer : segment_size_for(size);
  void* base = backing_->allocate(segment_bytes, stream);
  if (!base) return nullptr;
  stats_.backing_allocs += 1;
  stats_.reserved_bytes.increase(as_signed(segment_bytes));
  stats_.segments.increase(1);
  auto segment = std::make_unique<Segment>();
  segment->base = static_cast<char*>(base);
  segment->size = segment_bytes;
  segment->pool = &pool;
  segment->stream = stream;
  auto* block = new_block<Block>(segment->base, segment_bytes, stream, segment.get());
  segment->first = segment->last = block;
  segment->num_blocks = 1;
  record(AllocEvent::Kind::segment_alloc, reinterpret_cast<std::uintptr_t>(base), segment_bytes, 0, stream,
         current_memory_tag());
  segments_.push_back(std::move(segment));
  return block;
}

// Grows the stream's expandable segment at its end until its last block can hold `size`, merging
// with a free last block. Returns that block, out of the free set, or nullptr.
CachingAllocator::Block* CachingAllocator::extend_expandable(Pool& pool, std::size_t size, Stream stream) {
  Segment*& segment = pool.expandable[stream_id(stream)];
  if (!segment) {
    // The capacity is checked before the first backing call, the reservation included.
    const std::size_t capacity = backing_->capacity(), total = backing_->memory_info().total;
    if (capacity != kUnlimited && size > capacity - std::min(capacity, backing_->held_bytes())) {
      pool.expandable.erase(stream_id(stream));
      return nullptr;
    }
    // Address space for everything the device could ever hold: at least the fixed default, the
    // capacity, and 1 1/8 of the device's memory (PyTorch's choice, leaving room for alignment), so
    // a limit raised later still fits. Reserving address space costs no memory.
    std::size_t wanted = options_.expandable_reserve;
    if (capacity != kUnlimited) wanted = std::max(wanted, capacity);
    if (total != kUnlimited && total < kUnlimited / 2) wanted = std::max(wanted, total + total / 8);
    const std::size_t reserve = round_up(wanted, backing_->map_granularity());
    void* base = backing_->reserve(reserve);
    if (!base) {
      pool.expandable.erase(stream_id(stream));
      return nullptr;
    }
    auto owned = std::make_unique<Segment>();
    owned->base = static_cast<char*>(base);
    owned->reserved = reserve;
    owned->expandable = true;
    owned->pool = &pool;
    owned->stream = stream;
    segment = owned.get();
    segments_.push_back(std::move(owned));
    stats_.segments.increase(1);
  }
  Block* tail = segment->last;
  stats_.blocks_visited += tail ? 1 : 0;
  const bool tail_free = tail && tail->state == BlockState::free;
  const std::size_t have = tail_free ? tail->size : 0;
  // A free tail already large enough was refused by best fit (max_split): growing cannot help.
  if (have >= size || size - have > segment->reserved - segment->size) return nullptr;  // or no address space left
  const std::size_t map_bytes = round_up(size - have, backing_->map_granularity());
  if (map_bytes > segment->reserved - segment->size) return nullptr;
  char* at = segment->base + segment->size;
  const std::int64_t inactive_before = segment->inactive_split();
  if (!backing_->map(at, map_bytes)) return nullptr;
  stats_.backing_maps += 1;
  stats_.reserved_bytes.increase(as_signed(map_bytes));
  segment->size += map_bytes;
  record(AllocEvent::Kind::map, reinterpret_cast<std::uintptr_t>(at), map_bytes, 0, stream, current_memory_tag());
  Block* block = tail;
  if (tail_free) {
    pool.free_blocks.erase(tail);
    segment->free_bytes -= tail->size;
    tail->size += map_bytes;
  } else {
    block = new_block<Block>(at, map_bytes, stream, segment);
    block->prev = tail;
    if (tail)
      tail->next = block;
    else
      segment->first = block;
    segment->last = block;
    segment->num_blocks += 1;
  }
  stats_.inactive_split_bytes.adjust(segment->inactive_split() - inactive_before);
  return block;
}

// Hands out the first `size` bytes of `block`, splitting off the rest when it is worth keeping
// (Note [Blocks and segments]). The block is already out of the free set and out of its segment's
// free bytes: every path that produces one (find_free_block, extend_expandable, new_fixed_segment)
// leaves it so.
CachingAllocator::Block* CachingAllocator::take(Block* block, std::size_t size, std::size_t requested, MemoryTag tag,
                                                MemoryContextId context) {
  Segment* segment = block->segment;
  if (segment) {
    const std::int64_t inactive_before = segment->inactive_split();
    const std::size_t remaining = block->size - size;
    // Small pool and expandable segments: any remainder of a whole block is worth keeping (in an
    // expandable segment a tail remainder merges into the next growth). Large fixed segments:
    // only remainders over 1 MiB, and only for requests below max_split_size (PyTorch's rule: an
    // oversize request takes its block whole).
    const bool split = (segment->pool->small || segment->expandable)
                           ? remaining >= kMinBlockSize
                           : size < options_.max_split_size && remaining > kLargeSplitRemainder;
    if (split) {
      auto* rest = new_block<Block>(block->ptr + size, remaining, block->stream, segment);
      rest->prev = block;
      rest->next = block->next;
      if (block->next)
        block->next->prev = rest;
      else
        segment->last = rest;
      block->next = rest;
      block->size = size;
      segment->num_blocks += 1;
      segment->free_bytes += remaining;
      segment->pool->free_blocks.insert(rest);
    }
    stats_.inactive_split_bytes.adjust(segment->inactive_split() - inactive_before);
  }
  block->state = BlockState::allocated;
  block->requested = requested;
  block->tag = tag;
  block->context = context;
  stats_.allocated_bytes.increase(as_signed(block->size));
  stats_.active_bytes.increase(as_signed(block->size));
  stats_.allocations.increase(1);
  block->serial = static_cast<std::uint64_t>(stats_.allocations.allocated);  // the count so far numbers it
  live_[block->ptr] = block;
  record(AllocEvent::Kind::alloc, reinterpret_cast<std::uintptr_t>(block->ptr), block->size, requested, block->stream, tag);
  return block;
}

// ---- freeing

// Runs with mutex_ held, as raw_allocate does.
void CachingAllocator::raw_deallocate(void* ptr, std::size_t bytes) noexcept {
  // Frees run in destructors and cannot throw. A device call failing here means the device is
  // already broken (a sticky CUDA error); say so and carry on rather than terminate.
  try {
    free_now(ptr, bytes);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "frugal: freeing %p failed: %s\n", ptr, error.what());
  }
}

void CachingAllocator::free_now(void* ptr, std::size_t) {
  auto found = live_.find(ptr);
  if (found == live_.end()) return;  // not ours: DataPtr only hands back what we gave
  Block* block = found->second;
  live_.erase(found);
  stats_.allocated_bytes.decrease(as_signed(block->size));
  stats_.allocations.decrease(1);
  record(AllocEvent::Kind::free, reinterpret_cast<std::uintptr_t>(block->ptr), block->size, block->requested,
         block->stream, block->tag);
  if (!block->segment) {  // bypass: straight back to the backing
    stats_.active_bytes.decrease(as_signed(block->size));
    stats_.reserved_bytes.decrease(as_signed(block->size));
    stats_.segments.decrease(1);
    stats_.backing_frees += 1;
    backing_->free(block->ptr, block->size);
    delete block;
    return;
  }
  free_block(block);
}

void CachingAllocator::free_block(Block* block) {
  if (block->stream_uses.empty()) {
    release_to_pool(block);
    return;
  }
  // Other streams may still read or write it: remember where they are now, and wait for that.
  for (Stream use : block->stream_uses) block->events.push_back(backing_->record_event(use));
  block->stream_uses.clear();
  block->state = BlockState::pending;
  pending_.push_back(block);
}

std::size_t CachingAllocator::wait_for_pending() {
  const std::size_t waiting = pending_.size();
  for (Block* block : pending_)
    for (Backing::Event event : block->events) backing_->wait_event(event);
  process_events();
  return waiting - pending_.size();
}

void CachingAllocator::process_events() {
  // One block at a time, out of pending_ and into its pool before its events are destroyed: if the
  // device fails (event_done or destroy_event throws), every block is still in exactly one place.
  for (auto it = pending_.begin(); it != pending_.end();) {
    Block* block = *it;
    const bool done = std::all_of(block->events.begin(), block->events.end(),
                                  [&](Backing::Event event) { return backing_->event_done(event); });
    if (!done) {
      ++it;
      continue;
    }
    it = pending_.erase(it);
    const std::vector<Backing::Event> events = std::move(block->events);
    block->events.clear();
    release_to_pool(block);
    for (Backing::Event event : events) backing_->destroy_event(event);
  }
}

// A freed block (no stream still using it) returns to its pool, merged with free neighbours.
void CachingAllocator::release_to_pool(Block* block) {
  Segment* segment = block->segment;
  Pool& pool = *segment->pool;
  const std::int64_t inactive_before = segment->inactive_split();
  stats_.active_bytes.decrease(as_signed(block->size));
  block->state = BlockState::free;
  block->requested = 0;
  segment->free_bytes += block->size;
  for (Block* neighbour : {block->prev, block->next}) {
    if (!neighbour) continue;
    stats_.blocks_visited += 1;
    if (neighbour->state != BlockState::free) continue;
    pool.free_blocks.erase(neighbour);
    Block* lower = neighbour == block->prev ? neighbour : block;  // keep the lower block, absorb the higher one
    Block* higher = lower == block ? neighbour : block;
    lower->size += higher->size;
    lower->next = higher->next;
    if (higher->next)
      higher->next->prev = lower;
    else
      segment->last = lower;
    delete higher;
    block = lower;
    segment->num_blocks -= 1;
  }
  pool.free_blocks.insert(block);
  stats_.inactive_split_bytes.adjust(segment->inactive_split() - inactive_before);
}

void CachingAllocator::record_stream(void* ptr, Stream stream) {
  std::lock_guard lock(mutex_);
  auto found = live_.find(ptr);
  FRUGAL_CHECK_VALUE(found != live_.end(), "record_stream: ", ptr, " is not a live allocation of this allocator");
  Block* block = found->second;
  if (stream_id(stream) == stream_id(block->stream) || !block->segment) return;  // its own stream orders itself
  if (std::find(block->stream_uses.begin(), block->stream_uses.end(), stream) == block->stream_uses.end())
    block->stream_uses.push_back(stream);
}

// ---- giving memory back

std::size_t CachingAllocator::empty_cache() {
  std::lock_guard lock(mutex_);
  process_events();
  return release_cached();
}

std::size_t CachingAllocator::release_cached() {
  const std::size_t before = static_cast<std::size_t>(stats_.reserved_bytes.current);
  std::vector<Segment*> candidates;
  for (auto& segment : segments_) candidates.push_back(segment.get());
  for (Segment* segment : candidates) {
    if (segment->expandable)
      trim_expandable(segment);
    else if (segment->num_blocks == 1 && segment->first->state == BlockState::free)
      release_segment(segment);
  }
  return before - static_cast<std::size_t>(stats_.reserved_bytes.current);
}

void CachingAllocator::release_segment(Segment* segment) {
  Block* block = segment->first;
  segment->pool->free_blocks.erase(block);
  backing_->free(segment->base, segment->size);
  stats_.backing_frees += 1;
  stats_.reserved_bytes.decrease(as_signed(segment->size));
  stats_.segments.decrease(1);
  record(AllocEvent::Kind::segment_free, reinterpret_cast<std::uintptr_t>(segment->base), segment->size, 0,
         segment->stream, MemoryTag::other);
  delete block;
  std::erase_if(segments_, [segment](const auto& owned) { return owned.get() == segment; });
}

// Unmaps the free tail of an expandable segment, from the first granule boundary inside the free
// last block to the end; a segment that becomes empty gives its address space back too.
void CachingAllocator::trim_expandable(Segment* segment) {
  Block* tail = segment->last;
  stats_.blocks_visited += tail ? 1 : 0;
  if (tail && tail->state == BlockState::free) {
    const std::size_t granularity = backing_->map_granularity();
    const std::size_t keep = round_up(static_cast<std::size_t>(tail->ptr - segment->base), granularity);
    if (keep < segment->size) {
      const std::int64_t inactive_before = segment->inactive_split();
      const std::size_t unmap_bytes = segment->size - keep;
      backing_->unmap(segment->base + keep, unmap_bytes);
      stats_.backing_unmaps += 1;
      stats_.reserved_bytes.decrease(as_signed(unmap_bytes));
      record(AllocEvent::Kind::unmap, reinterpret_cast<std::uintptr_t>(segment->base + keep), unmap_bytes, 0,
             segment->stream, MemoryTag::other);
      segment->size = keep;
      segment->pool->free_blocks.erase(tail);
      segment->free_bytes -= unmap_bytes;
      tail->size -= unmap_bytes;
      if (tail->size == 0) {
        if (tail->prev)
          tail->prev->next = nullptr;
        else
          segment->first = nullptr;
        segment->last = tail->prev;
        segment->num_blocks -= 1;
        delete tail;
      } else {
        segment->pool->free_blocks.insert(tail);
      }
      stats_.inactive_split_bytes.adjust(segment->inactive_split() - inactive_before);
    }
  }
  if (segment->size == 0) {
    backing_->release(segment->base, segment->reserved);
    stats_.segments.decrease(1);
    segment->pool->expandable.erase(stream_id(segment->stream));
    std::erase_if(segments_, [segment](const auto& owned) { return owned.get() == segment; });
  }
}

// ---- out of memory

std::size_t CachingAllocator::largest_free_block() const {
  std::size_t largest = 0;
  for (const Pool* pool : {small_pool_.get(), large_pool_.get()})
    for (const Block* block : pool->free_blocks) largest = std::max(largest, block->size);
  return largest;
}

OomReport CachingAllocator::describe_oom(std::size_t requested, std::size_t rounded, std::size_t segment_bytes) const {
  OomReport r;
  r.device = device();
  r.requested = requested;
  r.rounded = rounded;
  r.segment_bytes = segment_bytes;
  r.capacity = backing_->capacity();
  const Backing::MemoryInfo memory = backing_->memory_info();
  r.device_total = memory.total;
  r.device_free = memory.free;
  r.allocated = static_cast<std::size_t>(stats_.allocated_bytes.current);
  r.reserved = static_cast<std::size_t>(stats_.reserved_bytes.current);
  r.largest_free_block = largest_free_block();
  const std::size_t cached = r.reserved - r.allocated;
  // Fragmentation: the bytes are there, in the cache, just not in one piece big enough.
  r.fragmentation = cached >= rounded;
  // Rounding: the request fits in what is free, but the segment or chunks it is rounded up to
  // do not (a 3 MiB tensor on an empty 8 MiB device, served from a 20 MiB segment).
  r.rounding = !r.fragmentation && rounded <= r.device_free && segment_bytes > r.device_free;
  std::ostringstream m;
  m << "out of memory on " << r.device << " (" << backing_->name() << " backing): tried to allocate "
    << format_size(rounded) << " (asked " << requested << " bytes, a " << format_size(segment_bytes)
    << " request to the backing). ";
  m << "Device total " << format_size(r.device_total);
  if (r.capacity != kUnlimited) m << " (capacity limit " << format_size(r.capacity) << ")";
  m << ", free " << format_size(r.device_free) << "; allocated " << format_size(r.allocated)
    << ", reserved but unallocated " << format_size(cached) << ", largest free block "
    << format_size(r.largest_free_block) << ". ";
  const bool expandable = options_.expandable_segments && backing_->supports_expandable();
  if (r.fragmentation) {
    m << "Hint: fragmentation: " << format_size(cached) << " is cached but in pieces smaller than the request; ";
    if (!expandable) m << "enable expandable segments (FRUGAL_ALLOC_CONF=expandable:on), ";
    m << "set max_split (FRUGAL_ALLOC_CONF=max_split:SIZE) so large blocks are not carved up, or call "
         "empty_cache() between phases whose shapes differ.";
  } else if (r.rounding) {
    m << "Hint: rounding: the request (" << format_size(rounded) << ") fits in the " << format_size(r.device_free)
      << " free, but ";
    if (expandable)
      m << "expandable segments map whole " << format_size(backing_->map_granularity()) << " chunks, "
        << format_size(segment_bytes) << " for it, which does not; ";
    else
      m << "fixed segments round it up to a " << format_size(segment_bytes) << " segment, which does not; ";
    const bool suggest_expandable = !expandable && backing_->supports_expandable();
    if (suggest_expandable)
      m << "enable expandable segments (FRUGAL_ALLOC_CONF=expandable:on), which map "
        << format_size(backing_->map_granularity()) << " chunks instead, or ";
    if (r.capacity != kUnlimited)
      m << "raise the memory limit to at least " << format_size(r.capacity + (segment_bytes - r.device_free)) << ".";
    else
      m << "free " << format_size(segment_bytes - r.device_free) << " more on the device.";
  } else {
    m << "Hint: a real shortage: even with every cached byte given back the request does not fit; use a "
         "smaller batch (with gradient accumulation to keep the effective batch), activation checkpointing, "
         "mixed precision, or a larger memory limit.";
  }
  r.message = m.str();
  return r;
}

std::size_t CachingAllocator::add_oom_observer(std::function<void(const OomReport&)> observer) {
  std::lock_guard lock(mutex_);
  oom_observers_.emplace_back(next_observer_, std::move(observer));
  return next_observer_++;
}

void CachingAllocator::remove_oom_observer(std::size_t handle) {
  std::lock_guard lock(mutex_);
  std::erase_if(oom_observers_, [handle](const auto& entry) { return entry.first == handle; });
}

// ---- statistics and reports

CachingStats CachingAllocator::caching_stats() const {
  std::lock_guard lock(mutex_);
  CachingStats copy = stats_;
  const Backing::Counters calls = backing_->counters();
  copy.backing_allocs = calls.allocs;
  copy.backing_frees = calls.frees;
  copy.backing_maps = calls.maps;
  copy.backing_unmaps = calls.unmaps;
  return copy;
}

void CachingAllocator::reset_peak_stats() {
  Allocator::reset_peak_stats();
  std::lock_guard lock(mutex_);
  for (Stat* stat : {&stats_.allocated_bytes, &stats_.reserved_bytes, &stats_.active_bytes,
                     &stats_.inactive_split_bytes, &stats_.allocations, &stats_.segments})
    stat->reset_peak();
}

std::string CachingAllocator::memory_summary() const {
  const CachingStats s = caching_stats();
  const AllocatorStats asked = stats();
  std::ostringstream out;
  char line[160];
  auto row = [&](const char* name, const Stat& stat, bool bytes) {
    auto cell = [bytes](std::int64_t v) { return bytes ? format_size(static_cast<std::size_t>(v)) : std::to_string(v); };
    std::snprintf(line, sizeof line, "| %-26s | %12s | %12s | %12s | %12s |\n", name, cell(stat.current).c_str(),
                  cell(stat.peak).c_str(), cell(stat.allocated).c_str(), cell(stat.freed).c_str());
    out << line;
  };
  const std::string rule(87, '-');
  out << "frugal memory summary: " << device() << ", " << name() << " allocator over " << backing_->name()
      << " backing, capacity " << format_size(backing_->capacity()) << "\n";
  out << "OOMs " << s.num_ooms << ", retries " << s.alloc_retries << ", backing allocs/frees " << s.backing_allocs << "/"
      << s.backing_frees << ", maps/unmaps " << s.backing_maps << "/" << s.backing_unmaps << "\n";
  out << rule << "\n";
  std::snprintf(line, sizeof line, "| %-26s | %12s | %12s | %12s | %12s |\n", "statistic", "current", "peak", "total added",
                "total freed");
  out << line << rule << "\n";
  row("allocated (blocks)", s.allocated_bytes, true);
  row("requested (as asked)", asked.requested_bytes, true);
  row("active", s.active_bytes, true);
  row("reserved", s.reserved_bytes, true);
  row("inactive split (cached)", s.inactive_split_bytes, true);
  row("allocations", s.allocations, false);
  row("segments", s.segments, false);
  out << rule << "\n";
  for (int tag = 0; tag < kNumMemoryTags; ++tag) {
    const std::string label = "tag " + std::string(memory_tag_name(static_cast<MemoryTag>(tag)));
    row(label.c_str(), asked.tag_bytes[tag], true);
  }
  out << rule << "\n";
  return out.str();
}

nlohmann::json CachingAllocator::snapshot() const {
  std::lock_guard lock(mutex_);
  nlohmann::json segments = nlohmann::json::array();
  char address[32];
  auto blocks_of = [](const Block* first) {
    nlohmann::json blocks = nlohmann::json::array();
    for (const Block* b = first; b; b = b->next) {
      const char* state = b->state == BlockState::allocated ? "allocated" : b->state == BlockState::pending ? "pending" : "free";
      blocks.push_back({{"offset", b->segment ? b->ptr - b->segment->base : 0},
                        {"size", b->size},
                        {"requested", b->requested},
                        {"state", state},
                        {"tag", b->state == BlockState::free ? "" : memory_tag_name(b->tag)},
                        {"context", b->state == BlockState::free ? "" : memory_context_label(b->context)}});
    }
    return blocks;
  };
  for (const auto& segment : segments_) {
    std::snprintf(address, sizeof address, "0x%" PRIxPTR, reinterpret_cast<std::uintptr_t>(segment->base));
    segments.push_back({{"address", address},
                        {"size", segment->size},
                        {"stream", stream_id(segment->stream)},
                        {"pool", segment->pool->small ? "small" : "large"},
                        {"expandable", segment->expandable},
                        {"blocks", blocks_of(segment->first)}});
  }
  for (const auto& [ptr, block] : live_) {
    if (block->segment) continue;  // bypass allocations are segments of their own
    std::snprintf(address, sizeof address, "0x%" PRIxPTR, reinterpret_cast<std::uintptr_t>(ptr));
    nlohmann::json blocks = blocks_of(block);
    blocks[0]["offset"] = 0;
    segments.push_back({{"address", address}, {"size", block->size}, {"stream", stream_id(block->stream)},
                        {"pool", "direct"}, {"expandable", false}, {"blocks", blocks}});
  }
  return {{"device", device().str()},
          {"allocator", name()},
          {"backing", backing_->name()},
          {"capacity", backing_->capacity() == kUnlimited ? nlohmann::json(nullptr) : nlohmann::json(backing_->capacity())},
          {"allocated_bytes", stats_.allocated_bytes.current},
          {"reserved_bytes", stats_.reserved_bytes.current},
          {"segments", segments}};
}

LiveBlocks CachingAllocator::live_blocks() const {
  std::lock_guard lock(mutex_);
  LiveBlocks live;
  live.blocks.reserve(live_.size());
  for (const auto& [ptr, b] : live_)
    live.blocks.push_back({reinterpret_cast<std::uintptr_t>(ptr), b->size, b->requested, b->tag, b->context, b->serial});
  live.allocated = static_cast<std::size_t>(stats_.allocated_bytes.current);
  live.reserved = static_cast<std::size_t>(stats_.reserved_bytes.current);
  live.inactive_split = static_cast<std::size_t>(stats_.inactive_split_bytes.current);
  return live;
}

std::uint64_t CachingAllocator::last_serial() const {
  std::lock_guard lock(mutex_);
  return static_cast<std::uint64_t>(stats_.allocations.allocated);
}

// ---- recording

void CachingAllocator::record_history(std::size_t max_events) {
  std::lock_guard lock(mutex_);
  history_.clear();
  history_.reserve(max_events);
  history_capacity_ = max_events;
  history_next_ = 0;
}

void CachingAllocator::record(AllocEvent::Kind kind, std::uintptr_t address, std::size_t bytes, std::size_t requested,
                              Stream stream, MemoryTag tag) {
  if (history_capacity_ == 0) return;
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - created_);
  AllocEvent event{kind,   ns.count(), address, bytes, requested, stream, tag,
                   static_cast<std::size_t>(stats_.allocated_bytes.current),
                   static_cast<std::size_t>(stats_.reserved_bytes.current)};
  if (history_.size() < history_capacity_)
    history_.push_back(event);
  else
    history_[history_next_] = event;  // the ring buffer overwrites its oldest entry
  history_next_ = (history_next_ + 1) % history_capacity_;
}

std::size_t CachingAllocator::history_size() const {
  std::lock_guard lock(mutex_);
  return history_.size();
}

std::vector<AllocEvent> CachingAllocator::history() const {
  std::lock_guard lock(mutex_);
  if (history_.size() < history_capacity_) return history_;
  std::vector<AllocEvent> ordered(history_.begin() + static_cast<std::ptrdiff_t>(history_next_), history_.end());
  ordered.insert(ordered.end(), history_.begin(), history_.begin() + static_cast<std::ptrdiff_t>(history_next_));
  return ordered;
}

std::int64_t CachingAllocator::history_time_ns() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - created_).count();
}

void CachingAllocator::write_trace(std::ostream& out) const {
  out << "# frugal allocation trace: '+ ID BYTES STREAM TAG' allocates, '- ID' frees (memory/alloc_trace.h)\n";
  out << "# recorded on " << device() << " by the " << name() << " allocator\n";
  std::map<std::uintptr_t, std::size_t> ids;  // live address -> id
  std::size_t next_id = 0;
  for (const AllocEvent& e : history()) {
    if (e.kind == AllocEvent::Kind::alloc) {
      ids[e.address] = next_id;
      out << "+ " << next_id++ << ' ' << e.requested << ' ' << stream_id(e.stream) << ' ' << memory_tag_name(e.tag) << '\n';
    } else if (e.kind == AllocEvent::Kind::free) {
      auto found = ids.find(e.address);
      if (found == ids.end()) {
        out << "# free of a block allocated before recording started (" << e.requested << " bytes)\n";
        continue;
      }
      out << "- " << found->second << '\n';
      ids.erase(found);
    } else {
      out << "# " << alloc_event_name(e.kind) << ' ' << e.bytes << " bytes\n";
    }
  }
}

void CachingAllocator::write_chrome_trace(std::ostream& out) const {
  // Trace-event format: counters ("C") for allocated and reserved bytes, one async slice ("b"/"e")
  // per allocation from alloc to free, instants ("i") for OOMs. Timestamps are in microseconds.
  nlohmann::json events = nlohmann::json::array();
  std::map<std::uintptr_t, std::size_t> ids;
  std::size_t next_id = 0;
  for (const AllocEvent& e : history()) {
    const double us = static_cast<double>(e.time_ns) / 1000.0;
    events.push_back({{"name", "memory"}, {"ph", "C"}, {"ts", us}, {"pid", 0},
                      {"args", {{"allocated", e.allocated_total}, {"reserved", e.reserved_total}}}});
    if (e.kind == AllocEvent::Kind::alloc) {
      ids[e.address] = next_id;
      events.push_back({{"name", std::string(memory_tag_name(e.tag)) + " " + format_size(e.bytes)}, {"cat", "alloc"},
                        {"ph", "b"}, {"id", next_id++}, {"ts", us}, {"pid", 0}, {"tid", stream_id(e.stream)},
                        {"args", {{"bytes", e.bytes}, {"requested", e.requested}}}});
    } else if (e.kind == AllocEvent::Kind::free) {
      auto found = ids.find(e.address);
      if (found == ids.end()) continue;
      events.push_back({{"name", std::string(memory_tag_name(e.tag)) + " " + format_size(e.bytes)}, {"cat", "alloc"},
                        {"ph", "e"}, {"id", found->second}, {"ts", us}, {"pid", 0}, {"tid", stream_id(e.stream)}});
      ids.erase(found);
    } else if (e.kind == AllocEvent::Kind::oom) {
      events.push_back({{"name", "OOM: tried to allocate " + format_size(e.bytes)}, {"ph", "i"}, {"s", "g"}, {"ts", us},
                        {"pid", 0}});
    }
  }
  out << nlohmann::json{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump() << '\n';
}

// ---- invariants (tests)

void CachingAllocator::check_invariants() const {
  std::lock_guard lock(mutex_);
  std::int64_t allocated = 0, active = 0, reserved = 0, inactive = 0, blocks_live = 0;
  std::array<std::int64_t, kNumMemoryTags> requested{};  // by tag, of the allocated blocks
  for (const auto& segment : segments_) {
    char* expected = segment->base;
    std::size_t count = 0, free_bytes = 0;
    const Block* last_seen = nullptr;
    for (const Block* b = segment->first; b; b = b->next) {
      FRUGAL_CHECK(b->ptr == expected, "block at offset ", b->ptr - segment->base, " does not follow its neighbour");
      FRUGAL_CHECK(b->segment == segment.get(), "block points to the wrong segment");
      FRUGAL_CHECK(!b->next || b->next->prev == b, "broken neighbour links");
      FRUGAL_CHECK(b->size > 0 && b->size % kMinBlockSize == 0, "block size ", b->size, " is not a positive multiple of 512");
      const bool in_free_set = segment->pool->free_blocks.count(const_cast<Block*>(b)) > 0;
      FRUGAL_CHECK(in_free_set == (b->state == BlockState::free), "free set and block state disagree");
      if (b->state == BlockState::free) {
        FRUGAL_CHECK(!b->next || b->next->state != BlockState::free, "two free neighbours were not merged");
        free_bytes += b->size;
      } else {
        active += as_signed(b->size);
      }
      if (b->state == BlockState::allocated) {
        allocated += as_signed(b->size);
        blocks_live += 1;
        FRUGAL_CHECK(b->requested <= b->size, "a block is smaller than its request");
        FRUGAL_CHECK(live_.count(b->ptr) == 1, "an allocated block is missing from the live map");
        requested[static_cast<std::size_t>(b->tag)] += as_signed(b->requested);
      }
      expected += b->size;
      count += 1;
      last_seen = b;
    }
    FRUGAL_CHECK(expected == segment->base + segment->size, "blocks do not tile their segment");
    FRUGAL_CHECK(segment->last == (segment->first ? last_seen : nullptr), "the segment's kept tail is not its last block");
    FRUGAL_CHECK(count == segment->num_blocks && free_bytes == segment->free_bytes, "segment bookkeeping is stale");
    inactive += segment->inactive_split();
    reserved += as_signed(segment->size);
  }
  for (const auto& [ptr, block] : live_)
    if (!block->segment) {
      allocated += as_signed(block->size);
      active += as_signed(block->size);
      reserved += as_signed(block->size);
      blocks_live += 1;
      requested[static_cast<std::size_t>(block->tag)] += as_signed(block->requested);
    }
  // The statistics of what callers asked for are kept under the same lock (Note [One lock per
  // allocator]), so they agree with the blocks at every moment another thread can see.
  const AllocatorStats& asked = stats_while_locked();
  std::int64_t requested_total = 0;
  for (int tag = 0; tag < kNumMemoryTags; ++tag) {
    FRUGAL_CHECK(requested[static_cast<std::size_t>(tag)] == asked.tag_bytes[static_cast<std::size_t>(tag)].current,
                 "requested bytes of tag ", memory_tag_name(static_cast<MemoryTag>(tag)), ": ",
                 asked.tag_bytes[static_cast<std::size_t>(tag)].current, " counted but blocks sum to ",
                 requested[static_cast<std::size_t>(tag)]);
    requested_total += requested[static_cast<std::size_t>(tag)];
  }
  FRUGAL_CHECK(requested_total == asked.requested_bytes.current && blocks_live == asked.allocations.current,
               "requested bytes or allocations counted differ from the live blocks");
  FRUGAL_CHECK(allocated == stats_.allocated_bytes.current, "allocated_bytes ", stats_.allocated_bytes.current,
               " but blocks sum to ", allocated);
  FRUGAL_CHECK(active == stats_.active_bytes.current, "active_bytes ", stats_.active_bytes.current, " but blocks sum to ", active);
  FRUGAL_CHECK(reserved == stats_.reserved_bytes.current, "reserved_bytes ", stats_.reserved_bytes.current,
               " but segments sum to ", reserved);
  FRUGAL_CHECK(reserved == as_signed(backing_->held_bytes()), "the backing holds ", backing_->held_bytes(),
               " bytes but segments sum to ", reserved);
  FRUGAL_CHECK(inactive == stats_.inactive_split_bytes.current, "inactive_split_bytes ",
               stats_.inactive_split_bytes.current, " but segments sum to ", inactive);
  FRUGAL_CHECK(blocks_live == stats_.allocations.current && blocks_live == static_cast<std::int64_t>(live_.size()),
               "allocation count disagrees with the live blocks");
  FRUGAL_CHECK(stats_.allocated_bytes.current <= stats_.reserved_bytes.current, "allocated exceeds reserved");
  for (const Stat* stat : {&stats_.allocated_bytes, &stats_.reserved_bytes, &stats_.active_bytes,
                           &stats_.inactive_split_bytes, &stats_.allocations, &stats_.segments})
    FRUGAL_CHECK(stat->peak >= stat->current && stat->current >= 0, "a statistic is negative or above its peak");
}

}  // namespace frugal
