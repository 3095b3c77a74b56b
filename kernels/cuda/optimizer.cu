// CUDA fused optimizer steps (kernels/optimizer_backends.h): one launch updates every tensor of a
// TensorList ("multi-tensor apply"): blockIdx.y picks the tensor, the x dimension strides over its
// elements, and each element goes through the same per-element update as on the CPU
// (kernels/optimizer_ops.h). Built by nvcc and for the CUDA emulator (core/cuda/kernel_support.h).
#include <type_traits>

#include "core/convert.h"
#include "core/cuda/kernel_support.h"
#include "kernels/visit_floating.h"
#include "kernels/optimizer_backends.h"

namespace frugal::FRUGAL_CUDA_NAMESPACE {

namespace {
constexpr unsigned kBlocksPerTensor = 64;  // x blocks per tensor; they stride over larger tensors

template <typename T, typename C>
__global__ void sgd_kernel(TensorList list, SgdConfig config) {
  const int t = blockIdx.y;
  T* p = static_cast<T*>(list.params[t]);
  const T* g = static_cast<const T*>(list.grads[t]);
  T* buffer = static_cast<T*>(list.state1[t]);
  for (std::int64_t i = grid_thread(); i < list.sizes[t]; i += grid_threads()) {
    C param = convert<C>(p[i]), b = buffer ? convert<C>(buffer[i]) : C(0);
    optimizer::sgd<C>(param, convert<C>(g[i]), b, config);
    p[i] = convert<T>(param);
    if (buffer) buffer[i] = convert<T>(b);
  }
}

template <typename T, typename C>
__global__ void adamw_kernel(TensorList list, AdamWConfig config, optimizer::AdamWCorrections corrections) {
  const int t = blockIdx.y;
  T* p = static_cast<T*>(list.params[t]);
  const T* g = static_cast<const T*>(list.grads[t]);
  T* m = static_cast<T*>(list.state1[t]);
  T* v = static_cast<T*>(list.state2[t]);
  for (std::int64_t i = grid_thread(); i < list.sizes[t]; i += grid_threads()) {
    C param = convert<C>(p[i]), mi = convert<C>(m[i]), vi = convert<C>(v[i]);
    optimizer::adamw<C>(param, convert<C>(g[i]), mi, vi, config, corrections);
    p[i] = convert<T>(param);
    m[i] = convert<T>(mi);
    v[i] = convert<T>(vi);
  }
}

}  // namespace

void sgd_step(DType dtype, const TensorList& list, const SgdConfig& config) {
  if (list.count == 0) return;
  const dim3 grid(kBlocksPerTensor, static_cast<unsigned>(list.count));
  visit_floating(dtype, "optimizer steps", [&]<typename T, typename C>() {
    FRUGAL_LAUNCH(grid, kGridBlockThreads, 0, nullptr, sgd_kernel<T, C>)(list, config);
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

void adamw_step(DType dtype, const TensorList& list, const AdamWConfig& config) {
  if (list.count == 0) return;
  const dim3 grid(kBlocksPerTensor, static_cast<unsigned>(list.count));
  visit_floating(dtype, "optimizer steps", [&]<typename T, typename C>() {
    FRUGAL_LAUNCH(grid, kGridBlockThreads, 0, nullptr, adamw_kernel<T, C>)(list, config,
                                                                             optimizer::adamw_corrections(config));
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

}  // namespace frugal::FRUGAL_CUDA_NAMESPACE
