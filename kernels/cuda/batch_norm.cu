// CUDA batch norm (kernels/batch_norm_backends.h), the same names as the CPU's; BatchNormImpl::native.
//   per-channel passes (statistics, backward sums): one block per channel. Each thread folds a
//     strided share of the channel's N * S elements into an accumulator (Welford for the
//     statistics, two sums for the backward), then the block combines them, first within each warp
//     with shuffles, then across warps through shared memory (kernels/cuda/block_reduce.cuh), and
//     thread 0 writes the channel's results.
//   elementwise passes (normalise, input gradient): a 2-D grid, blockIdx.y a channel, the x
//     dimension striding over that channel's elements, so each thread computes its channel's
//     coefficients once.
// The arithmetic is kernels/batch_norm_ops.h, the same as the CPU's. Built by nvcc for the GPU and
// by the host compiler for the emulator (core/cuda/kernel_support.h).
// Not here: a channels-last layout, or a split of one channel over several blocks
// (which would keep more SMs busy when C is small; measure first).
#include <algorithm>

#include "core/convert.h"
#include "core/cuda/kernel_support.h"
#include "kernels/batch_norm_backends.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/visit_floating.h"

namespace frugal::FRUGAL_CUDA_NAMESPACE {

namespace {
// One block per channel leaves SMs idle when C is small, so a long channel's block is as large as
// CUDA allows, to keep the most loads in flight. A short one gets only the warps its values fill
// (reduce_threads): a deep layer's channel of 16 values (batch 4, 2 x 2) reduces in one warp rather
// than in 32 warps of which 31 hold nothing but still shuffle and meet at two barriers.
constexpr int kReduceThreads = 1024;
constexpr int kElementwiseThreads = 256;  // 8 warps: enough resident work per SM for a memory-bound pass
// Blocks along one channel for the elementwise passes: with the dozens of channels of a CNN layer
// that is thousands of blocks, enough to fill any GPU; longer channels are strided over.
constexpr std::int64_t kMaxBlocksPerChannel = 64;
constexpr std::int64_t kMaxChannelBlocks = 65535;  // CUDA's limit on gridDim.y; more channels loop

template <typename T, typename C>
__global__ void statistics_kernel(const T* x, BatchNormShape shape, double momentum, double eps, C* save_mean,
                                  C* save_invstd, C* running_mean, C* running_var) {
  FRUGAL_DYNAMIC_SHARED(Welford, per_warp);
  for (std::int64_t c = blockIdx.x; c < shape.channels; c += gridDim.x) {
    Welford stats;
    for (ChannelWalk w(shape, threadIdx.x, blockDim.x); w.n < shape.batch; w.advance())
      stats.add(convert<double>(x[shape.offset(w.n, c, w.s)]));
    stats = block_reduce(stats, per_warp);
    if (threadIdx.x == 0)
      batch_norm::finish_statistics(stats, c, momentum, eps, save_mean, save_invstd, running_mean, running_var);
  }
}

template <typename T, typename C>
__global__ void backward_sums_kernel(const T* grad, const T* x, const T* fused_output, BatchNormShape shape,
                                     const C* mean, const C* invstd, C* sum_dy, C* sum_dy_xhat) {
  FRUGAL_DYNAMIC_SHARED(batch_norm::GradSums, per_warp);
  for (std::int64_t c = blockIdx.x; c < shape.channels; c += gridDim.x) {
    batch_norm::GradSums sums;
    for (ChannelWalk w(shape, threadIdx.x, blockDim.x); w.n < shape.batch; w.advance()) {
      const std::int64_t i = shape.offset(w.n, c, w.s);
      sums.add(batch_norm::incoming_grad<C>(grad, fused_output, i), batch_norm::xhat(convert<C>(x[i]), mean[c], invstd[c]));
    }
    sums = block_reduce(sums, per_warp);
    if (threadIdx.x == 0) {
      sum_dy[c] = static_cast<C>(sums.dy);
      sum_dy_xhat[c] = static_cast<C>(sums.dy_xhat);
    }
  }
}

template <typename T, typename C>
__global__ void normalize_kernel(const T* x, BatchNormShape shape, const C* mean, const C* invstd, const C* weight,
                                 const C* bias, bool relu6, T* y) {
  const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t c = blockIdx.y; c < shape.channels; c += gridDim.y) {
    const auto affine = batch_norm::channel_affine(mean, invstd, weight, bias, c);
    for (ChannelWalk w(shape, first, step); w.n < shape.batch; w.advance()) {
      const std::int64_t i = shape.offset(w.n, c, w.s);
      y[i] = convert<T>(batch_norm::normalize(convert<C>(x[i]), affine, relu6));
    }
  }
}

template <typename T, typename C>
__global__ void backward_input_kernel(const T* grad, const T* x, const T* fused_output, BatchNormShape shape,
                                      const C* mean, const C* invstd, const C* weight, const C* sum_dy,
                                      const C* sum_dy_xhat, bool training, T* grad_input) {
  const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t c = blockIdx.y; c < shape.channels; c += gridDim.y) {
    const auto coefficients =
        batch_norm::channel_backward(mean, invstd, weight, sum_dy, sum_dy_xhat, training, shape.per_channel(), c);
    for (ChannelWalk w(shape, first, step); w.n < shape.batch; w.advance()) {
      const std::int64_t i = shape.offset(w.n, c, w.s);
      const C g = batch_norm::incoming_grad<C>(grad, fused_output, i);
      grad_input[i] = convert<T>(batch_norm::grad_input(g, convert<C>(x[i]), coefficients));
    }
  }
}

