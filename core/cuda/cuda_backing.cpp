// The CUDA backings of the caching allocator (see core/backing.h):
//   CudaBacking         one device's memory: cudaMalloc segments, CUDA events for stream order, and
//                       expandable segments through the driver's virtual memory management API.
//   PinnedHostBacking   page-locked host memory (cudaHostAlloc) for the data loader's staging
//                       buffers; plain aligned host memory when CUDA is not usable.
// Deliberately not here: any policy (rounding, pools, splitting, retries, OOM messages), which lives
// in CachingAllocator; and libcuda at link time: the driver's functions are looked up at run time
// through the runtime (cudaGetDriverEntryPointByVersion), so binaries start on machines with no
// driver and say so.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "core/caching_allocator.h"
#include "core/cuda/check.h"
#include "core/cuda/runtime.h"

namespace frugal::cuda {

namespace {

// ---- the driver's virtual memory API, looked up at run time

// The CUDA version whose ABI the _vNNNN typedefs below describe: asking for it returns exactly those
// versions (the memory-mapping calls have not changed since CUDA 10.2). A CUDA 13 runtime only runs
// on a driver at least this new, so the lookup never asks for more than the driver has.
constexpr unsigned kDriverAbiVersion = 12000;

struct DriverApi {
  PFN_cuGetErrorString_v6000 get_error_string = nullptr;
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuDeviceGetAttribute_v2000 device_get_attribute = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 mem_get_allocation_granularity = nullptr;
  PFN_cuMemAddressReserve_v10020 mem_address_reserve = nullptr;
  PFN_cuMemAddressFree_v10020 mem_address_free = nullptr;
  PFN_cuMemCreate_v10020 mem_create = nullptr;
  PFN_cuMemMap_v10020 mem_map = nullptr;
  PFN_cuMemSetAccess_v10020 mem_set_access = nullptr;
  PFN_cuMemUnmap_v10020 mem_unmap = nullptr;
  PFN_cuMemRelease_v10020 mem_release = nullptr;

  bool has_virtual_memory() const {
    return device_get && device_get_attribute && mem_get_allocation_granularity && mem_address_reserve &&
           mem_address_free && mem_create && mem_map && mem_set_access && mem_unmap && mem_release;
  }
};

// Leaves `fn` null when the driver lacks the symbol: the caller then goes without that feature.
template <typename Fn>
void look_up(const char* symbol, Fn& fn) {
  void* address = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(symbol, &address, kDriverAbiVersion, cudaEnableDefault, &found) !=
      cudaSuccess) {
    cudaGetLastError();  // a failed lookup must not surface in a later, unrelated check
    return;
  }
  if (found == cudaDriverEntryPointSuccess) fn = reinterpret_cast<Fn>(address);
}

const DriverApi& driver() {
  static const DriverApi api = [] {
    DriverApi a;
    look_up("cuGetErrorString", a.get_error_string);
    look_up("cuDeviceGet", a.device_get);
    look_up("cuDeviceGetAttribute", a.device_get_attribute);
    look_up("cuMemGetAllocationGranularity", a.mem_get_allocation_granularity);
    look_up("cuMemAddressReserve", a.mem_address_reserve);
    look_up("cuMemAddressFree", a.mem_address_free);
    look_up("cuMemCreate", a.mem_create);
    look_up("cuMemMap", a.mem_map);
    look_up("cuMemSetAccess", a.mem_set_access);
    look_up("cuMemUnmap", a.mem_unmap);
    look_up("cuMemRelease", a.mem_release);
    return a;
  }();
  return api;
}

std::string driver_error_string(CUresult status) {
  const char* text = nullptr;
  if (driver().get_error_string && driver().get_error_string(status, &text) == CUDA_SUCCESS && text) return text;
  return "no description (cuGetErrorString unavailable)";
}

}  // namespace

#define FRUGAL_CU_CHECK(call) FRUGAL_LIBRARY_CHECK("CUDA driver", call, CUDA_SUCCESS, driver_error_string)

