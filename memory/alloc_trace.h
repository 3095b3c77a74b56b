// Allocation traces: the file formats, and a replay engine that runs a trace through a
// CachingAllocator. `frugal alloc-replay` and `frugal bench alloc` are thin layers over this file.
//
// Formats (told apart by the first line that is not blank):
//   frugal's own text, one event per line; `#` starts a comment; blank lines are ignored.
//       + ID BYTES [STREAM] [TAG]    allocate   (BYTES: 4096 or a size such as 512MiB; STREAM: an
//       - ID                         free        integer, 0 by default; TAG: param, grad, optimizer,
//                                                activation, workspace, data or other, by default other)
//     CachingAllocator::write_trace writes this format.
//   RMM's logging CSV (rmm::mr::logging_resource_adaptor), header `Thread,Time,Action,Pointer,Size,Stream`:
//     Action allocate / free / allocate failure (skipped and counted); Pointer is the id; Size the bytes;
//     Stream hex (0x...) or decimal. Tags are not recorded there: every event is `other`.
//
// Every error in a trace is a ValueError whose message() starts with `FILE:LINE: ` (line 0 when the
// file as a whole cannot be read) and says what is wrong. No input, text or binary, crashes the parser.
//
// Not here: the allocator itself (core/caching_allocator.h), recording traces from a running
// allocator (CachingAllocator::record_history), the trace of a model training
// (train/training_trace.h), timing peers such as jemalloc (bench/alloc_bench.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <istream>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/caching_allocator.h"

namespace frugal {

// ---- traces

// One event. Ids are turned into slots while parsing: a slot is a small index, reused once its
// allocation is freed, so a replay keeps its live allocations in a plain vector and an id lookup never
// shows up in the measured time.
struct TraceEvent {
  bool is_alloc = true;
  std::size_t slot = 0;
  std::size_t bytes = 0;        // allocations only
  std::uintptr_t stream = 0;    // allocations only; becomes Stream{reinterpret_cast<void*>(stream)}
  MemoryTag tag = MemoryTag::other;
  std::size_t line = 0;         // 1-based line of the event in its file
};

struct Trace {
  enum class Format : std::uint8_t { frugal, rmm_csv };
  std::string source;                  // the file name used in messages
  Format format = Format::frugal;
  std::vector<TraceEvent> events;
  std::size_t slots = 0;               // most allocations alive at once: the slots a replay needs
  std::size_t allocate_failures = 0;   // RMM "allocate failure" rows, skipped
};

// Parses a whole trace; `source` names it in error messages. Throws ValueError (see above).
Trace parse_trace(std::istream& in, std::string_view source);
Trace parse_trace_text(std::string_view text, std::string_view source);
Trace read_trace_file(const std::string& path);

// ---- replay

struct ReplayOptions {
  std::size_t limit = kUnlimited;      // capacity of the simulated device
  bool direct = false;                 // CachingOptions::bypass: every request goes to the backing
  std::size_t max_split = kUnlimited;  // CachingOptions::max_split_size
  bool expandable = true;              // CachingOptions::expandable_segments
};

// The allocator's options for a replay, so that a replay on another backing uses the same policy.
CachingOptions caching_options(const ReplayOptions& options);

struct ReplayOom {
  std::size_t event = 0;               // 1-based line of the allocation that failed
  std::size_t requested_bytes = 0;
  std::string message;                 // the OutOfMemoryError's message
};

struct ReplayResult {
  std::size_t events = 0;              // events replayed; on an OOM, those before the failed one
  std::size_t peak_live_bytes = 0;     // most requested bytes alive at once: what an ideal allocator reserves
  std::size_t peak_allocated_bytes = 0;
  std::size_t peak_reserved_bytes = 0;
  std::int64_t backing_allocs = 0;     // calls that took memory from the backing: segments plus chunk maps
  std::int64_t backing_frees = 0;      // calls that gave it back: segment frees plus chunk unmaps
  std::int64_t alloc_retries = 0;
  std::int64_t num_ooms = 0;
  std::size_t final_allocated_bytes = 0;  // still allocated after the last event (never freed in the trace)
  std::size_t final_reserved_bytes = 0;
  double ns_per_op = 0.0;              // wall time of the replay loop / events replayed
  std::optional<ReplayOom> oom;        // set when the replay stopped on an OutOfMemoryError
};

// Replays `trace` on a fresh CachingAllocator over a SimulatedBacking of capacity options.limit.
// Deterministic: the same trace and options give the same result on every run, except ns_per_op.
ReplayResult replay(const Trace& trace, const ReplayOptions& options = {});
// Replays on an allocator the caller made (a HostBacking for timing, a CUDA backing on a GPU). Its
// statistics should be fresh: the peaks reported are the allocator's own. Every allocation the
// trace leaves alive is freed before returning, after the final figures are taken.
ReplayResult replay_on(CachingAllocator& allocator, const Trace& trace);

// The JSON of `frugal alloc-replay --json`: events, peak_live_bytes, peak_allocated_bytes,
// peak_reserved_bytes, backing_allocs, backing_frees, alloc_retries, num_ooms,
// final_allocated_bytes, final_reserved_bytes, ns_per_op, and oom {event, requested_bytes, message}
// when the replay stopped on one.
nlohmann::ordered_json to_json(const ReplayResult& result);

}  // namespace frugal
