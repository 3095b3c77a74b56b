// The emulated CUDA runtime (see emulated_runtime.h and include/cuda_runtime.h): errors, devices,
// streams and events, copies, memsets, host functions and kernel launches, each as the CUDA runtime
// documents it, on the CPU. Device memory and the driver's virtual memory calls are in memory.cpp.
//
// Note [Deferred work and poison]
// On a GPU, a launch or an asynchronous copy returns before the work runs; a program that reads the
// result without waiting is wrong, yet often passes, because the work happened to finish first. The
// emulator makes that luck impossible:
//   - Work is queued on its stream and runs only when something waits for it: a stream, event or
//     device synchronize, a blocking copy, or another stream's cudaStreamWaitEvent being run; and
//     a new copy or memset first runs what its stream has queued (see the next point). Until then
//     nothing of it has happened.
//   - The destination of a queued copy or memset is filled with 0xFF bytes (NaN, -1) when it is
//     queued, after the work queued before it on its stream has run (that work may read the old
//     bytes, legitimately); fresh cudaMalloc, cuMemCreate and cudaHostAlloc memory is filled so too.
//     A reader not ordered after the copy (the host reading pinned memory before a synchronize, a
//     kernel on another stream without an event) reads poison, and a test fails.
// A kernel's outputs cannot be poisoned at launch (which bytes it writes is the kernel's business),
// but they are not written until it runs; with FRUGAL_ALLOC=direct each output is a fresh, poisoned
// block, so an early reader sees NaN there too.
// The legacy default stream (stream 0) waits for every blocking stream of its device and they for
// it; streams made with cudaStreamNonBlocking wait for nothing they are not told to. Host functions
// (cudaLaunchHostFunc) run like any queued item: with device memory readable and the runtime's lock
// held, so one that blocks on another thread's runtime call would deadlock here where a GPU would not.
//
// Errors name the call and what was wrong (cudaGetErrorString of the last error gives that account):
// a copy whose kind contradicts its pointers, a pointer freed while queued work uses it, an event
// recorded on another device's stream, a stream or event used after its destroy, a kernel given a
// pageable host pointer. A kernel that fails in the emulator (an out-of-bounds shared access, a
// race) surfaces at the call that ran it, as asynchronous errors do on a GPU.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "emu/runtime/state.h"

struct CUstream_st;
struct CUevent_st;

namespace frugal::emu::runtime {
namespace {

struct Use {  // memory a queued item reads or writes
  std::uintptr_t begin = 0;
  std::size_t bytes = 0;
};

struct Item {
  std::string what;                 // "kernel frugal::cuda::...", "cudaMemcpyAsync host to device, 4096 bytes"
  std::function<void()> work;       // empty for a wait
  CUstream_st* wait_for = nullptr;  // a wait: run that stream's work up to wait_until first
  std::uint64_t wait_until = 0;
  std::vector<Use> uses;
};

}  // namespace
}  // namespace frugal::emu::runtime

struct CUstream_st {
  int device = 0;
  unsigned int flags = cudaStreamDefault;
  bool legacy = false;     // the device's stream 0
  bool destroyed = false;  // kept, so that a later use is named as such
  std::deque<frugal::emu::runtime::Item> pending;
  std::uint64_t submitted = 0, completed = 0;  // items queued and run, ever
};

struct CUevent_st {
  int device = 0;
  bool destroyed = false;
  CUstream_st* stream = nullptr;  // where it was last recorded; null: never recorded (complete)
  std::uint64_t sequence = 0;     // complete once that stream has run this many items
};

