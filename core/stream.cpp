// Side streams, asynchronous copies and record_stream (see stream.h): one `switch` by device per
// operation. CUDA branches are compiled only when FRUGAL_WITH_CUDA.
#include "core/stream.h"

#include <array>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "core/caching_allocator.h"
#include "core/cuda_status.h"
#include "core/dispatch.h"
#include "core/tensor.h"

#if FRUGAL_WITH_CUDA
#include "core/cuda/runtime.h"
#endif

namespace frugal {

Stream side_stream(Device device, int slot) {
  FRUGAL_CHECK_VALUE(slot >= 0 && slot < kSideStreams, "side_stream: slot ", slot, " is not in 0..",
                     kSideStreams - 1);
  switch (device.type()) {
    case DeviceType::CPU:
    case DeviceType::Meta:
      return {};
    case DeviceType::CUDA: {
#if FRUGAL_WITH_CUDA
      FRUGAL_CHECK_DEVICE(cuda_available(), "side_stream(", device, "): ", cuda_status().reason);
      static std::mutex mutex;
      static std::map<int, std::array<Stream, kSideStreams>> streams;  // by device index; never destroyed
      std::lock_guard lock(mutex);
      Stream& stream = streams[device.index()][static_cast<std::size_t>(slot)];
      if (stream.handle == nullptr) stream = cuda::create_side_stream(device.index());
      return stream;
#else
      throw_no_cuda("side_stream");
#endif
    }
  }
  FRUGAL_THROW(DeviceError, "unknown device type ", static_cast<int>(device.type()));
}

void synchronize_stream(Device device, Stream stream) {
  switch (device.type()) {
    case DeviceType::CPU:
    case DeviceType::Meta:
      return;  // host work is done when its call returns; meta work is none
    case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
      return cuda::synchronize_stream(device.index(), stream);
#else
      (void)stream;
      throw_no_cuda("synchronize_stream");
#endif
  }
}

void copy_bytes_async(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes,
                      Stream stream) {
  if (bytes == 0 || dst_device.is_meta()) return;
  if (src_device.is_meta()) throw_meta_has_no_data("copy");
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if FRUGAL_WITH_CUDA
  cuda::copy_bytes_async(dst, src, bytes, stream);  // unified addressing: the runtime knows each pointer's device
#else
  (void)stream;
  throw_no_cuda("copy_bytes_async");
#endif
}

void stream_wait(Device device, Stream waiter, Stream producer) {
  switch (device.type()) {
    case DeviceType::CPU:
    case DeviceType::Meta:
      return;  // work on them is done when its call returns
    case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
      if (waiter.handle == producer.handle) return;  // one stream runs its work in order anyway
      return cuda::stream_wait(device.index(), waiter, producer);
#else
      (void)waiter, (void)producer;
      throw_no_cuda("stream_wait");
#endif
  }
}

StreamEvent::StreamEvent(Device device, Stream stream) {
  if (!device.is_cuda()) return;
#if FRUGAL_WITH_CUDA
  handle_ = cuda::record_event(device.index(), stream);
#else
  (void)stream;
  throw_no_cuda("StreamEvent");
#endif
}

StreamEvent::~StreamEvent() {
#if FRUGAL_WITH_CUDA
  if (handle_ != nullptr) cuda::destroy_event(handle_);
#endif
}

StreamEvent::StreamEvent(StreamEvent&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}

StreamEvent& StreamEvent::operator=(StreamEvent&& other) noexcept {
  std::swap(handle_, other.handle_);  // ours goes with `other`
  return *this;
}

void StreamEvent::synchronize() const {
#if FRUGAL_WITH_CUDA
  if (handle_ != nullptr) cuda::synchronize_event(handle_);
#endif
}

void record_stream(const Tensor& tensor, Stream stream) {
  if (!tensor.device().is_cuda() || tensor.nbytes() == 0) return;
  auto* caching = dynamic_cast<CachingAllocator*>(&allocator_for(tensor.device()));
  if (caching == nullptr) return;  // an allocator without a cache frees at once (cudaFree waits for the device)
  caching->record_stream(tensor.storage()->data(), stream);
}

}  // namespace frugal
