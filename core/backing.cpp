// Backing: the capacity check and call counting shared by every backing, then the host and
// simulated backings (see backing.h).
#include "core/backing.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>

#include "core/error.h"

namespace frugal {

// ---- Backing

void Backing::set_capacity(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  capacity_ = bytes;
}

std::size_t Backing::capacity() const {
  std::lock_guard lock(mutex_);
  return capacity_;
}

std::size_t Backing::held_bytes() const {
  std::lock_guard lock(mutex_);
  return held_;
}

Backing::Counters Backing::counters() const {
  std::lock_guard lock(mutex_);
  return counters_;
}

Backing::MemoryInfo Backing::memory_info() const {
  MemoryInfo info = device_memory();
  const std::size_t cap = capacity();
  if (cap != kUnlimited) {
    const std::size_t room = cap > held_bytes() ? cap - held_bytes() : 0;
    info.total = std::min(info.total, cap);
    info.free = std::min(info.free, room);
  }
  return info;
}

bool Backing::charge(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  if (capacity_ != kUnlimited && (bytes > capacity_ || held_ > capacity_ - bytes)) {
    counters_.refused += 1;
    return false;
  }
  held_ += bytes;
  return true;
}

template <typename Call>
auto Backing::charged(std::size_t bytes, std::int64_t Counters::*counter, Call call) -> decltype(call()) {
  if (!charge(bytes)) return {};  // over the capacity: the device is never asked
  decltype(call()) result{};
  try {
    result = call();
  } catch (...) {
    std::lock_guard lock(mutex_);
    held_ -= bytes;
    throw;
  }
  std::lock_guard lock(mutex_);
  counters_.*counter += 1;
  if (!result) held_ -= bytes;
  return result;
}

void* Backing::allocate(std::size_t bytes, Stream stream) {
  return charged(bytes, &Counters::allocs, [&] { return do_allocate(bytes, stream); });
}

void Backing::free(void* ptr, std::size_t bytes) {
  do_free(ptr, bytes);
  std::lock_guard lock(mutex_);
  counters_.frees += 1;
  held_ -= bytes;
}

std::size_t Backing::map_granularity() const { return std::size_t{2} << 20; }  // 2 MiB: CUDA's usual granularity

void* Backing::reserve(std::size_t bytes) {
  void* base = do_reserve(bytes);
  std::lock_guard lock(mutex_);
  counters_.reserves += 1;
  return base;
}

void Backing::release(void* base, std::size_t bytes) {
  do_release(base, bytes);
  std::lock_guard lock(mutex_);
  counters_.releases += 1;
}

bool Backing::map(void* address, std::size_t bytes) {
  return charged(bytes, &Counters::maps, [&] { return do_map(address, bytes); });
}

void Backing::unmap(void* address, std::size_t bytes) {
  do_unmap(address, bytes);
  std::lock_guard lock(mutex_);
  counters_.unmaps += 1;
  held_ -= bytes;
}

void* Backing::do_reserve(std::size_t) {
  FRUGAL_THROW(Error, name(), " backing does not support expandable segments");
}
void Backing::do_release(void*, std::size_t) {
  FRUGAL_THROW(Error, name(), " backing does not support expandable segments");
}
bool Backing::do_map(void*, std::size_t) {
  FRUGAL_THROW(Error, name(), " backing does not support expandable segments");
}
void Backing::do_unmap(void*, std::size_t) {
  FRUGAL_THROW(Error, name(), " backing does not support expandable segments");
}

Backing::Event Backing::record_event(Stream) { return nullptr; }
bool Backing::event_done(Event) { return true; }
void Backing::wait_event(Event) {}
void Backing::destroy_event(Event) {}

// ---- HostBacking

namespace {
constexpr std::size_t kHostAlignment = 64;  // a cache line, and the widest vector load (AVX-512)

std::size_t page_size() { return static_cast<std::size_t>(sysconf(_SC_PAGESIZE)); }

Backing::MemoryInfo physical_memory() {
  const std::size_t page = page_size();
  return {static_cast<std::size_t>(sysconf(_SC_PHYS_PAGES)) * page,
          static_cast<std::size_t>(sysconf(_SC_AVPHYS_PAGES)) * page};
}
}  // namespace

void* HostBacking::do_allocate(std::size_t bytes, Stream) {
  if (bytes > SIZE_MAX - kHostAlignment) return nullptr;  // rounding up would wrap around
  // aligned_alloc wants a multiple of the alignment.
  const std::size_t rounded = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  return std::aligned_alloc(kHostAlignment, rounded);
}

void HostBacking::do_free(void* ptr, std::size_t) { std::free(ptr); }

void* HostBacking::do_reserve(std::size_t bytes) {
  // Address space only: no access, no swap reservation, no physical pages until mapped.
  void* base = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return base == MAP_FAILED ? nullptr : base;
}

void HostBacking::do_release(void* base, std::size_t bytes) { munmap(base, bytes); }

bool HostBacking::do_map(void* address, std::size_t bytes) {
  return mprotect(address, bytes, PROT_READ | PROT_WRITE) == 0;
}

void HostBacking::do_unmap(void* address, std::size_t bytes) {
  // MADV_DONTNEED hands the pages back to the system now; PROT_NONE makes a stray access fault.
  madvise(address, bytes, MADV_DONTNEED);
  mprotect(address, bytes, PROT_NONE);
}

Backing::MemoryInfo HostBacking::device_memory() const { return physical_memory(); }

// ---- SimulatedBacking

namespace {
// Simulated addresses are aligned like real device segments, so offsets look familiar.
constexpr std::uintptr_t kSimulatedAlignment = std::uintptr_t{2} << 20;

// Simulated addresses end here: far below the top of a 64-bit space, so sums of an address and a
// size never wrap. Past it the simulated device has no address space left (a null result).
constexpr std::uintptr_t kSimulatedEnd = std::uintptr_t{1} << 62;

void* take_addresses(std::uintptr_t& next, std::size_t bytes) {
  if (bytes > kSimulatedEnd - next - kSimulatedAlignment) return nullptr;
  const std::uintptr_t address = next;
  next += (bytes + kSimulatedAlignment - 1) / kSimulatedAlignment * kSimulatedAlignment;
  return reinterpret_cast<void*>(address);
}
}  // namespace

void* SimulatedBacking::do_allocate(std::size_t bytes, Stream) { return take_addresses(next_address_, bytes); }

void* SimulatedBacking::do_reserve(std::size_t bytes) { return take_addresses(next_address_, bytes); }

Backing::MemoryInfo SimulatedBacking::device_memory() const {
  // A simulated device is as large as its capacity; without one, as large as it is asked to be.
  const std::size_t room = capacity() == kUnlimited ? kUnlimited : capacity() - std::min(capacity(), held_bytes());
  return {capacity(), room};
}

}  // namespace frugal