namespace {

std::size_t round_up(std::size_t bytes, std::size_t multiple) { return (bytes + multiple - 1) / multiple * multiple; }

CUdeviceptr device_address(void* ptr) { return reinterpret_cast<CUdeviceptr>(ptr); }

// ---- CudaBacking

class CudaBacking final : public Backing {
 public:
  explicit CudaBacking(int index);
  std::string_view name() const override { return "cuda"; }
  bool supports_expandable() const override { return expandable_; }
  std::size_t map_granularity() const override { return granularity_; }

  Event record_event(Stream stream) override;
  bool event_done(Event event) override;
  void wait_event(Event event) override;
  void destroy_event(Event event) override;

 protected:
  void* do_allocate(std::size_t bytes, Stream stream) override;
  void do_free(void* ptr, std::size_t bytes) override;
  void* do_reserve(std::size_t bytes) override;
  void do_release(void* base, std::size_t bytes) override;
  bool do_map(void* address, std::size_t bytes) override;
  void do_unmap(void* address, std::size_t bytes) override;
  MemoryInfo device_memory() const override;

 private:
  void use_device() const { FRUGAL_CUDA_CHECK(cudaSetDevice(index_)); }  // calls act on the current device
  bool map_chunk(CUdeviceptr at);
  void unmap_chunks(CUdeviceptr begin, CUdeviceptr end);

  int index_;
  bool expandable_ = false;
  std::size_t granularity_ = kExpandableChunk;
  CUmemAllocationProp chunk_properties_{};  // physical memory on this device, no export handles
  CUmemAccessDesc access_{};                // read and write, from this device
  std::mutex chunks_mutex_;
  std::map<CUdeviceptr, CUmemGenericAllocationHandle> chunks_;  // one handle per mapped chunk
};

CudaBacking::CudaBacking(int index) : Backing(Device::cuda(index)), index_(index) {
  use_device();  // also creates the primary context, which the driver calls below need
  const DriverApi& api = driver();
  if (!api.has_virtual_memory()) return;
  CUdevice device = 0;
  int supported = 0;
  FRUGAL_CU_CHECK(api.device_get(&device, index));
  FRUGAL_CU_CHECK(api.device_get_attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device));
  if (!supported) return;