namespace frugal::emu::runtime {
namespace {

struct Queues {
  std::vector<std::unique_ptr<CUstream_st>> streams;  // never freed: handles stay recognisable
  std::vector<std::unique_ptr<CUevent_st>> events;
  std::set<const CUstream_st*> known_streams;
  std::set<const CUevent_st*> known_events;
  std::vector<CUstream_st*> legacy;  // per device
  Statistics statistics;
};

Queues& queues() {
  static Queues* const state = [] {  // never destroyed, as memory()'s
    auto* q = new Queues;
    for (int device = 0; device < emulated_device_count(); ++device) {
      q->streams.push_back(std::make_unique<CUstream_st>());
      q->streams.back()->device = device;
      q->streams.back()->legacy = true;
      q->legacy.push_back(q->streams.back().get());
      q->known_streams.insert(q->streams.back().get());
    }
    return q;
  }();
  return *state;
}

struct LastError {
  cudaError_t unread = cudaSuccess;  // what cudaGetLastError returns, once
  cudaError_t code = cudaSuccess;    // the last error's code and account: cudaGetErrorString's, after it was read too
  std::string account;
};
thread_local LastError t_last_error;
thread_local std::string t_driver_account;  // the last failing driver call's
thread_local int t_device = 0;

std::string hex(const void* pointer) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", pointer);
  return text;
}

// The stream a call names: stream 0 is the current device's legacy stream.
cudaError_t resolve(cudaStream_t stream, const char* call, CUstream_st*& out) {
  if (!stream) {
    if (!valid_device(current_device())) return fail(cudaErrorInvalidDevice, std::string(call) + ": no current device");
    out = queues().legacy[current_device()];
    return cudaSuccess;
  }
  if (!queues().known_streams.contains(stream))
    return fail(cudaErrorInvalidResourceHandle, std::string(call) + ": " + hex(stream) + " is not a stream");
  if (stream->destroyed)
    return fail(cudaErrorInvalidResourceHandle,
                std::string(call) + ": stream " + hex(stream) + " was destroyed (cudaStreamDestroy) before this call");
  out = stream;
  return cudaSuccess;
}

cudaError_t resolve(cudaEvent_t event, const char* call) {
  if (!event || !queues().known_events.contains(event))
    return fail(cudaErrorInvalidResourceHandle, std::string(call) + ": " + hex(event) + " is not an event");
  if (event->destroyed)
    return fail(cudaErrorInvalidResourceHandle,
                std::string(call) + ": event " + hex(event) + " was destroyed (cudaEventDestroy) before this call");
  return cudaSuccess;
}

bool blocking(const CUstream_st* stream) { return !stream->legacy && !(stream->flags & cudaStreamNonBlocking); }

void push(CUstream_st* stream, Item item) {
  stream->pending.push_back(std::move(item));
  ++stream->submitted;
  Statistics& s = queues().statistics;
  s.most_pending = std::max<std::int64_t>(s.most_pending, static_cast<std::int64_t>(stream->pending.size()));
}

Item wait_item(CUstream_st* other) {
  return Item{"wait for stream " + hex(other), {}, other, other->submitted, {}};
}

// Whether work queued on `stream` must wait for `other`'s: the legacy default stream's semantics.
bool orders_before(const CUstream_st* other, const CUstream_st* stream) {
  if (other->device != stream->device || other == stream) return false;
  return stream->legacy ? blocking(other) : (blocking(stream) && other->legacy);
}

// The streams whose queued work what is queued next on `stream` must wait for.
std::vector<CUstream_st*> pending_before(const CUstream_st* stream) {
  std::vector<CUstream_st*> before;
  for (const auto& other : queues().streams)
    if (orders_before(other.get(), stream) && other->completed < other->submitted) before.push_back(other.get());
  return before;
}

// Queues `item` after the waits the legacy default stream's semantics add.
void enqueue(CUstream_st* stream, Item item) {
  for (CUstream_st* other : pending_before(stream)) push(stream, wait_item(other));
  push(stream, std::move(item));
}

// Runs `stream`'s queued items until it has run `until` of them (its own, and through waits other
// streams'). A failing item's error is this call's.
cudaError_t run_until(CUstream_st* stream, std::uint64_t until) {
  DeviceAccess access;
  while (stream->completed < until) {
    Item item = std::move(stream->pending.front());
    stream->pending.pop_front();
    ++stream->completed;
    if (item.wait_for) {
      if (const cudaError_t error = run_until(item.wait_for, item.wait_until); error != cudaSuccess) return error;
      continue;
    }
    try {
      item.work();
    } catch (const std::exception& e) {
      return fail(cudaErrorLaunchFailure, item.what + " failed when it ran: " + e.what());
    }
  }
  return cudaSuccess;
}

cudaError_t run_all(CUstream_st* stream) {
  if (stream->completed == stream->submitted) return cudaSuccess;
  ++queues().statistics.waits;
  return run_until(stream, stream->submitted);
}

// Runs everything that must come before new work on `stream`: its own queue, and what the legacy
// default stream's semantics order before it (the blocking streams for stream 0, stream 0 for a
// blocking stream). Before a poison fill or a synchronous read.
cudaError_t settle(CUstream_st* stream) {
  for (CUstream_st* other : pending_before(stream))
    if (const cudaError_t error = run_all(other); error != cudaSuccess) return error;
  return run_all(stream);
}

const char* kind_name(cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToHost: return "cudaMemcpyHostToHost";
    case cudaMemcpyHostToDevice: return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost: return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice: return "cudaMemcpyDeviceToDevice";
    case cudaMemcpyDefault: return "cudaMemcpyDefault";
  }
  return "an unknown cudaMemcpyKind";
}

