// kernels/cuda/cudnn_support.h: cuDNN handles, dtypes and tensor descriptors.
#include "kernels/cuda/cudnn_support.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "kernels/cuda/library_check.h"

namespace frugal::cuda {

cudnnHandle_t cudnn_handle() {
  static std::mutex mutex;
  static std::map<int, cudnnHandle_t> handles;
  int device = 0;
  FRUGAL_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard lock(mutex);
  cudnnHandle_t& handle = handles[device];
  if (!handle) FRUGAL_CUDNN_CHECK(cudnnCreate(&handle));
  return handle;
}

cudnnDataType_t cudnn_data_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f64: return CUDNN_DATA_DOUBLE;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: FRUGAL_THROW(DTypeError, "cuDNN takes floating dtypes, got ", dtype);
  }
}

CudnnTensor::CudnnTensor(DType dtype, std::span<const std::int64_t> shape, std::span<const std::int64_t> strides) {
  constexpr std::size_t kMinDims = 4;  // cuDNN rejects fewer
  std::vector<int> dims, steps;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    FRUGAL_CHECK_VALUE(shape[d] <= INT32_MAX && strides[d] <= INT32_MAX, "cuDNN takes 32-bit sizes and strides; dim ", d,
                       " has size ", shape[d], " and stride ", strides[d]);
    dims.push_back(static_cast<int>(shape[d]));
    steps.push_back(static_cast<int>(strides[d]));
  }
  while (dims.size() < kMinDims) {
    dims.push_back(1);
    steps.push_back(1);
  }
  // A size-1 dim's stride is arbitrary to frugal (is_contiguous ignores it; an expanded or narrowed
  // view leaves 0 or a parent's stride there), but cuDNN reads it: give it the packed value, the
  // product of the sizes inside it, as PyTorch does (fixSizeOneDimStride).
  std::int64_t inner = 1;
  for (std::size_t d = dims.size(); d-- > 0;) {
    if (dims[d] == 1)
      steps[d] = static_cast<int>(std::min<std::int64_t>(inner, INT32_MAX));
    else
      inner *= dims[d];
  }
  const cudnnDataType_t type = cudnn_data_type(dtype);
  FRUGAL_CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc_));
  try {
    FRUGAL_CUDNN_CHECK(cudnnSetTensorNdDescriptor(desc_, type, static_cast<int>(dims.size()), dims.data(), steps.data()));
  } catch (...) {
    cudnnDestroyTensorDescriptor(desc_);  // the destructor does not run for a throwing constructor
    throw;
  }
}

CudnnTensor::~CudnnTensor() { cudnnDestroyTensorDescriptor(desc_); }

}  // namespace frugal::cuda
