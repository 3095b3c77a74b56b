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

// `tensor`'s memory is used by work on `stream` too, not only by the stream it was allocated for:
// when it is freed, the caching allocator does not reuse it until that work (queued by then) is done
// (torch.Tensor.record_stream). Nothing to do on the CPU, or for an allocator that does not cache.
void record_stream(const Tensor& tensor, Stream stream);

}  // namespace frugal