// The kernels from a saved xhat, laid out as the ones above; every y comes from
// batch_norm::output_from_xhat (Note [One saved tensor per BN-ReLU6]).
template <typename T, typename C>
__global__ void normalize_saving_kernel(const T* x, BatchNormShape shape, const C* mean, const C* invstd,
                                        const C* weight, const C* bias, bool relu6, T* xhat, T* y) {
  const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t c = blockIdx.y; c < shape.channels; c += gridDim.y) {
    const auto a = batch_norm::channel_scale_shift(weight, bias, c);
    for (ChannelWalk w(shape, first, step); w.n < shape.batch; w.advance()) {
      const std::int64_t i = shape.offset(w.n, c, w.s);
      const T saved = convert<T>(batch_norm::xhat(convert<C>(x[i]), mean[c], invstd[c]));
      xhat[i] = saved;
      y[i] = convert<T>(batch_norm::output_from_xhat(convert<C>(saved), a, relu6));  // from xhat as stored
    }
  }
}

template <typename T, typename C>
__global__ void affine_kernel(const T* xhat, BatchNormShape shape, const C* weight, const C* bias, bool relu6, T* y) {
  const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t c = blockIdx.y; c < shape.channels; c += gridDim.y) {
    const auto a = batch_norm::channel_scale_shift(weight, bias, c);
    for (ChannelWalk w(shape, first, step); w.n < shape.batch; w.advance()) {
      const std::int64_t i = shape.offset(w.n, c, w.s);
      y[i] = convert<T>(batch_norm::output_from_xhat(convert<C>(xhat[i]), a, relu6));
    }
  }
}

template <typename T, typename C>
__global__ void backward_sums_from_xhat_kernel(const T* grad, const T* xhat, BatchNormShape shape, const C* weight,
                                               const C* bias, bool relu6, C* sum_dy, C* sum_dy_xhat) {
  FRUGAL_DYNAMIC_SHARED(batch_norm::GradSums, per_warp);
  for (std::int64_t c = blockIdx.x; c < shape.channels; c += gridDim.x) {
    const auto a = batch_norm::channel_scale_shift(weight, bias, c);
    batch_norm::GradSums sums;
    for (ChannelWalk w(shape, threadIdx.x, blockDim.x); w.n < shape.batch; w.advance()) {
      const std::int64_t i = shape.offset(w.n, c, w.s);
      sums.add(batch_norm::incoming_grad_from_xhat<C>(grad, xhat, a, relu6, i), convert<C>(xhat[i]));
    }
    sums = block_reduce(sums, per_warp);
    if (threadIdx.x == 0) {
      sum_dy[c] = static_cast<C>(sums.dy);
      sum_dy_xhat[c] = static_cast<C>(sums.dy_xhat);
    }
  }
}

