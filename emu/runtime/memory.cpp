// The emulated device's memory (see state.h): per device an arena of reserved address space that
// the host cannot touch, cudaMalloc blocks and mapped virtual-memory chunks inside it, pinned host
// memory, and a fault handler that names a host access to device memory.
//
// Note [Device memory is not host memory]
// Each device owns an arena: 1 TiB of address space reserved with PROT_NONE (room for the ranges
// expandable segments reserve). cudaMalloc takes a page-rounded range of it
// and leaves a page of nothing after it; cuMemMap maps a memfd chunk into a reserved range. Those
// pages stay PROT_NONE, except while the runtime itself runs device work (DeviceAccess: a kernel,
// a copy, a memset, a poison fill), so host code that reads or writes a cuda:0 tensor's bytes
// faults, and the handler says what it touched, as a real GPU's memory would be out of the host's
// reach. Past the page-rounded end of a block lies the unmapped guard page: a kernel that runs off
// its block faults too. Within the rounding the sanitizer build's shadow memory takes over: the
// tail of every block is poisoned for ASan (ASAN_POISON_MEMORY_REGION), so with FRUGAL_ALLOC=direct
// (one block per tensor) any out-of-bounds device access is an ASan report, as compute-sanitizer's
// memcheck gives on a GPU. What it cannot see: another host thread reading device memory in the
// moment the runtime runs device work.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "core/error.h"
#include "emu/runtime/state.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define FRUGAL_ASAN_POISON(address, bytes) ASAN_POISON_MEMORY_REGION(address, bytes)
#define FRUGAL_ASAN_UNPOISON(address, bytes) ASAN_UNPOISON_MEMORY_REGION(address, bytes)
#else
#define FRUGAL_ASAN_POISON(address, bytes) static_cast<void>(0)
#define FRUGAL_ASAN_UNPOISON(address, bytes) static_cast<void>(0)
#endif

namespace frugal::emu::runtime {

namespace {

constexpr std::size_t kPage = 4096;
constexpr std::size_t kMiB = std::size_t{1} << 20;
// 8 GiB: more than any test or sample asks of the device, and still a device that a request for
// "more than the GPU has" can exceed without the host committing any of it (pages are only
// reserved, and committed when written).
constexpr std::size_t kDefaultCapacityMiB = 8 << 10;
// The VMM granularity an H100 reports for device memory: 2 MiB.
constexpr std::size_t kGranularity = 2 * kMiB;
// Reserved address space per device: expandable segments reserve 64 GiB ranges (or 1 1/8 of the
// device) and map chunks into them, as on a GPU, whose virtual address space is as large. Reserving
// costs the host nothing (PROT_NONE, no swap reserved).
constexpr std::size_t kAddressSpace = std::size_t{1} << 40;
constexpr int kMaxDevices = 8;
constexpr unsigned char kPoisonByte = 0xFF;

std::size_t round_up(std::size_t bytes, std::size_t multiple) { return (bytes + multiple - 1) / multiple * multiple; }

struct Chunk {  // cuMemCreate's physical memory: a memfd, mapped where cuMemMap says
  int fd = -1;
  std::size_t bytes = 0;
  int device = 0;
  int mappings = 0;
  bool released = false;
};

struct Mapping {
  std::size_t bytes = 0;
  CUmemGenericAllocationHandle handle = 0;
};

struct Arena {
  std::uintptr_t base = 0;
  std::size_t span = 0;                                  // reserved address space
  std::size_t capacity = 0, used = 0;                   // the device's memory, and what is allocated
  std::map<std::uintptr_t, std::size_t> free_ranges;    // address space not handed out: begin -> bytes
  std::map<std::uintptr_t, std::size_t> blocks;         // accessible device memory: cudaMalloc blocks and
                                                        // mapped chunks given access: begin -> bytes
  std::map<std::uintptr_t, bool> from_malloc;           // which blocks are cudaMalloc's
  std::map<std::uintptr_t, std::size_t> reservations;   // cuMemAddressReserve: begin -> bytes
  std::map<std::uintptr_t, Mapping> mappings;           // cuMemMap: begin -> chunk

