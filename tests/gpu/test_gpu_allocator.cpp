// GPU suite: the caching allocator over the real CUDA backing (cudaMalloc, events, the driver's
// virtual memory API) and over pinned host memory. The policy itself is tested on the host, with
// counting and simulated backings, in tests/cpu/test_caching_allocator.cpp; these cases check only
// what a real device adds: memory that works, real OOMs, stream order and mapped chunks.
#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "core/caching_allocator.h"
#include "core/cuda/runtime.h"
#include "core/error.h"
#include "tests/skip.h"

using namespace frugal;

namespace {
constexpr std::size_t kMiB = std::size_t{1} << 20;

void check_cuda(cudaError_t status) { REQUIRE_MESSAGE(status == cudaSuccess, cudaGetErrorString(status)); }

CachingAllocator cuda_allocator(bool expandable = true) {
  CachingOptions options;
  options.expandable_segments = expandable;
  return CachingAllocator(cuda::make_cuda_backing(0), options);
}

// Fills `bytes` of device memory with `value` and reads every byte back.
bool device_memory_holds(void* ptr, std::size_t bytes, unsigned char value) {
  check_cuda(cudaMemset(ptr, value, bytes));
  std::vector<unsigned char> host(bytes);
  check_cuda(cudaMemcpy(host.data(), ptr, bytes, cudaMemcpyDeviceToHost));
  for (unsigned char byte : host)
    if (byte != value) return false;
  return true;
}

// Holds a stream at a host function until release() (or destruction, so a failing case cannot leave
// the stream blocked forever). Unlike waiting on a not-yet-recorded event, which CUDA treats as
// already complete, this really keeps the stream's later work, and its events, pending.
class StreamGate {
 public:
  explicit StreamGate(cudaStream_t stream) : opened_(open_.get_future().share()) {
    check_cuda(cudaLaunchHostFunc(stream, wait, &opened_));
  }
  ~StreamGate() { release(); }
  void release() {
    if (!released_) open_.set_value();
    released_ = true;
  }

 private:
  static void wait(void* opened) { static_cast<std::shared_future<void>*>(opened)->wait(); }
  std::promise<void> open_;
  std::shared_future<void> opened_;
  bool released_ = false;
};
}  // namespace

TEST_CASE("a freed block is reused without calling cudaMalloc again") {
  CachingAllocator allocator = cuda_allocator();
  void* first = allocator.allocate(3 * kMiB).get();  // freed at the end of the statement
  const Backing::Counters before = allocator.backing().counters();
  DataPtr again = allocator.allocate(3 * kMiB);
  CHECK(again.get() == first);
  const Backing::Counters after = allocator.backing().counters();
  CHECK(after.allocs == before.allocs);
  CHECK(after.frees == before.frees);
  CHECK(after.maps == before.maps);
  allocator.check_invariants();
}

TEST_CASE("requests are rounded up to 512 bytes") {
  CachingAllocator allocator = cuda_allocator();
  DataPtr one = allocator.allocate(1);
  CHECK(allocator.caching_stats().allocated_bytes.current == 512);
  DataPtr more = allocator.allocate(513);
  CHECK(allocator.caching_stats().allocated_bytes.current == 512 + 1024);
  CHECK(allocator.stats().requested_bytes.current == 1 + 513);
  allocator.check_invariants();
}

TEST_CASE("allocated device memory can be written and read back") {
  for (bool expandable : {false, true}) {
    CAPTURE(expandable);
    CachingAllocator allocator = cuda_allocator(expandable);
    DataPtr small = allocator.allocate(4096);
    DataPtr large = allocator.allocate(12 * kMiB);
    CHECK(device_memory_holds(small.get(), 4096, 0x5a));
    CHECK(device_memory_holds(large.get(), 12 * kMiB, 0xa5));
    allocator.check_invariants();
  }
}

TEST_CASE("a capacity refuses a request before cudaMalloc and the allocator keeps working") {
  CachingAllocator allocator = cuda_allocator();
  allocator.backing().set_capacity(64 * kMiB);
  const Backing::Counters before = allocator.backing().counters();
  std::string message;
  try {
    allocator.allocate(100 * kMiB);
  } catch (const OutOfMemoryError& error) {
    message = error.what();
  }
  CHECK_MESSAGE(message.find("tried to allocate") != std::string::npos, message);
  CHECK(allocator.backing().counters().allocs == before.allocs);
  CHECK(allocator.backing().counters().maps == before.maps);
  DataPtr fits = allocator.allocate(kMiB);
  CHECK(fits.get() != nullptr);
  CHECK(device_memory_holds(fits.get(), kMiB, 1));
  allocator.check_invariants();
}

TEST_CASE("a request larger than the GPU throws OutOfMemoryError and the allocator keeps working") {
  // Fixed segments: cudaMalloc itself refuses. Expandable: the request outgrows the reservation.
  for (bool expandable : {false, true}) {
    CAPTURE(expandable);
    CachingAllocator allocator = cuda_allocator(expandable);
    const std::size_t one_pebibyte = std::size_t{1} << 50;  // more than any GPU has
    const std::int64_t ooms = allocator.caching_stats().num_ooms;
    CHECK_THROWS_AS(allocator.allocate(one_pebibyte), OutOfMemoryError);
    CHECK(allocator.caching_stats().num_ooms == ooms + 1);
    CHECK(cudaGetLastError() == cudaSuccess);  // the device's refusal left no error behind
    DataPtr works = allocator.allocate(kMiB);
    CHECK(device_memory_holds(works.get(), kMiB, 7));
    allocator.check_invariants();
  }
}

