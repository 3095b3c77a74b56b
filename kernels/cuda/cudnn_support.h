// cuDNN plumbing shared by the library-backed convolution and batch norm: one handle per device,
// frugal dtypes as cuDNN's, and descriptors that destroy themselves. Include only from files
// compiled with CUDA (it names cuDNN types); cuDNN cannot run in the emulator.
// Not here: workspaces, which come from frugal's allocator (kernels/workspace.h).
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <span>

#include "core/dtype.h"

namespace frugal::cuda {

// The handle of the current device, created on first use and kept for the process (creating one
// costs milliseconds; destroying at exit races the runtime's own teardown). Runs on the default stream.
// One handle per device, not per thread: cuDNN calls must come from one thread at a time (frugal's
// training runs its ops on one thread; the loader's workers never call cuDNN).
cudnnHandle_t cudnn_handle();

cudnnDataType_t cudnn_data_type(DType dtype);  // DTypeError for a non-floating dtype

// An N-d tensor descriptor (cuDNN wants at least 4 dims; shorter shapes are padded with 1s).
class CudnnTensor {
 public:
  CudnnTensor(DType dtype, std::span<const std::int64_t> shape, std::span<const std::int64_t> strides);
  ~CudnnTensor();
  CudnnTensor(const CudnnTensor&) = delete;
  CudnnTensor& operator=(const CudnnTensor&) = delete;
  cudnnTensorDescriptor_t get() const { return desc_; }

 private:
  cudnnTensorDescriptor_t desc_ = nullptr;
};

}  // namespace frugal::cuda