// A copy's pointer: device memory must lie inside one allocation for all `bytes`.
cudaError_t check_range(const char* call, const char* role, const void* pointer, std::size_t bytes, const Place& place) {
  if (place.kind == MemoryKind::pageable) return cudaSuccess;
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  if (place.begin == 0 || address + bytes > place.begin + place.bytes)
    return fail(cudaErrorInvalidValue, std::string(call) + ": the " + role + " " + describe(pointer) + " does not hold " +
                                           std::to_string(bytes) + " bytes inside one allocation");
  return cudaSuccess;
}

// Copies `bytes` from `src` to `dst` ordered on `stream` (Note [Deferred work and poison]);
// `async` is cudaMemcpyAsync's rules, otherwise cudaMemcpy's.
cudaError_t copy(const char* call, void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                 CUstream_st* stream, bool async) {
  if (bytes == 0) return cudaSuccess;
  if (!dst || !src) return fail(cudaErrorInvalidValue, std::string(call) + ": a null pointer");
  const Place to = locate(dst), from = locate(src);
  if (const cudaError_t e = check_range(call, "destination", dst, bytes, to); e != cudaSuccess) return e;
  if (const cudaError_t e = check_range(call, "source", src, bytes, from); e != cudaSuccess) return e;
  const bool to_device = to.kind == MemoryKind::device, from_device = from.kind == MemoryKind::device;
  const cudaMemcpyKind actual = from_device ? (to_device ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                                            : (to_device ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
  if (kind != cudaMemcpyDefault && kind != actual)
    return fail(cudaErrorInvalidMemcpyDirection, std::string(call) + ": kind " + kind_name(kind) + ", but it copies from " +
                                                     describe(src) + " to " + describe(dst) + " (" + kind_name(actual) + ")");
  Statistics& s = queues().statistics;
  const auto n = static_cast<std::int64_t>(bytes);
  const std::string what = std::string(call) + " " + kind_name(actual) + ", " + std::to_string(bytes) + " bytes";
  const Use dst_use{reinterpret_cast<std::uintptr_t>(dst), bytes}, src_use{reinterpret_cast<std::uintptr_t>(src), bytes};
  switch (actual) {
    case cudaMemcpyHostToHost: {
      if (const cudaError_t e = settle(stream); e != cudaSuccess) return e;
      std::memmove(dst, src, bytes);
      return cudaSuccess;
    }
    case cudaMemcpyHostToDevice: {
      ++s.copies_host_to_device, s.bytes_host_to_device += n;
      // Pageable memory is staged at the call, so the caller may reuse it at once; pinned memory is
      // read when the copy runs, so the caller must not touch it before waiting.
      std::shared_ptr<std::vector<unsigned char>> staged;
      if (from.kind == MemoryKind::pageable)
        staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                              static_cast<const unsigned char*>(src) + bytes);
      if (const cudaError_t e = settle(stream); e != cudaSuccess) return e;
      poison_device(dst, bytes);
      Item item{what, [=] { std::memcpy(dst, staged ? staged->data() : src, bytes); }, nullptr, 0, {dst_use}};
      if (!staged) item.uses.push_back(src_use);
      enqueue(stream, std::move(item));
      // cudaMemcpy from pinned memory is synchronous with the host; from pageable memory it may
      // return once staged.
      return !async && !staged ? run_all(stream) : cudaSuccess;
    }
    case cudaMemcpyDeviceToHost: {
      ++s.copies_device_to_host, s.bytes_device_to_host += n;
      if (const cudaError_t e = settle(stream); e != cudaSuccess) return e;
      if (!async || to.kind == MemoryKind::pageable) {  // returns only once the copy is complete
        DeviceAccess access;
        std::memcpy(dst, src, bytes);
        return cudaSuccess;
      }
      poison(dst, bytes);  // pinned host memory: unreadable until the stream has been waited for
      enqueue(stream, Item{what, [=] { std::memcpy(dst, src, bytes); }, nullptr, 0, {dst_use, src_use}});
      return cudaSuccess;
    }
    case cudaMemcpyDeviceToDevice: {
      ++s.copies_device_to_device;
      if (const cudaError_t e = settle(stream); e != cudaSuccess) return e;
      const bool overlapping = dst_use.begin < src_use.begin + bytes && src_use.begin < dst_use.begin + bytes;
      if (!overlapping) poison_device(dst, bytes);  // an overlapping copy's source is its destination
      enqueue(stream, Item{what, [=] { std::memmove(dst, src, bytes); }, nullptr, 0, {dst_use, src_use}});
      return cudaSuccess;
    }
    case cudaMemcpyDefault: break;
  }
  return fail(cudaErrorInvalidMemcpyDirection, std::string(call) + ": no direction");
}

}  // namespace

