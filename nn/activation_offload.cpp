// Saved activations in pinned host memory (see activation_offload.h).
#include "nn/activation_offload.h"

#include <atomic>
#include <utility>

#include "core/allocator.h"
#include "core/error.h"

namespace frugal::nn {

// One scope's offloaded tensors in the order forward saved them: backward unpacks them about in
// reverse, so the ones saved just before a tensor are the ones needed just after it. Weak: a tensor
// lives as long as the nodes that saved it, not as long as the queue.
struct OffloadQueue {
  std::vector<std::weak_ptr<OffloadedActivation>> saved;
};

namespace {

thread_local std::shared_ptr<OffloadQueue> t_queue;  // the innermost ActivationOffloadScope's

std::atomic<std::int64_t> g_host_bytes{0};
std::atomic<std::int64_t> g_host_peak{0};

void count_host_bytes(std::int64_t delta) {
  const std::int64_t now = g_host_bytes.fetch_add(delta) + delta;
  std::int64_t peak = g_host_peak.load();
  while (now > peak && !g_host_peak.compare_exchange_weak(peak, now)) {
  }
}

Stream offload_stream(Device device) { return side_stream(device, kOffloadStreamSlot); }

}  // namespace

OffloadedActivation::OffloadedActivation(const Tensor& t, std::shared_ptr<OffloadQueue> queue)
    : queue_(std::move(queue)),
      index_(queue_->saved.size()),
      device_(t.device()),
      shape_(t.shape()),
      dtype_(t.dtype()),
      bytes_(static_cast<std::int64_t>(t.nbytes())) {
  FRUGAL_CHECK_VALUE(t.is_contiguous(), "offloading a saved activation: shape ", shape_str(t.shape()),
                     " is not contiguous; the copies move whole buffers");
  if (!device_.is_meta()) {
    {
      const MemoryTagScope tag(MemoryTag::activation);  // in the pinned allocator's books, what backward keeps
      host_ = empty(shape_, {.dtype = dtype_, .device = Device::cpu(), .pinned = true});
    }
    const Stream side = offload_stream(device_);
    stream_wait(device_, side, Stream{});  // the kernel that wrote t ran on the default stream
    copy_bytes_async(host_.data_ptr(), Device::cpu(), t.data_ptr(), device_, t.nbytes(), side);
    record_stream(t, side);  // t's block waits for this copy before anyone reuses it
  }
  count_host_bytes(bytes_);
}

OffloadedActivation::~OffloadedActivation() {
  if (!on_host_) return;
  count_host_bytes(-bytes_);
  // The host copy goes back to the pinned cache, where the next user may write it at once: a copy
  // still reading or writing it must end first. (A tensor is normally unpacked, which waits; this is
  // a graph freed without its backward.)
  if (host_.defined()) back_.defined() ? back_done_.synchronize() : synchronize_stream(device_, offload_stream(device_));
}

void OffloadedActivation::queue_copy_back() {
  if (back_.defined()) return;
  const MemoryTagScope tag(MemoryTag::activation);  // an activation made again, as a rebuilt one is
  back_ = empty(shape_, {.dtype = dtype_, .device = device_});
  if (device_.is_meta()) return;
  const Stream side = offload_stream(device_);
  // back_'s block may be one the default stream's queued kernels still use (the allocator reuses a
  // block for its own stream at once): the copy must not overwrite it before they are done.
  stream_wait(device_, side, Stream{});
  copy_bytes_async(back_.data_ptr(), device_, host_.data_ptr(), Device::cpu(), host_.nbytes(), side);
  record_stream(back_, side);  // allocated for the default stream, written on the side one
  back_done_ = StreamEvent(device_, side);
}

Tensor OffloadedActivation::unpack() {
  queue_copy_back();
  for (std::size_t ahead = 1; ahead <= kPrefetchAhead && ahead <= index_; ++ahead)
    if (const std::shared_ptr<OffloadedActivation> earlier = queue_->saved[index_ - ahead].lock())
      earlier->queue_copy_back();
  if (on_host_) {
    back_done_.synchronize();  // the default stream's kernels that read back_ are queued after this
    host_ = Tensor();
    on_host_ = false;
    count_host_bytes(-bytes_);
  }
  return back_;
}

ActivationOffloadScope::ActivationOffloadScope() : previous_(std::exchange(t_queue, std::make_shared<OffloadQueue>())) {}

ActivationOffloadScope::~ActivationOffloadScope() { t_queue = std::move(previous_); }

bool offloading_activations() { return t_queue != nullptr; }

std::shared_ptr<OffloadedActivation> offload_saved(const Tensor& t) {
  if (!t_queue) return nullptr;
  auto offloaded = std::make_shared<OffloadedActivation>(t, t_queue);
  t_queue->saved.push_back(offloaded);
  return offloaded;
}

OffloadedBytes offloaded_activation_bytes() { return {g_host_bytes.load(), g_host_peak.load()}; }

void reset_offloaded_activation_peak() { g_host_peak.store(g_host_bytes.load()); }

}  // namespace frugal::nn