template <typename T, typename C>
__global__ void backward_input_from_xhat_kernel(const T* grad, const T* xhat, BatchNormShape shape, const C* invstd,
                                                const C* weight, const C* bias, bool relu6, const C* sum_dy,
                                                const C* sum_dy_xhat, bool training, T* grad_input) {
  const std::int64_t first = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * gridDim.x;
  for (std::int64_t c = blockIdx.y; c < shape.channels; c += gridDim.y) {
    const auto a = batch_norm::channel_scale_shift(weight, bias, c);
    const auto coefficients = batch_norm::channel_backward<C>(nullptr, invstd, weight, sum_dy, sum_dy_xhat, training,
                                                              shape.per_channel(), c);
    for (ChannelWalk w(shape, first, step); w.n < shape.batch; w.advance()) {
      const std::int64_t i = shape.offset(w.n, c, w.s);
      const C g = batch_norm::incoming_grad_from_xhat<C>(grad, xhat, a, relu6, i);
      grad_input[i] = convert<T>(batch_norm::grad_input_from_xhat(g, convert<C>(xhat[i]), coefficients));
    }
  }
}

int channel_blocks(const BatchNormShape& shape) { return static_cast<int>(std::min(shape.channels, kMaxChannelBlocks)); }

int reduce_threads(const BatchNormShape& shape) { return threads_for_row(shape.per_channel(), kReduceThreads); }

dim3 elementwise_grid(const BatchNormShape& shape) {
  const std::int64_t along = (shape.per_channel() + kElementwiseThreads - 1) / kElementwiseThreads;
  return dim3(static_cast<unsigned>(std::min(along, kMaxBlocksPerChannel)), static_cast<unsigned>(channel_blocks(shape)));
}
}  // namespace