  bool contains(std::uintptr_t address) const { return address >= base && address < base + span; }
};

struct Memory {
  std::vector<Arena> arenas;
  std::map<std::uintptr_t, std::size_t> pinned;  // cudaHostAlloc: begin -> bytes
  std::map<CUmemGenericAllocationHandle, Chunk> chunks;
  CUmemGenericAllocationHandle next_handle = 1;
  int access_depth = 0;
};

// For the fault handler, which may read only plain data.
struct ArenaBounds {
  std::uintptr_t base = 0, end = 0;
};
ArenaBounds g_bounds[kMaxDevices];
int g_bound_count = 0;
struct sigaction g_previous_segv {};

// An unset variable means the default; a set one must be a whole number in [low, high], or the
// first CUDA call fails saying so (a typo must not quietly give a different device).
std::size_t environment_number(const char* name, std::size_t fallback, std::size_t low, std::size_t high) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  FRUGAL_CHECK_VALUE(*text != '-' && end != text && *end == '\0' && errno == 0 && value >= low && value <= high, name,
                     "=", text, ": the emulated CUDA runtime needs a whole number from ", low, " to ", high);
  return static_cast<std::size_t>(value);
}

// ---- the fault handler: async-signal-safe writes only
void write_text(const char* text) {
  const ssize_t ignored = write(STDERR_FILENO, text, std::strlen(text));
  static_cast<void>(ignored);
}
void write_hex(std::uintptr_t value) {
  char digits[2 + 16 + 1] = "0x";
  for (int i = 0; i < 16; ++i) digits[2 + i] = "0123456789abcdef"[(value >> (60 - 4 * i)) & 0xF];
  digits[18] = '\0';
  write_text(digits);
}

void on_segv(int signal_number, siginfo_t* info, void* context) {
  const auto address = reinterpret_cast<std::uintptr_t>(info->si_addr);
  for (int device = 0; device < g_bound_count; ++device) {
    if (address < g_bounds[device].base || address >= g_bounds[device].end) continue;
    write_text("frugal emulated CUDA: host code touched device memory of cuda:");
    const char digit[2] = {static_cast<char>('0' + device), '\0'};
    write_text(digit);
    write_text(" at ");
    write_hex(address);
    write_text(": device memory is not host memory (copy it to the host first), or the access is out of "
               "bounds or after cudaFree\n");
    break;
  }
  // Then whatever handled it before (the sanitizer's report, or the default: a core dump).
  if ((g_previous_segv.sa_flags & SA_SIGINFO) && g_previous_segv.sa_sigaction) {
    g_previous_segv.sa_sigaction(signal_number, info, context);
    return;
  }
  if (g_previous_segv.sa_handler != SIG_DFL && g_previous_segv.sa_handler != SIG_IGN && g_previous_segv.sa_handler) {
    g_previous_segv.sa_handler(signal_number);
    return;
  }
  signal(signal_number, SIG_DFL);
  raise(signal_number);
}

}  // namespace

void install_fault_handler() {
  struct sigaction action {}, previous {};
  action.sa_sigaction = on_segv;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, &previous);
  // Installed twice in a row, it must not hand a fault on to itself.
  if (!((previous.sa_flags & SA_SIGINFO) && previous.sa_sigaction == on_segv)) g_previous_segv = previous;
}

