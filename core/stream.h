// Side streams, asynchronous copies and record_stream: what lets a host-to-device copy run while the
// device computes. frugal's kernels, cuBLAS and cuDNN all run on the legacy default stream
// (Stream{}). A side stream is a non-blocking CUDA stream: it does not wait for the default stream,
// so a copy queued on it overlaps the kernels queued there. Whoever hands the copied memory to
// default-stream work first synchronizes the side stream (the data loader's workers do), and calls
// record_stream so the allocator knows the memory is used on both.
// On the CPU there is nothing to overlap: side_stream is Stream{}, copies are memcpy, synchronizing
// does nothing, so code written for streams runs unchanged there.
// Not here: the allocator's events (core/backing.h); communication streams (data parallelism).
#pragma once

#include <cstddef>

#include "core/allocator.h"
#include "core/device.h"

namespace frugal {

class Tensor;

// Enough for one per loader worker on a small machine; more workers share them (round robin).
inline constexpr int kSideStreams = 4;
// The side stream of the copies to and from host memory (nn/optimizer_offload.h,
// nn/activation_offload.h): the last, so the data loader's workers (which take theirs from slot 0)
// rarely share it.
inline constexpr int kOffloadStreamSlot = kSideStreams - 1;

// Side stream `slot` (0 .. kSideStreams-1) of `device`, created on first use and kept until the
// process ends: the caching allocator pools blocks per stream, so streams created and destroyed per
// epoch would strand the blocks cached for them (PyTorch keeps a stream pool for the same reason).
// Stream{} for the CPU. ValueError for a slot out of range; DeviceError when CUDA is not usable.
Stream side_stream(Device device, int slot);

// Returns when all work queued on `stream` of `device` is done.
void synchronize_stream(Device device, Stream stream);

// Queues a copy of `bytes` on `stream` and returns, on CUDA before it is done: both buffers must
// stay alive and unchanged until the stream is synchronized. The copy runs asynchronously to the
// host only from page-locked host memory (pinned_host_allocator()); from pageable memory the driver
// first copies into its own pinned buffer, and the call returns when that is done.
void copy_bytes_async(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes,
                      Stream stream);

// Work queued on `waiter` from now on starts only after what `producer` has queued by now: a side
// stream's copy of a tensor that a kernel on the default stream is still writing. The host does not
// wait (cudaEventRecord, then cudaStreamWaitEvent). Nothing to do on the CPU.
void stream_wait(Device device, Stream waiter, Stream producer);

// A point in a stream's queue (a CUDA event), so the host can wait for one copy rather than for
// everything queued on the stream since (synchronize_stream). On the CPU and the meta device there
// is nothing to wait for: it is done when made.
class StreamEvent {
 public:
  StreamEvent() = default;                // done
  StreamEvent(Device device, Stream stream);  // recorded on `stream` now
  ~StreamEvent();
  StreamEvent(StreamEvent&& other) noexcept;
  StreamEvent& operator=(StreamEvent&& other) noexcept;
  StreamEvent(const StreamEvent&) = delete;
  StreamEvent& operator=(const StreamEvent&) = delete;

  void synchronize() const;  // returns when the work queued before it is done

 private:
  void* handle_ = nullptr;  // null: nothing to wait for
};

// `tensor`'s memory is used by work on `stream` too, not only by the stream it was allocated for:
// when it is freed, the caching allocator does not reuse it until that work (queued by then) is done
// (torch.Tensor.record_stream). Nothing to do on the CPU, or for an allocator that does not cache.
void record_stream(const Tensor& tensor, Stream stream);

}  // namespace frugal