std::recursive_mutex& runtime_mutex() {
  static std::recursive_mutex* const mutex = new std::recursive_mutex;
  return *mutex;
}

cudaError_t fail(cudaError_t code, std::string account) {
  if (std::getenv("FRUGAL_EMULATED_TRACE")) std::fprintf(stderr, "runtime: %s\n", account.c_str());
  t_last_error = {code, code, std::move(account)};
  return code;
}

CUresult fail_driver(CUresult code, std::string account) {
  if (std::getenv("FRUGAL_EMULATED_TRACE")) std::fprintf(stderr, "driver: %s\n", account.c_str());
  t_driver_account = std::move(account);  // the driver API has no "last error": cuGetErrorString tells it
  return code;
}

int current_device() { return t_device; }
bool valid_device(int device) { return device >= 0 && device < emulated_device_count(); }
Statistics& counters() { return queues().statistics; }

std::string pending_use(std::uintptr_t begin, std::size_t bytes) {
  for (const auto& stream : queues().streams)
    for (const Item& item : stream->pending)
      for (const Use& use : item.uses)
        if (use.begin < begin + bytes && begin < use.begin + std::max<std::size_t>(use.bytes, 1))
          return "queued work (" + item.what + ") on stream " + (stream->legacy ? std::string("0") : hex(stream.get()));
  return {};
}

void enqueue_kernel(cudaStream_t stream, const char* name, const std::vector<KernelPointer>& pointers,
                    std::function<void()> work) {
  std::lock_guard lock(runtime_mutex());
  CUstream_st* target = nullptr;
  if (resolve(stream, name, target) != cudaSuccess) return;  // the launch's error, for FRUGAL_CUDA_CHECK_LAUNCH
  if (target->device != current_device()) {
    fail(cudaErrorInvalidResourceHandle, std::string("kernel ") + name + ": launched on a stream of cuda:" +
                                             std::to_string(target->device) + " while cuda:" +
                                             std::to_string(current_device()) + " is current");
    return;
  }
  Item item{std::string("kernel ") + name, std::move(work), nullptr, 0, {}};
  for (const KernelPointer& pointer : pointers) {
    if (!pointer.address) continue;
    const Place place = locate(pointer.address);
    if (place.kind == MemoryKind::pageable || place.begin == 0) {
      fail(cudaErrorIllegalAddress, std::string("kernel ") + name + ": pointer argument " + std::to_string(pointer.argument) +
                                        " is " + describe(pointer.address) + ", which a GPU kernel cannot reach");
      return;
    }
    if (place.kind == MemoryKind::device && place.device != target->device) {
      fail(cudaErrorIllegalAddress, std::string("kernel ") + name + ": pointer argument " + std::to_string(pointer.argument) +
                                        " is " + describe(pointer.address) + ", but the kernel runs on cuda:" +
                                        std::to_string(target->device) + " (peer access is not emulated)");
      return;
    }
    // From the pointer to the end of its allocation: whatever of it the kernel may touch.
    const auto address = reinterpret_cast<std::uintptr_t>(pointer.address);
    item.uses.push_back({address, std::max<std::size_t>(place.begin + place.bytes - address, 1)});
  }
  ++queues().statistics.kernel_launches;
  enqueue(target, std::move(item));
}

Statistics statistics() {
  std::lock_guard lock(runtime_mutex());
  return queues().statistics;
}

void reset_statistics() {
  std::lock_guard lock(runtime_mutex());
  queues().statistics = {};
}

}  // namespace frugal::emu::runtime