namespace {

Memory& memory() {
  // Never destroyed: allocators and events may call in during static destruction at exit.
  static Memory* const state = [] {
    auto* m = new Memory;
    const int count = static_cast<int>(environment_number("FRUGAL_EMULATED_DEVICES", 1, 1, kMaxDevices));
    const std::size_t capacity = environment_number("FRUGAL_EMULATED_MEMORY_MIB", kDefaultCapacityMiB, 64, 1 << 20) * kMiB;
    for (int device = 0; device < count; ++device) {
      Arena arena;
      arena.capacity = capacity;
      arena.span = kAddressSpace;
      void* base = mmap(nullptr, arena.span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (base == MAP_FAILED) break;  // no address space: fewer devices
      arena.base = reinterpret_cast<std::uintptr_t>(base);
      arena.free_ranges.emplace(arena.base, arena.span);
      g_bounds[device] = {arena.base, arena.base + arena.span};
      m->arenas.push_back(std::move(arena));
    }
    g_bound_count = static_cast<int>(m->arenas.size());
    install_fault_handler();
    return m;
  }();
  return *state;
}

Arena* arena_of(std::uintptr_t address) {
  for (Arena& arena : memory().arenas)
    if (arena.contains(address)) return &arena;
  return nullptr;
}

// Address space, first fit, aligned; 0 when none is left.
std::uintptr_t take_range(Arena& arena, std::size_t bytes, std::size_t alignment) {
  for (auto it = arena.free_ranges.begin(); it != arena.free_ranges.end(); ++it) {
    const std::uintptr_t begin = it->first, end = it->first + it->second;
    const std::uintptr_t aligned = round_up(begin, alignment);
    if (aligned + bytes > end) continue;
    arena.free_ranges.erase(it);
    if (aligned > begin) arena.free_ranges.emplace(begin, aligned - begin);
    if (aligned + bytes < end) arena.free_ranges.emplace(aligned + bytes, end - aligned - bytes);
    return aligned;
  }
  return 0;
}

void give_range(Arena& arena, std::uintptr_t begin, std::size_t bytes) {
  auto next = arena.free_ranges.lower_bound(begin);
  if (next != arena.free_ranges.end() && begin + bytes == next->first) {
    bytes += next->second;
    next = arena.free_ranges.erase(next);
  }
  if (next != arena.free_ranges.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second == begin) {
      previous->second += bytes;
      return;
    }
  }
  arena.free_ranges.emplace(begin, bytes);
}

void protect(std::uintptr_t begin, std::size_t bytes, bool accessible) {
  if (mprotect(reinterpret_cast<void*>(begin), round_up(bytes, kPage), accessible ? PROT_READ | PROT_WRITE : PROT_NONE) == 0)
    return;
  // Past vm.max_map_count mappings the kernel refuses; going on would fault later with a false story.
  std::fprintf(stderr, "frugal emulated CUDA: mprotect of %zu bytes at %p failed (%s): too many device blocks "
               "for the host's vm.max_map_count?\n", bytes, reinterpret_cast<void*>(begin), std::strerror(errno));
  std::abort();
}

// A block joins the accessible ones: readable by device work from now on, and for ASan exactly its
// bytes (the page-rounded tail stays poisoned).
void add_block(Arena& arena, std::uintptr_t begin, std::size_t bytes, bool malloced) {
  arena.blocks.emplace(begin, bytes);
  arena.from_malloc[begin] = malloced;
  FRUGAL_ASAN_UNPOISON(reinterpret_cast<void*>(begin), bytes);
  if (round_up(bytes, kPage) > bytes) FRUGAL_ASAN_POISON(reinterpret_cast<void*>(begin + bytes), round_up(bytes, kPage) - bytes);
  protect(begin, bytes, memory().access_depth > 0);
}

void remove_block(Arena& arena, std::uintptr_t begin) {
  const std::size_t bytes = arena.blocks.at(begin);
  protect(begin, bytes, false);
  FRUGAL_ASAN_POISON(reinterpret_cast<void*>(begin), round_up(bytes, kPage));
  arena.blocks.erase(begin);
  arena.from_malloc.erase(begin);
}

std::string hex(std::uintptr_t value) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

std::string in_use_account(const char* call, std::uintptr_t begin, std::size_t bytes) {
  const std::string use = pending_use(begin, bytes);
  if (use.empty()) return {};
  return std::string(call) + "(" + hex(begin) + ", " + std::to_string(bytes) + " bytes): still used by " + use +
         "; wait for that stream (synchronize, or an event) before freeing";
}

}  // namespace

int emulated_device_count() { return static_cast<int>(memory().arenas.size()); }
std::size_t device_capacity(int device) { return memory().arenas.at(device).capacity; }
std::size_t device_used(int device) { return memory().arenas.at(device).used; }

