// The shared-memory hazard checker (see hazard_checker.h).
//
// Note [Shared-memory hazards]: two accesses to one shared-memory word by different threads race
// unless something orders them, and they conflict unless both are reads or both are atomics. What
// orders them:
//   - a __syncthreads between them: it orders everything in the block;
//   - for two threads of one warp, a __syncwarp that both took part in, after the first access and
//     before the second (or a chain of such __syncwarps through other lanes). Threads of a warp are
//     not lockstep: since Volta, independent thread scheduling lets a warp's lanes diverge and
//     interleave, and CUDA orders their memory only at __syncwarp. The other warp primitives
//     (shuffles, votes) exchange values but are not memory barriers, so they order nothing here.
// Accesses in different warps are ordered only by __syncthreads.
//
// What is kept, per 4-byte word (kWordBytes: a thread writing one byte of a word and another thread
// the next byte are reported, a false positive for byte and half-precision arrays):
//   - the barrier interval (`epoch`) the record belongs to: a barrier makes every record void at once;
//   - the latest write, and whether it was atomic;
//   - two reads: the first reader of the interval and the latest other one. A race with a reader in
//     between those two can be missed; it cannot be invented.
// A write races with an unordered earlier write (write-after-write) or read (write-after-read); a
// read with an unordered earlier write (read-after-write); an atomic counts as a write, except that
// two atomics do not race.
//
// "Ordered within a warp" is a vector clock over the warp's lanes: each thread holds what it knows of
// each lane's clock, and stamps an access with its own entry. A __syncwarp first advances each
// participant's own entry, then gives all of them the elementwise maximum of their clocks. An earlier
// access by lane a at time t is ordered before thread b's present if b knows a's clock is past t.
#include "emu/hazard_checker.h"

#include <algorithm>

namespace frugal::emu {

std::string_view hazard_name(HazardKind kind) {
  switch (kind) {
    case HazardKind::read_after_write: return "read-after-write (RAW)";
    case HazardKind::write_after_read: return "write-after-read (WAR)";
    case HazardKind::write_after_write: return "write-after-write (WAW)";
  }
  return "?";
}

void HazardChecker::start_block(int threads, std::size_t dynamic_bytes, std::size_t static_bytes) {
  ++epoch_;
  for (auto [region, bytes] : {std::pair{dynamic_region, dynamic_bytes}, std::pair{static_region, static_bytes}}) {
    const std::size_t words = (bytes + kWordBytes - 1) / kWordBytes;
    if (words_[region].size() < words) words_[region].resize(words);
  }
  clocks_.assign(static_cast<std::size_t>(threads), Clock{});
}

void HazardChecker::barrier() { ++epoch_; }

void HazardChecker::warp_sync(int first, unsigned lanes) {
  Clock joined{};
  for (int lane = 0; lane < kWarpSize; ++lane) {
    if (!((lanes >> lane) & 1u)) continue;
    Clock& clock = clocks_[static_cast<std::size_t>(first + lane)];
    ++clock[static_cast<std::size_t>(lane)];
    for (std::size_t l = 0; l < clock.size(); ++l) joined[l] = std::max(joined[l], clock[l]);
  }
  for (int lane = 0; lane < kWarpSize; ++lane)
    if ((lanes >> lane) & 1u) clocks_[static_cast<std::size_t>(first + lane)] = joined;
}

bool HazardChecker::ordered(const Access& earlier, int thread) const {
  if (earlier.thread == thread) return true;                            // program order
  if (earlier.thread / kWarpSize != thread / kWarpSize) return false;  // only __syncthreads orders warps
  return clocks_[static_cast<std::size_t>(thread)][static_cast<std::size_t>(earlier.thread % kWarpSize)] > earlier.time;
}

void HazardChecker::remember_read(Word& word, const Access& read) {
  if (word.reads[0].thread < 0 || word.reads[0].thread == read.thread)
    word.reads[0] = read;
  else
    word.reads[1] = read;
}

std::optional<Hazard> HazardChecker::access(int thread, Region region, std::size_t offset, std::size_t bytes,
                                            SharedAccess kind) {
  const Access now{thread, clocks_[static_cast<std::size_t>(thread)][static_cast<std::size_t>(thread % kWarpSize)]};
  for (std::size_t w = offset / kWordBytes; w <= (offset + bytes - 1) / kWordBytes; ++w) {
    Word& word = words_[region][w];
    if (word.epoch != epoch_) {
      word = Word{};
      word.epoch = epoch_;
    }
    const bool both_atomic = kind == SharedAccess::atomic && word.atomic_write;
    if (word.write.thread >= 0 && !both_atomic && !ordered(word.write, thread))
      return Hazard{kind == SharedAccess::read ? HazardKind::read_after_write : HazardKind::write_after_write,
                    word.write.thread, w * kWordBytes};
    if (kind != SharedAccess::read)
      for (const Access& read : word.reads)
        if (read.thread >= 0 && !ordered(read, thread)) return Hazard{HazardKind::write_after_read, read.thread, w * kWordBytes};
    if (kind == SharedAccess::read) {
      remember_read(word, now);
    } else {
      word.write = now;
      word.atomic_write = kind == SharedAccess::atomic;
    }
  }
  return std::nullopt;
}

}  // namespace frugal::emu