  chunk_properties_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  chunk_properties_.location = {CU_MEM_LOCATION_TYPE_DEVICE, index};
  access_.location = chunk_properties_.location;
  access_.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  std::size_t recommended = 0;
  FRUGAL_CU_CHECK(api.mem_get_allocation_granularity(&recommended, &chunk_properties_,
                                                     CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  // Never below the allocator's chunk: fewer handles and map calls, and sizes stay 2 MiB multiples.
  granularity_ = round_up(recommended, kExpandableChunk);
  expandable_ = true;
}

void* CudaBacking::do_allocate(std::size_t bytes, Stream) {
  use_device();
  void* ptr = nullptr;
  const cudaError_t error = cudaMalloc(&ptr, bytes);
  if (error == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky, but it would surface in the next unrelated check: clear it
    return nullptr;      // the allocator decides what lack of memory means
  }
  FRUGAL_CUDA_CHECK(error);
  return ptr;
}

void CudaBacking::do_free(void* ptr, std::size_t) {
  // At process exit the runtime may be torn down before a static allocator frees its cache; the
  // memory goes with the process anyway, so that is the one error let pass.
  if (cudaSetDevice(index_) == cudaErrorCudartUnloading) return;
  // A block freed on its own stream is free before the kernels queued on it have run: wait for them
  // (as do_unmap does) rather than count on cudaFree's own synchronisation, which CUDA does not
  // promise for every case and the emulated runtime does not give (docs/cuda-emulator.md).
  FRUGAL_CUDA_CHECK(cudaDeviceSynchronize());
  const cudaError_t error = cudaFree(ptr);
  if (error == cudaErrorCudartUnloading) return;
  FRUGAL_CUDA_CHECK(error);
}

void* CudaBacking::do_reserve(std::size_t bytes) {
  use_device();
  CUdeviceptr base = 0;
  const CUresult status = driver().mem_address_reserve(&base, round_up(bytes, granularity_), granularity_, 0, 0);
  if (status == CUDA_ERROR_OUT_OF_MEMORY) return nullptr;  // no address space: fixed segments instead
  FRUGAL_CU_CHECK(status);
  return reinterpret_cast<void*>(base);
}

void CudaBacking::do_release(void* base, std::size_t bytes) {
  FRUGAL_CU_CHECK(driver().mem_address_free(device_address(base), round_up(bytes, granularity_)));
}

// Maps one granularity-sized chunk with a handle of its own, so any chunk-aligned tail can be
// unmapped later: cuMemUnmap cannot unmap part of a mapping. False when the device is full.
// Called with chunks_mutex_ held.
bool CudaBacking::map_chunk(CUdeviceptr at) {
  const DriverApi& api = driver();
  CUmemGenericAllocationHandle handle = 0;
  const CUresult created = api.mem_create(&handle, granularity_, &chunk_properties_, 0);
  if (created == CUDA_ERROR_OUT_OF_MEMORY) return false;
  FRUGAL_CU_CHECK(created);
  const CUresult mapped = api.mem_map(at, granularity_, 0, handle, 0);
  if (mapped != CUDA_SUCCESS) api.mem_release(handle);  // nothing else holds it
  if (mapped == CUDA_ERROR_OUT_OF_MEMORY) return false;
  FRUGAL_CU_CHECK(mapped);
  chunks_.emplace(at, handle);  // from here on unmap_chunks can undo it, even if the next call fails
  const CUresult access = api.mem_set_access(at, granularity_, &access_, 1);  // new mappings start inaccessible
  if (access == CUDA_ERROR_OUT_OF_MEMORY) return false;  // do_map unmaps what this call mapped
  FRUGAL_CU_CHECK(access);
  return true;
}

void CudaBacking::unmap_chunks(CUdeviceptr begin, CUdeviceptr end) {
  const DriverApi& api = driver();
  for (auto chunk = chunks_.lower_bound(begin); chunk != chunks_.end() && chunk->first < end;
       chunk = chunks_.erase(chunk)) {
    FRUGAL_CU_CHECK(api.mem_unmap(chunk->first, granularity_));
    FRUGAL_CU_CHECK(api.mem_release(chunk->second));  // the physical memory goes back with its last use
  }
}

bool CudaBacking::do_map(void* address, std::size_t bytes) {
  FRUGAL_CHECK(bytes % granularity_ == 0, "cuda backing: map of ", bytes, " bytes is not a multiple of the ",
               granularity_, "-byte granularity");
  use_device();
  std::lock_guard lock(chunks_mutex_);
  const CUdeviceptr begin = device_address(address);
  std::size_t done = 0;
  try {
    while (done < bytes && map_chunk(begin + done)) done += granularity_;
  } catch (...) {
    unmap_chunks(begin, begin + bytes);  // a mapping is all or nothing
    throw;
  }
  if (done == bytes) return true;
  unmap_chunks(begin, begin + done);  // the device filled up part-way: give back what this call took
  return false;
}

void CudaBacking::do_unmap(void* address, std::size_t bytes) {
  use_device();
  // Unlike cudaFree, cuMemUnmap does not wait for queued work that may still read the chunk (a
  // block freed on its own stream is free before its kernels end), so wait for the device first.
  FRUGAL_CUDA_CHECK(cudaDeviceSynchronize());
  std::lock_guard lock(chunks_mutex_);
  const CUdeviceptr begin = device_address(address);
  unmap_chunks(begin, begin + bytes);
}

Backing::MemoryInfo CudaBacking::device_memory() const {
  use_device();
  MemoryInfo info;
  FRUGAL_CUDA_CHECK(cudaMemGetInfo(&info.free, &info.total));
  return info;
}

// Events for stream order, shared by both backings: a block freed while a stream may still use it
// waits until the event recorded on that stream at free time has completed.
Backing::Event record_cuda_event(Stream stream) {
  cudaEvent_t event = nullptr;
  FRUGAL_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));  // timing costs, and is unused
  FRUGAL_CUDA_CHECK(cudaEventRecord(event, static_cast<cudaStream_t>(stream.handle)));
  return event;
}

