// Backing: where the caching allocator's raw memory comes from. A backing hands out whole segments
// (or maps chunks into reserved address space, for expandable segments) and knows nothing of
// blocks, pools or rounding; all policy lives in CachingAllocator (core/caching_allocator.h).
//
// Every backing can be given a capacity: a simulated device of N bytes on the CPU, or a cap on a
// real GPU. The capacity is checked here, in the non-virtual entry points, *before* the device is
// asked, so a request over the cap never reaches cudaMalloc or the C library.
//
// Backings in frugal:
//   HostBacking       host memory: aligned_alloc for segments, mmap reservations for expandable ones
//   SimulatedBacking  no memory at all: deterministic fake addresses, for trace replay and tests
//   CudaBacking       cudaMalloc, CUDA events, and the driver's virtual memory API (core/cuda/)
//   pinned host       cudaHostAlloc when CUDA is usable, host memory otherwise (core/cuda/)
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string_view>

#include "core/allocator.h"

namespace frugal {

inline constexpr std::size_t kUnlimited = std::numeric_limits<std::size_t>::max();

class Backing {
 public:
  explicit Backing(Device device) : device_(device) {}
  virtual ~Backing() = default;
  Backing(const Backing&) = delete;
  Backing& operator=(const Backing&) = delete;

  Device device() const { return device_; }
  virtual std::string_view name() const = 0;

  // ---- capacity
  void set_capacity(std::size_t bytes);  // kUnlimited: no cap
  std::size_t capacity() const;
  std::size_t held_bytes() const;        // segments plus mapped chunks held right now

  // What the device itself reports: total memory and what is free on it now. A capped backing
  // reports min(device, capacity). Hosts without a cap report the machine's RAM.
  struct MemoryInfo {
    std::size_t total = 0;
    std::size_t free = 0;
  };
  MemoryInfo memory_info() const;

  // ---- whole segments. nullptr when the memory is not there: over the capacity (without asking
  // the device) or refused by the device. Never throws for lack of memory: the allocator decides.
  void* allocate(std::size_t bytes, Stream stream);
  void free(void* ptr, std::size_t bytes);

  // ---- expandable segments: reserve address space once, then map and unmap physical chunks of
  // map_granularity() bytes inside it. Only mapped bytes count against the capacity.
  virtual bool supports_expandable() const { return false; }
  virtual std::size_t map_granularity() const;
  void* reserve(std::size_t bytes);  // nullptr if the address space cannot be had
  void release(void* base, std::size_t bytes);
  bool map(void* address, std::size_t bytes);  // false when the memory is not there
  void unmap(void* address, std::size_t bytes);

  // ---- stream order. An event marks the point a stream has reached; a block freed while other
  // streams still use it waits until their events are done. Host work is synchronous, so by default
  // events are done at once (and streams are only tags).
  using Event = void*;
  virtual Event record_event(Stream stream);
  virtual bool event_done(Event event);
  virtual void wait_event(Event event);  // returns once it is done (the OOM ladder's last resort)
  virtual void destroy_event(Event event);

  // Calls that reached the device, counted so tests can prove "zero backing calls".
  struct Counters {
    std::int64_t allocs = 0, frees = 0, maps = 0, unmaps = 0, reserves = 0, releases = 0;
    std::int64_t refused = 0;  // requests over the capacity, refused before reaching the device
  };
  Counters counters() const;

 protected:
  virtual void* do_allocate(std::size_t bytes, Stream stream) = 0;  // nullptr when out of memory
  virtual void do_free(void* ptr, std::size_t bytes) = 0;
  virtual void* do_reserve(std::size_t bytes);
  virtual void do_release(void* base, std::size_t bytes);
  virtual bool do_map(void* address, std::size_t bytes);
  virtual void do_unmap(void* address, std::size_t bytes);
  virtual MemoryInfo device_memory() const = 0;

 private:
  bool charge(std::size_t bytes);  // reserves room under the capacity; false (and counted) if none
  // Runs a device call that takes `bytes`: charged first, refunded if the call fails or throws.
  template <typename Call>
  auto charged(std::size_t bytes, std::int64_t Counters::*counter, Call call) -> decltype(call());
  Device device_;
  mutable std::mutex mutex_;
  std::size_t capacity_ = kUnlimited;
  std::size_t held_ = 0;
  Counters counters_;
};

// Host memory. Segments come from aligned_alloc (64-byte aligned); expandable segments reserve
// address space with mmap(PROT_NONE) and map chunks by making them readable and writable, and unmap
// them with madvise(MADV_DONTNEED), which returns the pages to the system at once.
class HostBacking final : public Backing {
 public:
  HostBacking() : Backing(Device::cpu()) {}
  std::string_view name() const override { return "host"; }
  bool supports_expandable() const override { return true; }

 protected:
  void* do_allocate(std::size_t bytes, Stream stream) override;
  void do_free(void* ptr, std::size_t bytes) override;
  void* do_reserve(std::size_t bytes) override;
  void do_release(void* base, std::size_t bytes) override;
  bool do_map(void* address, std::size_t bytes) override;
  void do_unmap(void* address, std::size_t bytes) override;
  MemoryInfo device_memory() const override;
};

// No memory at all: addresses are numbers handed out in order from a fixed base, so a trace replays
// to the same addresses and the same figures on every run and every machine. Never dereference
// them. Supports expandable segments. `device` is only a label.
class SimulatedBacking final : public Backing {
 public:
  explicit SimulatedBacking(Device device = Device::cpu()) : Backing(device) {}
  std::string_view name() const override { return "simulated"; }
  bool supports_expandable() const override { return true; }

 protected:
  void* do_allocate(std::size_t bytes, Stream stream) override;
  void do_free(void*, std::size_t) override {}
  void* do_reserve(std::size_t bytes) override;
  void do_release(void*, std::size_t) override {}
  bool do_map(void*, std::size_t) override { return true; }
  void do_unmap(void*, std::size_t) override {}
  MemoryInfo device_memory() const override;

 private:
  std::uintptr_t next_address_ = kFirstAddress;
  static constexpr std::uintptr_t kFirstAddress = std::uintptr_t{1} << 44;  // far from real mappings
};

}  // namespace frugal