using namespace frugal::emu::runtime;

// ---- errors

cudaError_t cudaGetLastError() {
  const cudaError_t error = t_last_error.unread;
  t_last_error.unread = cudaSuccess;
  return error;
}

cudaError_t cudaPeekAtLastError() { return t_last_error.unread; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorCudartUnloading: return "cudaErrorCudartUnloading";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  if (error == t_last_error.code && !t_last_error.account.empty()) return t_last_error.account.c_str();
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorNotReady: return "device not ready";
    default: return cudaGetErrorName(error);
  }
}

CUresult cuGetErrorString(CUresult error, const char** text) {
  if (!text) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
    case CUDA_SUCCESS: *text = "no error"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *text = "out of memory"; break;
    case CUDA_ERROR_INVALID_HANDLE: *text = "invalid resource handle"; break;
    case CUDA_ERROR_INVALID_DEVICE: *text = "invalid device ordinal"; break;
    case CUDA_ERROR_ILLEGAL_STATE: *text = "the operation is not permitted in this state"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *text = "operation not supported"; break;
    default: *text = "invalid argument"; break;
  }
  // The emulator's own account, when the failing call left one.
  if (error != CUDA_SUCCESS && !t_driver_account.empty()) *text = t_driver_account.c_str();
  return CUDA_SUCCESS;
}

// ---- versions and devices

// The CUDA version the emulated runtime and driver claim: the toolkit's frugal builds against.
constexpr int kEmulatedCudaVersion = 13000;

cudaError_t cudaDriverGetVersion(int* version) {
  if (!version) return fail(cudaErrorInvalidValue, "cudaDriverGetVersion: the result pointer is null");
  *version = kEmulatedCudaVersion;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  if (!version) return fail(cudaErrorInvalidValue, "cudaRuntimeGetVersion: the result pointer is null");
  *version = kEmulatedCudaVersion;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int* count) {
  std::lock_guard lock(runtime_mutex());
  if (!count) return fail(cudaErrorInvalidValue, "cudaGetDeviceCount: the result pointer is null");
  *count = emulated_device_count();
  return *count > 0 ? cudaSuccess : fail(cudaErrorNoDevice, "cudaGetDeviceCount: the host gave no address space for a device");
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device) {
  std::lock_guard lock(runtime_mutex());
  if (!properties) return fail(cudaErrorInvalidValue, "cudaGetDeviceProperties: the result pointer is null");
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties: no device " + std::to_string(device));
  *properties = {};
  std::snprintf(properties->name, sizeof properties->name, "frugal emulated GPU (runs on the CPU)");
  properties->totalGlobalMem = device_capacity(device);
  // An H100's compute capability and SM count, so that launch shapes are the ones a GPU gets.
  properties->major = 9;
  properties->minor = 0;
  properties->multiProcessorCount = 132;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  if (!value) return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: the result pointer is null");
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice, "cudaDeviceGetAttribute: no device " + std::to_string(device));
  switch (attribute) {  // an H100 SXM's HBM3, so bandwidth figures print; the emulator is nowhere near it
    case cudaDevAttrMemoryClockRate: *value = 2619000; return cudaSuccess;  // kHz
    case cudaDevAttrGlobalMemoryBusWidth: *value = 5120; return cudaSuccess;  // bits
  }
  return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute " + std::to_string(attribute) + " is not emulated");
}

