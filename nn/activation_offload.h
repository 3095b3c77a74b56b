// Saved activations offloaded to pinned host memory (`frugal train --offload activations`), as
// ZeRO-Offload and PyTorch's torch.autograd.graph.save_on_cpu(pin_memory=True) do. While an
// ActivationOffloadScope lives on a thread, each feature map a node saves for backward (nn/node.h's
// SavedTensor decides which) is copied to page-locked host memory, and the device memory is freed as
// soon as forward no longer holds the tensor; in backward each comes back to the device just before
// the node that needs it runs, the next few prefetched on a side stream while the device computes:
//
//   forward   save k     the side stream waits for the default stream's kernels (one is writing the
//                        tensor), then copies it to the host; record_stream keeps the device block
//                        from being reused before that copy has run
//   backward  unpack k   k's copy back, queued now unless a prefetch queued it, then the copies back
//                        of the kPrefetchAhead tensors saved just before k (their nodes run next); the
//                        host waits for k's copy alone (an event), frees k's host copy and hands the
//                        device copy to the node (shared with any other node that saved the tensor)
//
// The values are the same bits, so a run's numbers do not change. An in-place change of a saved
// tensor is caught at unpack while anyone still holds the original, as for compressed forms
// (nn/node.h); the copy to the host runs asynchronously, so a change queued after the save may
// already be in the copy (on the CPU the copy is done before the save returns). On the CPU the copies are memcpy
// between the device's allocator and the pinned host allocator, so the device peak drops exactly as
// it would on a GPU and the step pays for two copies of every saved byte. On the meta device nothing
// is copied: the planner sees the device tensors freed and made again, and the host side through
// offloaded_activation_bytes().
// Only forward offloads: the scope spans the forward (train/step.cpp), so what checkpointing
// recomputes inside backward stays on the device, where it is needed a moment later.
// Not here: which tensors are offloaded (nn/node.h's SavedTensor: feature maps an op produced, whole
// and contiguous); the optimizer's state on the host (nn/optimizer_offload.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/stream.h"
#include "core/tensor.h"

namespace frugal::nn {

// How many of the tensors saved before the one being unpacked have their copies back queued at
// once. A MobileNetV2 or ResNet block saves three or four feature maps (a convolution's input,
// BatchNorm's input, ReLU's output), so three is about the next layer's: each copy has a layer's
// compute to hide behind, and backward holds about three tensors more than without offloading
// (more when a prefetched tensor's node runs later than its place in the order says).
inline constexpr std::size_t kPrefetchAhead = 3;

struct OffloadQueue;  // activation_offload.cpp: one scope's offloaded tensors, in the order saved

// One saved tensor kept in host memory. Made by offload_saved; shared by every node that saved it.
class OffloadedActivation {
 public:
  // Queues t's copy to the host; its place in backward's order is the next in `queue`'s.
  OffloadedActivation(const Tensor& t, std::shared_ptr<OffloadQueue> queue);
  ~OffloadedActivation();
  OffloadedActivation(const OffloadedActivation&) = delete;
  OffloadedActivation& operator=(const OffloadedActivation&) = delete;

  // The tensor on its device again, the same bits: its copy back is waited for (queued first if no
  // prefetch did), the copies back of those saved just before it are queued, and its host copy freed.
  Tensor unpack();

 private:
  void queue_copy_back();  // once; a no-op after the first call

  std::shared_ptr<OffloadQueue> queue_;
  std::size_t index_ = 0;  // in queue_'s order
  Device device_;
  Shape shape_;
  DType dtype_;
  std::int64_t bytes_ = 0;
  Tensor host_;          // the pinned copy (undefined on the meta device, which has no bytes to copy)
  bool on_host_ = true;  // counted in offloaded_activation_bytes until unpacked
  Tensor back_;          // on the device again, once its copy back is queued
  StreamEvent back_done_;
};

// While one lives, offload_saved offloads on this thread (scopes nest; the innermost is used).
class ActivationOffloadScope {
 public:
  ActivationOffloadScope();
  ~ActivationOffloadScope();
  ActivationOffloadScope(const ActivationOffloadScope&) = delete;
  ActivationOffloadScope& operator=(const ActivationOffloadScope&) = delete;

 private:
  std::shared_ptr<OffloadQueue> previous_;
};

bool offloading_activations();  // an ActivationOffloadScope lives on this thread

// t copied to host memory, its copy queued on the offload side stream (core/stream.h); null when no
// scope lives on this thread. The caller has checked that t is worth offloading (SavedTensor).
std::shared_ptr<OffloadedActivation> offload_saved(const Tensor& t);

// Bytes of saved activations in host memory, now and at most since the last reset: every thread's
// (the planner reads them after planning on the meta device, where no host memory is taken).
struct OffloadedBytes {
  std::int64_t now = 0, peak = 0;
};
OffloadedBytes offloaded_activation_bytes();
void reset_offloaded_activation_peak();  // the peak becomes what is offloaded now

}  // namespace frugal::nn