void batch_norm_statistics(DType dtype, const void* x, const BatchNormShape& shape, double momentum, double eps,
                           void* save_mean, void* save_invstd, void* running_mean, void* running_var) {
  visit_floating(dtype, "batch norm", [&]<typename T, typename C>() {
    const int threads = reduce_threads(shape);
    FRUGAL_LAUNCH(channel_blocks(shape), threads, block_reduce_shared_bytes<Welford>(threads), nullptr,
                  statistics_kernel<T, C>)(
        static_cast<const T*>(x), shape, momentum, eps, static_cast<C*>(save_mean), static_cast<C*>(save_invstd),
        static_cast<C*>(running_mean), static_cast<C*>(running_var));
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

void batch_norm_normalize(DType dtype, const void* x, const BatchNormShape& shape, const void* mean, const void* invstd,
                          const void* weight, const void* bias, bool relu6, void* y) {
  visit_floating(dtype, "batch norm", [&]<typename T, typename C>() {
    FRUGAL_LAUNCH(elementwise_grid(shape), kElementwiseThreads, 0, nullptr, normalize_kernel<T, C>)(
        static_cast<const T*>(x), shape, static_cast<const C*>(mean), static_cast<const C*>(invstd),
        static_cast<const C*>(weight), static_cast<const C*>(bias), relu6, static_cast<T*>(y));
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

void batch_norm_backward_sums(DType dtype, const void* grad, const void* x, const void* fused_output,
                              const BatchNormShape& shape, const void* mean, const void* invstd, void* sum_dy,
                              void* sum_dy_xhat) {
  visit_floating(dtype, "batch norm", [&]<typename T, typename C>() {
    const int threads = reduce_threads(shape);
    FRUGAL_LAUNCH(channel_blocks(shape), threads, block_reduce_shared_bytes<batch_norm::GradSums>(threads), nullptr,
                  backward_sums_kernel<T, C>)(static_cast<const T*>(grad), static_cast<const T*>(x),
                                              static_cast<const T*>(fused_output), shape, static_cast<const C*>(mean),
                                              static_cast<const C*>(invstd), static_cast<C*>(sum_dy),
                                              static_cast<C*>(sum_dy_xhat));
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

void batch_norm_backward_input(DType dtype, const void* grad, const void* x, const void* fused_output,
                               const BatchNormShape& shape, const void* mean, const void* invstd, const void* weight,
                               const void* sum_dy, const void* sum_dy_xhat, bool training, void* grad_input) {
  visit_floating(dtype, "batch norm", [&]<typename T, typename C>() {
    FRUGAL_LAUNCH(elementwise_grid(shape), kElementwiseThreads, 0, nullptr, backward_input_kernel<T, C>)(
        static_cast<const T*>(grad), static_cast<const T*>(x), static_cast<const T*>(fused_output), shape,
        static_cast<const C*>(mean), static_cast<const C*>(invstd), static_cast<const C*>(weight),
        static_cast<const C*>(sum_dy), static_cast<const C*>(sum_dy_xhat), training, static_cast<T*>(grad_input));
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

void batch_norm_normalize_saving(DType dtype, const void* x, const BatchNormShape& shape, const void* mean,
                                 const void* invstd, const void* weight, const void* bias, bool relu6, void* xhat,
                                 void* y) {
  visit_floating(dtype, "batch norm", [&]<typename T, typename C>() {
    FRUGAL_LAUNCH(elementwise_grid(shape), kElementwiseThreads, 0, nullptr, normalize_saving_kernel<T, C>)(
        static_cast<const T*>(x), shape, static_cast<const C*>(mean), static_cast<const C*>(invstd),
        static_cast<const C*>(weight), static_cast<const C*>(bias), relu6, static_cast<T*>(xhat), static_cast<T*>(y));
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

void batch_norm_affine(DType dtype, const void* xhat, const BatchNormShape& shape, const void* weight, const void* bias,
                       bool relu6, void* y) {
  visit_floating(dtype, "batch norm", [&]<typename T, typename C>() {
    FRUGAL_LAUNCH(elementwise_grid(shape), kElementwiseThreads, 0, nullptr, affine_kernel<T, C>)(
        static_cast<const T*>(xhat), shape, static_cast<const C*>(weight), static_cast<const C*>(bias), relu6,
        static_cast<T*>(y));
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

void batch_norm_backward_sums_from_xhat(DType dtype, const void* grad, const void* xhat, const BatchNormShape& shape,
                                        const void* weight, const void* bias, bool relu6, void* sum_dy,
                                        void* sum_dy_xhat) {
  visit_floating(dtype, "batch norm", [&]<typename T, typename C>() {
    const int threads = reduce_threads(shape);
    FRUGAL_LAUNCH(channel_blocks(shape), threads, block_reduce_shared_bytes<batch_norm::GradSums>(threads), nullptr,
                  backward_sums_from_xhat_kernel<T, C>)(static_cast<const T*>(grad), static_cast<const T*>(xhat), shape,
                                                        static_cast<const C*>(weight), static_cast<const C*>(bias),
                                                        relu6, static_cast<C*>(sum_dy), static_cast<C*>(sum_dy_xhat));
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

void batch_norm_backward_input_from_xhat(DType dtype, const void* grad, const void* xhat, const BatchNormShape& shape,
                                         const void* invstd, const void* weight, const void* bias, bool relu6,
                                         const void* sum_dy, const void* sum_dy_xhat, bool training, void* grad_input) {
  visit_floating(dtype, "batch norm", [&]<typename T, typename C>() {
    FRUGAL_LAUNCH(elementwise_grid(shape), kElementwiseThreads, 0, nullptr, backward_input_from_xhat_kernel<T, C>)(
        static_cast<const T*>(grad), static_cast<const T*>(xhat), shape, static_cast<const C*>(invstd),
        static_cast<const C*>(weight), static_cast<const C*>(bias), relu6, static_cast<const C*>(sum_dy),
        static_cast<const C*>(sum_dy_xhat), training, static_cast<T*>(grad_input));
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

}  // namespace frugal::FRUGAL_CUDA_NAMESPACE
