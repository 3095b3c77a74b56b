// The emulator's shared-memory hazard checker: for each 4-byte word of a block's shared memory, which
// thread last wrote it and which threads read it since the last __syncthreads, so that an access by
// another thread that nothing orders after those is reported as a read-after-write, write-after-read
// or write-after-write hazard, as compute-sanitizer's racecheck does on a GPU.
// Note [Shared-memory hazards] in hazard_checker.cpp explains the rules.
//
// Not here: where accesses come from (SharedPtr, shared_memory.h), bounds (emulator.cpp checks them
// before an access gets here), and the report (emulator.cpp names the kernel, block and threads).
// Global memory is not tracked: the sanitizer build covers its bounds, and schedules its races.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "emu/emulator.h"

namespace frugal::emu {

enum class HazardKind : std::uint8_t { read_after_write, write_after_read, write_after_write };
std::string_view hazard_name(HazardKind kind);  // "read-after-write (RAW)", ...

struct Hazard {
  HazardKind kind;
  int earlier_thread;  // the thread whose access came first, by its place in the block
  std::size_t offset;  // of the word both touched, in bytes from the start of its region
};

class HazardChecker {
 public:
  static constexpr std::size_t kWordBytes = 4;  // the granularity: accesses to one word conflict
  // Static __shared__ arrays share one region (the linker section); dynamic shared memory is another.
  enum Region : std::uint8_t { dynamic_region, static_region };

  // A new block of `threads` threads, with regions of these sizes in bytes: nothing accessed yet.
  void start_block(int threads, std::size_t dynamic_bytes, std::size_t static_bytes);
  // __syncthreads opened: every access before it is ordered before every access after it.
  void barrier();
  // __syncwarp completed for `lanes` (a mask) of the warp whose lane 0 is thread `first`.
  void warp_sync(int first, unsigned lanes);
  // Records `thread`'s access to bytes [offset, offset + bytes) of `region`, or returns the first
  // hazard it makes with an earlier access (nothing is recorded then: the launch fails).
  std::optional<Hazard> access(int thread, Region region, std::size_t offset, std::size_t bytes, SharedAccess kind);

 private:
  struct Access {
    int thread = -1;         // -1: none
    std::uint32_t time = 0;  // the thread's own clock when it accessed (Note [Shared-memory hazards])
  };
  struct Word {
    std::uint64_t epoch = 0;  // the barrier interval the fields below belong to; older ones are void
    Access write;             // the latest write
    bool atomic_write = false;
    Access reads[2];  // the first reader in this interval, and the latest other one
  };
  using Clock = std::array<std::uint32_t, kWarpSize>;  // what a thread knows of each lane of its warp

  bool ordered(const Access& earlier, int thread) const;
  static void remember_read(Word& word, const Access& read);

  std::uint64_t epoch_ = 0;  // bumped by each barrier and block: void words need no clearing
  std::vector<Word> words_[2];
  std::vector<Clock> clocks_;  // per thread of the block
};

}  // namespace frugal::emu