Place locate(const void* pointer) {
  std::lock_guard lock(runtime_mutex());
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  Memory& m = memory();
  for (std::size_t device = 0; device < m.arenas.size(); ++device) {
    const Arena& arena = m.arenas[device];
    if (!arena.contains(address)) continue;
    Place place{MemoryKind::device, static_cast<int>(device), 0, 0};
    auto block = arena.blocks.upper_bound(address);
    if (block == arena.blocks.begin()) return place;
    --block;
    if (address > block->first + block->second) return place;
    // Chunks mapped side by side (an expandable segment) are one stretch of memory, as on a GPU;
    // cudaMalloc blocks never touch (a guard page lies between them).
    auto first = block, last = block;
    while (first != arena.blocks.begin() && std::prev(first)->first + std::prev(first)->second == first->first) --first;
    for (auto next = std::next(last); next != arena.blocks.end() && last->first + last->second == next->first; ++next) last = next;
    place.begin = first->first;
    place.bytes = last->first + last->second - first->first;
    return place;
  }
  auto pinned = m.pinned.upper_bound(address);
  if (pinned != m.pinned.begin()) {
    --pinned;
    if (address <= pinned->first + pinned->second) return {MemoryKind::pinned, -1, pinned->first, pinned->second};
  }
  return {};
}

std::string describe(const void* pointer) {
  const Place place = locate(pointer);
  const std::string address = hex(reinterpret_cast<std::uintptr_t>(pointer));
  switch (place.kind) {
    case MemoryKind::device:
      return place.begin ? "cuda:" + std::to_string(place.device) + " memory " + address
                         : "cuda:" + std::to_string(place.device) + " address " + address + " in no allocation (freed, or out of bounds)";
    case MemoryKind::pinned: return "pinned host memory " + address;
    case MemoryKind::pageable: break;
  }
  return "pageable host memory " + address;
}

DeviceAccess::DeviceAccess() {
  std::lock_guard lock(runtime_mutex());
  Memory& m = memory();
  if (m.access_depth++ > 0) return;
  for (Arena& arena : m.arenas)
    for (const auto& [begin, bytes] : arena.blocks) protect(begin, bytes, true);
}

DeviceAccess::~DeviceAccess() {
  std::lock_guard lock(runtime_mutex());
  Memory& m = memory();
  if (--m.access_depth > 0) return;
  for (Arena& arena : m.arenas)
    for (const auto& [begin, bytes] : arena.blocks) protect(begin, bytes, false);
}

void poison(void* pointer, std::size_t bytes) {
  if (bytes == 0) return;
  std::memset(pointer, kPoisonByte, bytes);
  counters().poisoned_bytes += static_cast<std::int64_t>(bytes);
}

void poison_device(void* pointer, std::size_t bytes) {
  DeviceAccess access;
  poison(pointer, bytes);
}

}  // namespace frugal::emu::runtime

using namespace frugal::emu::runtime;

// ---- the runtime's memory calls

cudaError_t cudaMalloc(void** pointer, std::size_t bytes) {
  std::lock_guard lock(runtime_mutex());
  if (!pointer) return fail(cudaErrorInvalidValue, "cudaMalloc: the result pointer is null");
  *pointer = nullptr;
  const int device = current_device();
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice, "cudaMalloc: no device " + std::to_string(device));
  if (bytes == 0) return cudaSuccess;
  Arena& arena = memory().arenas[device];
  if (bytes > arena.capacity - arena.used)
    return fail(cudaErrorMemoryAllocation, "cudaMalloc: out of memory: " + std::to_string(bytes) + " bytes requested, " +
                                               std::to_string(arena.capacity - arena.used) + " of " +
                                               std::to_string(arena.capacity) + " free on cuda:" + std::to_string(device));
  const std::uintptr_t begin = take_range(arena, round_up(bytes, kPage) + kPage, kPage);  // + an unmapped guard page
  if (!begin) return fail(cudaErrorMemoryAllocation, "cudaMalloc: the emulated device's address space is exhausted");
  arena.used += bytes;
  add_block(arena, begin, bytes, true);
  poison_device(reinterpret_cast<void*>(begin), bytes);  // fresh memory reads as NaN until written
  *pointer = reinterpret_cast<void*>(begin);
  return cudaSuccess;
}

