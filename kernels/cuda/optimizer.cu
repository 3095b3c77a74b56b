// CUDA fused optimizer steps (kernels/optimizer_backends.h): one launch updates every tensor of a
// TensorList ("multi-tensor apply"): blockIdx.y picks the tensor, the x dimension strides over its
// elements, and each element goes through the same per-element update as on the CPU
// (kernels/optimizer_ops.h). AdamW8bit instead gives each block of threads one block of kQuantBlock
// elements, whose new absmax the threads find together (block_reduce) before they code the moments.
// Built by nvcc and for the CUDA emulator (core/cuda/kernel_support.h).
#include <type_traits>

#include "core/convert.h"
#include "core/cuda/kernel_support.h"
#include "kernels/cuda/block_reduce.cuh"
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

// The two moments' absmax over a block (block_reduce's accumulator).
struct MomentMax {
  float m = 0.0f, v = 0.0f;
  __device__ void merge(const MomentMax& other) {
    m = fmaxf(m, other.m);
    v = fmaxf(v, other.v);
  }
};

// blockIdx.y: the tensor; blockIdx.x strides over its quant blocks; thread i: element i of the block.
__global__ void adamw8bit_kernel(TensorList list, AdamWConfig config, optimizer::AdamWCorrections corrections) {
  FRUGAL_DYNAMIC_SHARED(MomentMax, per_warp);
  const int t = blockIdx.y;
  const std::int64_t blocks = (list.sizes[t] + optimizer::kQuantBlock - 1) / optimizer::kQuantBlock;
  for (std::int64_t block = blockIdx.x; block < blocks; block += gridDim.x) {
    const std::int64_t i = block * optimizer::kQuantBlock + threadIdx.x;
    const bool mine = i < list.sizes[t];
    float* scales_m = static_cast<float*>(list.state3[t]);
    float* scales_v = static_cast<float*>(list.state4[t]);
    MomentMax moments;  // this thread's new moments (0 past the tensor's end)
    if (mine) {
      float* p = static_cast<float*>(list.params[t]);
      const float* g = static_cast<const float*>(list.grads[t]);
      const std::uint8_t m_code = static_cast<std::uint8_t*>(list.state1[t])[i];
      const std::uint8_t v_code = static_cast<std::uint8_t*>(list.state2[t])[i];
      optimizer::adamw8bit_element(p[i], g[i], m_code, v_code, scales_m[block], scales_v[block], moments.m, moments.v,
                                   config, corrections);
    }
    MomentMax absmax{fabsf(moments.m), moments.v};
    absmax = block_reduce(absmax, per_warp);  // every thread has read its block's old scales by now
    if (mine) {
      static_cast<std::uint8_t*>(list.state1[t])[i] = optimizer::code_in_block<true>(moments.m, absmax.m);
      static_cast<std::uint8_t*>(list.state2[t])[i] = optimizer::code_in_block<false>(moments.v, absmax.v);
    }
    if (threadIdx.x == 0) {
      scales_m[block] = absmax.m;
      scales_v[block] = absmax.v;
    }
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

void adamw8bit_step(const TensorList& list, const AdamWConfig& config) {
  if (list.count == 0) return;
  const dim3 grid(kBlocksPerTensor, static_cast<unsigned>(list.count));
  constexpr int kWarps = optimizer::kQuantBlock / kWarpLanes;
  FRUGAL_LAUNCH(grid, optimizer::kQuantBlock, kWarps * sizeof(MomentMax), nullptr, adamw8bit_kernel)(
      list, config, optimizer::adamw_corrections(config));
  FRUGAL_CUDA_CHECK_LAUNCH();
}

}  // namespace frugal::FRUGAL_CUDA_NAMESPACE
