// Host-side entry points of the CUDA backend, declared without any CUDA type so that plain .cpp
// files (the dispatch sites) can include this header in every CUDA build.
// Not here: the status-check macros (core/cuda/check.h), which do need CUDA headers.
#pragma once

#include <cstddef>
#include <memory>

#include "core/allocator.h"
#include "core/cuda_status.h"

namespace frugal::cuda {

CudaStatus query_status();
CudaDeviceInfo device_info(int index);
CudaLibraryVersions library_versions();

void set_current_device(int index);
void synchronize(int index);
void copy_bytes(void* dst, const void* src, std::size_t bytes);  // any direction; synchronous

// The direct allocator of the foundation: cudaMalloc/cudaFree on one device, no caching.
std::unique_ptr<Allocator> make_direct_allocator(int index);

}  // namespace frugal::cuda