TEST_CASE("empty_cache gives every segment back once everything is freed") {
  for (bool expandable : {false, true}) {
    CAPTURE(expandable);
    CachingAllocator allocator = cuda_allocator(expandable);
    {
      DataPtr small = allocator.allocate(1000);
      DataPtr medium = allocator.allocate(5 * kMiB);
      DataPtr large = allocator.allocate(30 * kMiB);
      CHECK(allocator.caching_stats().reserved_bytes.current > 0);
    }
    CHECK(allocator.caching_stats().reserved_bytes.current > 0);  // cached, not returned
    allocator.empty_cache();
    CHECK(allocator.caching_stats().reserved_bytes.current == 0);
    CHECK(allocator.backing().held_bytes() == 0);
    allocator.check_invariants();
  }
}

// A block freed on its own stream is free at once, though kernels queued before the free may still
// use it (stream order makes reuse on that stream safe); giving its segment back to the device must
// wait for them. cudaFree happens to synchronize on a GPU; the emulated runtime refuses to free
// memory that queued work uses, which is how this case was found.
TEST_CASE("empty_cache gives a segment back only after the work queued on its blocks") {
  for (bool expandable : {false, true}) {
    CAPTURE(expandable);
    CachingAllocator allocator = cuda_allocator(expandable);
    {
      DataPtr block = allocator.allocate(3 * kMiB);
      check_cuda(cudaMemset(block.get(), 0x5a, 3 * kMiB));  // queued on the default stream, not waited for
    }
    allocator.empty_cache();
    CHECK(allocator.caching_stats().reserved_bytes.current == 0);
    CHECK(allocator.backing().held_bytes() == 0);
  }
}

TEST_CASE("a block used by another stream is not reused until that stream's work is done") {
  CachingAllocator allocator = cuda_allocator();
  cudaStream_t a = nullptr, b = nullptr;
  check_cuda(cudaStreamCreate(&a));
  check_cuda(cudaStreamCreate(&b));
  {
    // Cache two free MiB first, so that nothing below asks the device for memory while b is held:
    // cudaMalloc may wait for every stream, and b waits for this thread.
    {
      DataPtr warm_1 = allocator.allocate(kMiB, Stream{a});
      DataPtr warm_2 = allocator.allocate(kMiB, Stream{a});
    }
    DataPtr block = allocator.allocate(kMiB, Stream{a});
    void* const address = block.get();
    StreamGate gate(b);  // b's work (and the event the allocator records on it) stays pending
    allocator.record_stream(address, Stream{b});
    block = DataPtr{};  // freed while b may still use it

    DataPtr meanwhile = allocator.allocate(kMiB, Stream{a});
    CHECK(meanwhile.get() != address);

    gate.release();
    check_cuda(cudaStreamSynchronize(b));
    DataPtr after = allocator.allocate(kMiB, Stream{a});
    CHECK(after.get() == address);
    allocator.check_invariants();
  }
  check_cuda(cudaStreamDestroy(a));
  check_cuda(cudaStreamDestroy(b));
}

TEST_CASE("an expandable segment grows in mapped chunks and stays one segment") {
  CachingAllocator allocator = cuda_allocator(true);
  if (!allocator.backing().supports_expandable()) FRUGAL_SKIP("this device has no virtual memory management");
  const std::size_t granularity = allocator.backing().map_granularity();
  CHECK(granularity % kExpandableChunk == 0);
  std::int64_t reserved = 0;
  for (std::size_t mib : {10, 20, 30}) {
    CAPTURE(mib);
    DataPtr block = allocator.allocate(mib * kMiB);
    const CachingStats stats = allocator.caching_stats();
    CHECK(stats.segments.current == 1);
    CHECK(stats.reserved_bytes.current >= static_cast<std::int64_t>(mib * kMiB));
    CHECK(stats.reserved_bytes.current <= static_cast<std::int64_t>(mib * kMiB + granularity));
    CHECK((stats.reserved_bytes.current - reserved) % static_cast<std::int64_t>(kExpandableChunk) == 0);
    CHECK(stats.reserved_bytes.current >= reserved);
    reserved = stats.reserved_bytes.current;
    CHECK(device_memory_holds(block.get(), mib * kMiB, static_cast<unsigned char>(mib)));
    allocator.check_invariants();
  }
  allocator.empty_cache();
  CHECK(allocator.caching_stats().reserved_bytes.current == 0);
  allocator.check_invariants();
}

TEST_CASE("the pinned host backing serves memory the host writes and the GPU copies") {
  CachingAllocator pinned(cuda::make_pinned_host_backing());
  CHECK(pinned.backing().name() == "pinned-host");
  CachingAllocator device = cuda_allocator();
  DataPtr host = pinned.allocate(kMiB);
  DataPtr back = pinned.allocate(kMiB);
  DataPtr on_gpu = device.allocate(kMiB);
  std::memset(host.get(), 0x3c, kMiB);
  std::memset(back.get(), 0, kMiB);
  check_cuda(cudaMemcpy(on_gpu.get(), host.get(), kMiB, cudaMemcpyHostToDevice));
  check_cuda(cudaMemcpy(back.get(), on_gpu.get(), kMiB, cudaMemcpyDeviceToHost));
  CHECK(std::memcmp(host.get(), back.get(), kMiB) == 0);
  pinned.check_invariants();
  device.check_invariants();
}