cudaError_t cudaFree(void* pointer) {
  std::lock_guard lock(runtime_mutex());
  if (!pointer) return cudaSuccess;
  const auto begin = reinterpret_cast<std::uintptr_t>(pointer);
  Arena* arena = arena_of(begin);
  if (!arena || !arena->blocks.contains(begin) || !arena->from_malloc.at(begin))
    return fail(cudaErrorInvalidValue, "cudaFree: " + describe(pointer) + " is not a pointer cudaMalloc returned");
  const std::size_t bytes = arena->blocks.at(begin);
  if (std::string account = in_use_account("cudaFree", begin, bytes); !account.empty())
    return fail(cudaErrorIllegalState, std::move(account));
  remove_block(*arena, begin);
  madvise(pointer, round_up(bytes, kPage), MADV_DONTNEED);  // the host's memory goes back
  give_range(*arena, begin, round_up(bytes, kPage) + kPage);
  arena->used -= bytes;
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** pointer, std::size_t bytes, unsigned int flags) {
  std::lock_guard lock(runtime_mutex());
  if (!pointer) return fail(cudaErrorInvalidValue, "cudaHostAlloc: the result pointer is null");
  if (flags != cudaHostAllocDefault) return fail(cudaErrorInvalidValue, "cudaHostAlloc: only cudaHostAllocDefault is emulated");
  // Its own host allocation, so ASan sees its bounds.
  void* host = std::aligned_alloc(kPage, round_up(std::max<std::size_t>(bytes, 1), kPage));
  if (!host) return fail(cudaErrorMemoryAllocation, "cudaHostAlloc: the host has no " + std::to_string(bytes) + " bytes");
  memory().pinned.emplace(reinterpret_cast<std::uintptr_t>(host), bytes);
  poison(host, bytes);
  *pointer = host;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* pointer) {
  std::lock_guard lock(runtime_mutex());
  if (!pointer) return cudaSuccess;
  const auto begin = reinterpret_cast<std::uintptr_t>(pointer);
  auto it = memory().pinned.find(begin);
  if (it == memory().pinned.end())
    return fail(cudaErrorInvalidValue, "cudaFreeHost: " + describe(pointer) + " is not a pointer cudaHostAlloc returned");
  if (std::string account = in_use_account("cudaFreeHost", begin, it->second); !account.empty())
    return fail(cudaErrorIllegalState, std::move(account));
  memory().pinned.erase(it);
  std::free(pointer);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(std::size_t* free, std::size_t* total) {
  std::lock_guard lock(runtime_mutex());
  const int device = current_device();
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice, "cudaMemGetInfo: no device " + std::to_string(device));
  if (!free || !total) return fail(cudaErrorInvalidValue, "cudaMemGetInfo: a result pointer is null");
  const Arena& arena = memory().arenas[device];
  *total = arena.capacity;
  *free = arena.capacity - arena.used;
  return cudaSuccess;
}

