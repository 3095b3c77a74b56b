// Host-side entry points of the CUDA backend, declared without any CUDA type so that plain .cpp
// files (the dispatch sites) can include this header in every CUDA build.
// Not here: the status-check macros (core/cuda/check.h), which do need CUDA headers.
#pragma once

#include <cstddef>
#include <memory>

#include "core/backing.h"
#include "core/cuda_status.h"

namespace frugal::cuda {

CudaStatus query_status();
CudaDeviceInfo device_info(int index);

void set_current_device(int index);
void synchronize(int index);
void copy_bytes(void* dst, const void* src, std::size_t bytes);  // any direction; synchronous

// Streams (core/stream.h says how frugal uses them).
Stream create_side_stream(int index);  // non-blocking: it does not wait for the legacy default stream
void synchronize_stream(int index, Stream stream);
void copy_bytes_async(void* dst, const void* src, std::size_t bytes, Stream stream);  // any direction
void stream_wait(int index, Stream waiter, Stream producer);  // an event recorded on one, waited on by the other
void* record_event(int index, Stream stream);                 // a cudaEvent_t, without timing
void synchronize_event(void* event);
void destroy_event(void* event);

// The backing of device `index`'s caching allocator: cudaMalloc/cudaFree, CUDA events, and
// expandable segments through the driver's virtual memory API (core/cuda/cuda_backing.cpp).
std::unique_ptr<Backing> make_cuda_backing(int index);
// Page-locked host memory for the data loader's staging buffers: cudaHostAlloc.
std::unique_ptr<Backing> make_pinned_host_backing();

}  // namespace frugal::cuda