cudaError_t cudaSetDevice(int device) {
  std::lock_guard lock(runtime_mutex());
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice, "cudaSetDevice: no device " + std::to_string(device));
  t_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (!device) return fail(cudaErrorInvalidValue, "cudaGetDevice: the result pointer is null");
  *device = t_device;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  std::lock_guard lock(runtime_mutex());
  const int device = current_device();
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice, "cudaDeviceSynchronize: no device " + std::to_string(device));
  for (const auto& stream : queues().streams)
    if (stream->device == device)
      if (const cudaError_t error = run_all(stream.get()); error != cudaSuccess) return error;
  return cudaSuccess;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** function, unsigned int, unsigned long long,
                                             cudaDriverEntryPointQueryResult* status) {
  if (!symbol || !function) return fail(cudaErrorInvalidValue, "cudaGetDriverEntryPointByVersion: a pointer is null");
  static const std::map<std::string, void*> table = {
      {"cuGetErrorString", reinterpret_cast<void*>(&cuGetErrorString)},
      {"cuDeviceGet", reinterpret_cast<void*>(&cuDeviceGet)},
      {"cuDeviceGetAttribute", reinterpret_cast<void*>(&cuDeviceGetAttribute)},
      {"cuMemGetAllocationGranularity", reinterpret_cast<void*>(&cuMemGetAllocationGranularity)},
      {"cuMemAddressReserve", reinterpret_cast<void*>(&cuMemAddressReserve)},
      {"cuMemAddressFree", reinterpret_cast<void*>(&cuMemAddressFree)},
      {"cuMemCreate", reinterpret_cast<void*>(&cuMemCreate)},
      {"cuMemRelease", reinterpret_cast<void*>(&cuMemRelease)},
      {"cuMemMap", reinterpret_cast<void*>(&cuMemMap)},
      {"cuMemUnmap", reinterpret_cast<void*>(&cuMemUnmap)},
      {"cuMemSetAccess", reinterpret_cast<void*>(&cuMemSetAccess)},
  };
  const auto found = table.find(symbol);
  *function = found == table.end() ? nullptr : found->second;
  if (status) *status = found == table.end() ? cudaDriverEntryPointSymbolNotFound : cudaDriverEntryPointSuccess;
  return cudaSuccess;
}

// ---- copies and memsets

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  std::lock_guard lock(runtime_mutex());
  CUstream_st* stream = nullptr;
  if (const cudaError_t e = resolve(nullptr, "cudaMemcpy", stream); e != cudaSuccess) return e;
  return copy("cudaMemcpy", dst, src, bytes, kind, stream, false);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  std::lock_guard lock(runtime_mutex());
  CUstream_st* target = nullptr;
  if (const cudaError_t e = resolve(stream, "cudaMemcpyAsync", target); e != cudaSuccess) return e;
  return copy("cudaMemcpyAsync", dst, src, bytes, kind, target, true);
}

cudaError_t cudaMemset(void* pointer, int value, std::size_t bytes) {
  std::lock_guard lock(runtime_mutex());
  CUstream_st* stream = nullptr;
  if (const cudaError_t e = resolve(nullptr, "cudaMemset", stream); e != cudaSuccess) return e;
  if (bytes == 0) return cudaSuccess;
  const Place place = locate(pointer);
  if (place.kind != MemoryKind::device)
    return fail(cudaErrorInvalidValue, "cudaMemset: " + describe(pointer) + " is not device memory");
  if (const cudaError_t e = check_range("cudaMemset", "destination", pointer, bytes, place); e != cudaSuccess) return e;
  ++queues().statistics.memsets;
  if (const cudaError_t e = settle(stream); e != cudaSuccess) return e;
  poison_device(pointer, bytes);
  enqueue(stream, Item{"cudaMemset, " + std::to_string(bytes) + " bytes", [=] { std::memset(pointer, value, bytes); },
                       nullptr, 0, {{reinterpret_cast<std::uintptr_t>(pointer), bytes}}});
  return cudaSuccess;
}

// ---- streams

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  std::lock_guard lock(runtime_mutex());
  if (!stream) return fail(cudaErrorInvalidValue, "cudaStreamCreateWithFlags: the result pointer is null");
  if (flags & ~cudaStreamNonBlocking) return fail(cudaErrorInvalidValue, "cudaStreamCreateWithFlags: unknown flags");
  if (!valid_device(current_device())) return fail(cudaErrorInvalidDevice, "cudaStreamCreateWithFlags: no current device");
  auto created = std::make_unique<CUstream_st>();
  created->device = current_device();  // a stream belongs to the device current when it is created
  created->flags = flags;
  *stream = created.get();
  queues().known_streams.insert(created.get());
  queues().streams.push_back(std::move(created));
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::lock_guard lock(runtime_mutex());
  if (!stream) return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: stream 0 cannot be destroyed");
  CUstream_st* target = nullptr;
  if (const cudaError_t e = resolve(stream, "cudaStreamDestroy", target); e != cudaSuccess) return e;
  target->destroyed = true;  // its queued work still runs (at the next device synchronize), as CUDA documents
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  std::lock_guard lock(runtime_mutex());
  CUstream_st* target = nullptr;
  if (const cudaError_t e = resolve(stream, "cudaStreamSynchronize", target); e != cudaSuccess) return e;
  return run_all(target);
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  std::lock_guard lock(runtime_mutex());
  CUstream_st* target = nullptr;
  if (const cudaError_t e = resolve(stream, "cudaStreamQuery", target); e != cudaSuccess) return e;
  return target->completed == target->submitted ? cudaSuccess : cudaErrorNotReady;  // "not yet" is no error
}

cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int* flags) {
  std::lock_guard lock(runtime_mutex());
  CUstream_st* target = nullptr;
  if (const cudaError_t e = resolve(stream, "cudaStreamGetFlags", target); e != cudaSuccess) return e;
  if (!flags) return fail(cudaErrorInvalidValue, "cudaStreamGetFlags: the result pointer is null");
  *flags = target->flags;
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  std::lock_guard lock(runtime_mutex());
  CUstream_st* target = nullptr;
  if (const cudaError_t e = resolve(stream, "cudaStreamWaitEvent", target); e != cudaSuccess) return e;
  if (const cudaError_t e = resolve(event, "cudaStreamWaitEvent"); e != cudaSuccess) return e;
  if (flags != 0) return fail(cudaErrorInvalidValue, "cudaStreamWaitEvent: flags must be 0");
  // An event never recorded is complete; one recorded waits for what its stream had queued then.
  // Waiting on another device's event is allowed, as in CUDA.
  if (event->stream) enqueue(target, Item{"wait for event " + hex(event), {}, event->stream, event->sequence, {}});
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t function, void* user_data) {
  std::lock_guard lock(runtime_mutex());
  CUstream_st* target = nullptr;
  if (const cudaError_t e = resolve(stream, "cudaLaunchHostFunc", target); e != cudaSuccess) return e;
  if (!function) return fail(cudaErrorInvalidValue, "cudaLaunchHostFunc: the function is null");
  enqueue(target, Item{"host function", [=] { function(user_data); }, nullptr, 0, {}});
  return cudaSuccess;
}

// ---- events

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  std::lock_guard lock(runtime_mutex());
  if (!event) return fail(cudaErrorInvalidValue, "cudaEventCreateWithFlags: the result pointer is null");
  if (flags & ~cudaEventDisableTiming) return fail(cudaErrorInvalidValue, "cudaEventCreateWithFlags: unknown flags");
  if (!valid_device(current_device())) return fail(cudaErrorInvalidDevice, "cudaEventCreateWithFlags: no current device");
  auto created = std::make_unique<CUevent_st>();
  created->device = current_device();  // an event belongs to the device current when it is created
  *event = created.get();
  queues().known_events.insert(created.get());
  queues().events.push_back(std::move(created));
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  std::lock_guard lock(runtime_mutex());
  CUstream_st* target = nullptr;
  if (const cudaError_t e = resolve(stream, "cudaEventRecord", target); e != cudaSuccess) return e;
  if (const cudaError_t e = resolve(event, "cudaEventRecord"); e != cudaSuccess) return e;
  if (event->device != target->device)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: event " + hex(event) + " belongs to cuda:" +
                                                    std::to_string(event->device) + " but the stream to cuda:" +
                                                    std::to_string(target->device) + " (an event is recorded on its own device's streams)");
  // When the legacy default stream's semantics order other work before it (on stream 0, the
  // blocking streams' queues; on a blocking stream, stream 0's), the record is a queued marker
  // after waits for that work.
  if (!pending_before(target).empty()) enqueue(target, Item{"event record", [] {}, nullptr, 0, {}});
  event->stream = target;
  event->sequence = target->submitted;  // complete once everything queued so far has run
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  std::lock_guard lock(runtime_mutex());
  if (const cudaError_t e = resolve(event, "cudaEventQuery"); e != cudaSuccess) return e;
  return !event->stream || event->stream->completed >= event->sequence ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  std::lock_guard lock(runtime_mutex());
  if (const cudaError_t e = resolve(event, "cudaEventSynchronize"); e != cudaSuccess) return e;
  if (!event->stream || event->stream->completed >= event->sequence) return cudaSuccess;
  ++queues().statistics.waits;
  return run_until(event->stream, event->sequence);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  std::lock_guard lock(runtime_mutex());
  if (const cudaError_t e = resolve(event, "cudaEventDestroy"); e != cudaSuccess) return e;
  event->destroyed = true;  // kept, so that a later use is named as such; a queued wait on it still holds
  return cudaSuccess;
}