// ---- the driver's virtual memory management

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  std::lock_guard lock(runtime_mutex());
  if (!device) return fail_driver(CUDA_ERROR_INVALID_VALUE, "cuDeviceGet: the result pointer is null");
  if (!valid_device(ordinal)) return fail_driver(CUDA_ERROR_INVALID_DEVICE, "cuDeviceGet: no device " + std::to_string(ordinal));
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice device) {
  std::lock_guard lock(runtime_mutex());
  if (!value || !valid_device(device)) return fail_driver(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetAttribute: bad device or pointer");
  if (attribute != CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)
    return fail_driver(CUDA_ERROR_NOT_SUPPORTED, "cuDeviceGetAttribute: attribute " + std::to_string(attribute) + " is not emulated");
  *value = 1;
  return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationGranularity(std::size_t* granularity, const CUmemAllocationProp* prop,
                                       CUmemAllocationGranularity_flags) {
  if (!granularity || !prop) return fail_driver(CUDA_ERROR_INVALID_VALUE, "cuMemGetAllocationGranularity: a pointer is null");
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr* pointer, std::size_t size, std::size_t alignment, CUdeviceptr address,
                             unsigned long long flags) {
  std::lock_guard lock(runtime_mutex());
  if (!pointer || size == 0 || size % kGranularity != 0 || address != 0 || flags != 0)
    return fail_driver(CUDA_ERROR_INVALID_VALUE, "cuMemAddressReserve: size must be a positive multiple of the granularity, "
                                                 "with no fixed address or flags");
  const int device = current_device();
  if (!valid_device(device)) return fail_driver(CUDA_ERROR_INVALID_DEVICE, "cuMemAddressReserve: no current device");
  Arena& arena = memory().arenas[device];
  // + an unmapped guard page, so that chunks mapped at its end never touch the next allocation.
  const std::uintptr_t begin = take_range(arena, size + kPage, std::max(alignment, kGranularity));
  if (!begin) return fail_driver(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAddressReserve: no address space left for " + std::to_string(size) + " bytes");
  arena.reservations.emplace(begin, size);
  *pointer = begin;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr pointer, std::size_t size) {
  std::lock_guard lock(runtime_mutex());
  Arena* arena = arena_of(pointer);
  if (!arena || !arena->reservations.contains(pointer) || arena->reservations.at(pointer) != size)
    return fail_driver(CUDA_ERROR_INVALID_VALUE, "cuMemAddressFree: " + hex(pointer) + " (" + std::to_string(size) +
                                                     " bytes) is not a range cuMemAddressReserve returned");
  auto mapped = arena->mappings.lower_bound(pointer);
  if (mapped != arena->mappings.end() && mapped->first < pointer + size)
    return fail_driver(CUDA_ERROR_ILLEGAL_STATE, "cuMemAddressFree: " + hex(mapped->first) + " is still mapped (cuMemUnmap first)");
  arena->reservations.erase(pointer);
  give_range(*arena, pointer, size + kPage);
  return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, std::size_t size, const CUmemAllocationProp* prop,
                     unsigned long long flags) {
  std::lock_guard lock(runtime_mutex());
  if (!handle || !prop || flags != 0 || size == 0 || size % kGranularity != 0 ||
      prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return fail_driver(CUDA_ERROR_INVALID_VALUE, "cuMemCreate: needs pinned device memory, a positive multiple of the "
                                                 "granularity in size");
  const int device = prop->location.id;
  if (!valid_device(device)) return fail_driver(CUDA_ERROR_INVALID_DEVICE, "cuMemCreate: no device " + std::to_string(device));
  Arena& arena = memory().arenas[device];
  if (size > arena.capacity - arena.used)
    return fail_driver(CUDA_ERROR_OUT_OF_MEMORY, "cuMemCreate: out of memory: " + std::to_string(size) + " bytes requested, " +
                                                     std::to_string(arena.capacity - arena.used) + " free");
  const int fd = memfd_create("frugal-emulated-chunk", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    if (fd >= 0) close(fd);
    return fail_driver(CUDA_ERROR_OUT_OF_MEMORY, "cuMemCreate: the host refused a memfd of " + std::to_string(size) + " bytes");
  }
  // Fresh physical memory reads as NaN until written, as cudaMalloc's does.
  void* view = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (view != MAP_FAILED) {
    poison(view, size);
    munmap(view, size);
  }
  arena.used += size;
  const CUmemGenericAllocationHandle id = memory().next_handle++;
  memory().chunks.emplace(id, Chunk{fd, size, device, 0, false});
  *handle = id;
  return CUDA_SUCCESS;
}

namespace {
void drop_chunk_if_done(CUmemGenericAllocationHandle handle) {
  Chunk& chunk = memory().chunks.at(handle);
  if (!chunk.released || chunk.mappings > 0) return;  // the memory goes with its last use
  close(chunk.fd);
  memory().arenas[chunk.device].used -= chunk.bytes;
  memory().chunks.erase(handle);
}
}  // namespace

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  std::lock_guard lock(runtime_mutex());
  auto it = memory().chunks.find(handle);
  if (it == memory().chunks.end() || it->second.released)
    return fail_driver(CUDA_ERROR_INVALID_HANDLE, "cuMemRelease: " + std::to_string(handle) + " is not a live cuMemCreate handle");
  it->second.released = true;
  drop_chunk_if_done(handle);
  return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr pointer, std::size_t size, std::size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  std::lock_guard lock(runtime_mutex());
  auto chunk = memory().chunks.find(handle);
  if (chunk == memory().chunks.end() || chunk->second.released)
    return fail_driver(CUDA_ERROR_INVALID_HANDLE, "cuMemMap: " + std::to_string(handle) + " is not a live cuMemCreate handle");
  if (flags != 0 || size == 0 || offset + size > chunk->second.bytes || size % kGranularity != 0 || offset % kGranularity != 0)
    return fail_driver(CUDA_ERROR_INVALID_VALUE, "cuMemMap: the size and offset must be granularity multiples within the chunk");
  Arena* arena = arena_of(pointer);
  bool reserved = false;
  if (arena) {
    auto reservation = arena->reservations.upper_bound(pointer);
    if (reservation != arena->reservations.begin()) {
      --reservation;
      reserved = pointer + size <= reservation->first + reservation->second;
    }
  }
  if (!reserved) return fail_driver(CUDA_ERROR_INVALID_VALUE, "cuMemMap: " + hex(pointer) + " is not inside a reserved range");
  auto next = arena->mappings.lower_bound(pointer);
  const bool overlaps_next = next != arena->mappings.end() && next->first < pointer + size;
  const bool overlaps_previous = next != arena->mappings.begin() && std::prev(next)->first + std::prev(next)->second.bytes > pointer;
  if (overlaps_next || overlaps_previous)
    return fail_driver(CUDA_ERROR_INVALID_VALUE, "cuMemMap: " + hex(pointer) + " is already mapped");
  if (mmap(reinterpret_cast<void*>(pointer), size, PROT_NONE, MAP_SHARED | MAP_FIXED, chunk->second.fd,
           static_cast<off_t>(offset)) == MAP_FAILED)
    return fail_driver(CUDA_ERROR_OUT_OF_MEMORY, "cuMemMap: the host could not map the chunk");
  arena->mappings.emplace(pointer, Mapping{size, handle});
  ++chunk->second.mappings;
  return CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr pointer, std::size_t size, const CUmemAccessDesc* desc, std::size_t count) {
  std::lock_guard lock(runtime_mutex());
  if (!desc || count != 1 || desc->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
    return fail_driver(CUDA_ERROR_INVALID_VALUE, "cuMemSetAccess: one read-write access descriptor is emulated");
  Arena* arena = arena_of(pointer);
  if (!arena) return fail_driver(CUDA_ERROR_INVALID_VALUE, "cuMemSetAccess: " + hex(pointer) + " is not device address space");
  std::size_t covered = 0;
  for (auto it = arena->mappings.lower_bound(pointer); it != arena->mappings.end() && it->first < pointer + size; ++it) {
    if (!arena->blocks.contains(it->first)) add_block(*arena, it->first, it->second.bytes, false);
    covered += it->second.bytes;
  }
  if (covered != size) return fail_driver(CUDA_ERROR_INVALID_VALUE, "cuMemSetAccess: part of " + hex(pointer) + " is not mapped");
  return CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr pointer, std::size_t size) {
  std::lock_guard lock(runtime_mutex());
  Arena* arena = arena_of(pointer);
  if (!arena || !arena->mappings.contains(pointer))
    return fail_driver(CUDA_ERROR_INVALID_VALUE, "cuMemUnmap: " + hex(pointer) + " does not start a mapping");
  if (std::string account = in_use_account("cuMemUnmap", pointer, size); !account.empty())
    return fail_driver(CUDA_ERROR_ILLEGAL_STATE, std::move(account));
  for (auto it = arena->mappings.lower_bound(pointer); it != arena->mappings.end() && it->first < pointer + size;) {
    if (it->first + it->second.bytes > pointer + size)
      return fail_driver(CUDA_ERROR_INVALID_VALUE, "cuMemUnmap: cannot unmap part of the mapping at " + hex(it->first));
    if (arena->blocks.contains(it->first)) remove_block(*arena, it->first);
    // Back to reserved address space that nothing backs.
    mmap(reinterpret_cast<void*>(it->first), it->second.bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    const CUmemGenericAllocationHandle handle = it->second.handle;
    it = arena->mappings.erase(it);
    --memory().chunks.at(handle).mappings;
    drop_chunk_if_done(handle);
  }
  return CUDA_SUCCESS;
}