bool cuda_event_done(Backing::Event event) {
  const cudaError_t status = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (status == cudaErrorNotReady) {
    cudaGetLastError();  // "not yet" is an answer, not an error: keep it out of later checks
    return false;
  }
  FRUGAL_CUDA_CHECK(status);
  return true;
}

void wait_cuda_event(Backing::Event event) {
  FRUGAL_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
}

void destroy_cuda_event(Backing::Event event) {
  const cudaError_t status = cudaEventDestroy(static_cast<cudaEvent_t>(event));
  if (status == cudaErrorCudartUnloading) return;  // as in do_free: at exit, the event goes with the process
  FRUGAL_CUDA_CHECK(status);
}

Backing::Event CudaBacking::record_event(Stream stream) {
  use_device();  // an event belongs to the device current when it is created
  return record_cuda_event(stream);
}

bool CudaBacking::event_done(Event event) { return cuda_event_done(event); }

void CudaBacking::wait_event(Event event) { wait_cuda_event(event); }

void CudaBacking::destroy_event(Event event) { destroy_cuda_event(event); }

// ---- PinnedHostBacking

constexpr std::size_t kHostAlignment = 64;  // a cache line, and the widest vector load (AVX-512)

class PinnedHostBacking final : public Backing {
 public:
  PinnedHostBacking() : Backing(Device::cpu()) {}
  std::string_view name() const override { return "pinned-host"; }
  // Staging buffers feed asynchronous copies: a buffer freed while a copy stream still reads it
  // (record_stream) must wait for that stream, as device memory does. Without CUDA nothing is async.
  Event record_event(Stream stream) override { return pinned_ ? record_cuda_event(stream) : nullptr; }
  bool event_done(Event event) override { return !pinned_ || cuda_event_done(event); }
  void wait_event(Event event) override {
    if (pinned_) wait_cuda_event(event);
  }
  void destroy_event(Event event) override {
    if (pinned_) destroy_cuda_event(event);
  }

 protected:
  void* do_allocate(std::size_t bytes, Stream stream) override;
  void do_free(void* ptr, std::size_t bytes) override;
  MemoryInfo device_memory() const override;

 private:
  // Decided once: memory from one source must go back to the same one.
  const bool pinned_ = cuda_available();
};

void* PinnedHostBacking::do_allocate(std::size_t bytes, Stream) {
  if (!pinned_) {
    if (bytes > SIZE_MAX - kHostAlignment) return nullptr;  // rounding up would wrap around
    return std::aligned_alloc(kHostAlignment, round_up(bytes, kHostAlignment));  // wants a multiple
  }
  void* ptr = nullptr;
  const cudaError_t error = cudaHostAlloc(&ptr, bytes, cudaHostAllocDefault);
  if (error == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // as in CudaBacking::do_allocate
    return nullptr;
  }
  FRUGAL_CUDA_CHECK(error);
  return ptr;
}

void PinnedHostBacking::do_free(void* ptr, std::size_t) {
  if (!pinned_) {
    std::free(ptr);
    return;
  }
  const cudaError_t error = cudaFreeHost(ptr);
  if (error == cudaErrorCudartUnloading) return;  // as in CudaBacking::do_free
  FRUGAL_CUDA_CHECK(error);
}

Backing::MemoryInfo PinnedHostBacking::device_memory() const {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return {static_cast<std::size_t>(sysconf(_SC_PHYS_PAGES)) * page,
          static_cast<std::size_t>(sysconf(_SC_AVPHYS_PAGES)) * page};
}

}  // namespace

std::unique_ptr<Backing> make_cuda_backing(int index) {
  const CudaStatus& status = cuda_status();
  FRUGAL_CHECK_DEVICE(status.usable, "cannot use cuda:", index, ": ", status.reason);
  FRUGAL_CHECK_DEVICE(index >= 0 && index < status.device_count, "cannot use cuda:", index, ": only ",
                      status.device_count, " CUDA device(s) visible");
  return std::make_unique<CudaBacking>(index);
}

std::unique_ptr<Backing> make_pinned_host_backing() { return std::make_unique<PinnedHostBacking>(); }

}  // namespace frugal::cuda
