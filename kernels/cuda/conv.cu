// CUDA kernels of the native convolution (kernels/conv_backends.h), the same names as the CPU ones.
// Each is a thin loop around the index math of kernels/conv_ops.h:
//   im2col, col2im and the depthwise forward / input gradient: one thread per element written
//   (gathers, so no atomics and a fixed summation order);
//   depthwise weight gradient: one block per (output channel, tap), whose threads share out the
//   batch's pixels and combine their sums with kernels/cuda/block_reduce.cuh. Simple
//   rather than fastest: each block rereads the gradient plane once per tap.
// Built by nvcc for the GPU and by the host compiler for the emulator (core/cuda/kernel_support.h).
#include "core/convert.h"
#include "core/cuda/kernel_support.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/conv_backends.h"
#include "kernels/visit_floating.h"

namespace frugal::FRUGAL_CUDA_NAMESPACE {

namespace {
constexpr int kWarps = kGridBlockThreads / 32;

template <typename T>
__global__ void im2col_kernel(ConvGeometry g, const T* x, T* col) {
  const std::int64_t columns = g.out_plane(), n = g.channels * g.taps() * columns;
  for (std::int64_t i = grid_thread(); i < n; i += grid_threads()) {
    const std::int64_t source = im2col_source(g, i / columns, i % columns);
    col[i] = source < 0 ? convert<T>(0.0f) : x[source];
  }
}

template <typename T, typename C>
__global__ void col2im_kernel(ConvGeometry g, const T* col, T* x) {
  const std::int64_t n = g.channels * g.plane();
  for (std::int64_t i = grid_thread(); i < n; i += grid_threads())
    x[i] = convert<T>(col2im_gather<C>(g, col, i / g.plane(), i % g.plane() / g.width, i % g.width));
}

template <typename T, typename C>
__global__ void depthwise_forward_kernel(ConvGeometry g, std::int64_t batch, std::int64_t multiplier, const T* x,
                                         const T* weight, const T* bias, T* y, bool relu6) {
  const std::int64_t out_channels = g.channels * multiplier, n = batch * out_channels * g.out_plane();
  for (std::int64_t i = grid_thread(); i < n; i += grid_threads()) {
    const std::int64_t plane = i / g.out_plane(), pixel = i % g.out_plane();
    const std::int64_t sample = plane / out_channels, oc = plane % out_channels;
    const T* x_plane = x + (sample * g.channels + oc / multiplier) * g.plane();
    const C total = depthwise_output<C>(g, x_plane, weight + oc * g.taps(), pixel / g.out_width, pixel % g.out_width);
    const C value = bias ? total + convert<C>(bias[oc]) : total;
    y[i] = convert<T>(relu6 ? clamp_relu6(value) : value);
  }
}

template <typename T, typename C>
__global__ void depthwise_backward_input_kernel(ConvGeometry g, std::int64_t batch, std::int64_t multiplier,
                                                const T* grad_y, const T* weight, T* grad_x) {
  const std::int64_t n = batch * g.channels * g.plane(), sample_out = g.channels * multiplier * g.out_plane();
  for (std::int64_t i = grid_thread(); i < n; i += grid_threads()) {
    const std::int64_t plane = i / g.plane(), pixel = i % g.plane();
    grad_x[i] = convert<T>(depthwise_input_grad<C>(g, multiplier, grad_y + plane / g.channels * sample_out, weight,
                                                   plane % g.channels, pixel / g.width, pixel % g.width));
  }
}

// A plain sum as a block_reduce accumulator (kernels/cuda/block_reduce.cuh).
template <typename C>
struct Sum {
  C value = 0;
  __device__ void merge(const Sum& other) { value += other.value; }
};

// Block b computes grad_weight[b]: output channel b / taps, tap b % taps.
template <typename T, typename C>
__global__ void depthwise_backward_weight_kernel(ConvGeometry g, std::int64_t batch, std::int64_t multiplier,
                                                 const T* grad_y, const T* x, T* grad_weight) {
  FRUGAL_DYNAMIC_SHARED(Sum<C>, per_warp);
  const std::int64_t oc = blockIdx.x / g.taps(), kh = blockIdx.x % g.taps() / g.kernel_w, kw = blockIdx.x % g.kernel_w;
  const std::int64_t out_channels = g.channels * multiplier;
  Sum<C> total;
  for (std::int64_t i = threadIdx.x; i < batch * g.out_plane(); i += blockDim.x) {
    const std::int64_t sample = i / g.out_plane();
    total.value += depthwise_weight_term<C>(g, x + (sample * g.channels + oc / multiplier) * g.plane(),
                                            grad_y + (sample * out_channels + oc) * g.out_plane(), kh, kw, i % g.out_plane());
  }
  total = block_reduce(total, per_warp);
  if (threadIdx.x == 0) grad_weight[blockIdx.x] = convert<T>(total.value);
}

}  // namespace

void im2col(DType dtype, const ConvGeometry& g, const void* x, void* col) {
  visit_floating(dtype, "conv2d", [&]<typename T, typename>() {
    FRUGAL_LAUNCH(grid_for(g.channels * g.taps() * g.out_plane()), kGridBlockThreads, 0, nullptr, im2col_kernel<T>)(
        g, static_cast<const T*>(x), static_cast<T*>(col));
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

void col2im(DType dtype, const ConvGeometry& g, const void* col, void* x) {
  visit_floating(dtype, "conv2d_backward_input", [&]<typename T, typename C>() {
    FRUGAL_LAUNCH(grid_for(g.channels * g.plane()), kGridBlockThreads, 0, nullptr, col2im_kernel<T, C>)(
        g, static_cast<const T*>(col), static_cast<T*>(x));
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

void depthwise_forward(DType dtype, const ConvGeometry& g, std::int64_t batch, std::int64_t multiplier, const void* x,
                       const void* weight, const void* bias, void* y, bool relu6) {
  visit_floating(dtype, "conv2d", [&]<typename T, typename C>() {
    FRUGAL_LAUNCH(grid_for(batch * g.channels * multiplier * g.out_plane()), kGridBlockThreads, 0, nullptr,
                  depthwise_forward_kernel<T, C>)(g, batch, multiplier, static_cast<const T*>(x),
                                                  static_cast<const T*>(weight), static_cast<const T*>(bias),
                                                  static_cast<T*>(y), relu6);
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

void depthwise_backward_input(DType dtype, const ConvGeometry& g, std::int64_t batch, std::int64_t multiplier,
                              const void* grad_y, const void* weight, void* grad_x) {
  visit_floating(dtype, "conv2d_backward_input", [&]<typename T, typename C>() {
    FRUGAL_LAUNCH(grid_for(batch * g.channels * g.plane()), kGridBlockThreads, 0, nullptr,
                  depthwise_backward_input_kernel<T, C>)(g, batch, multiplier, static_cast<const T*>(grad_y),
                                                         static_cast<const T*>(weight), static_cast<T*>(grad_x));
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

void depthwise_backward_weight(DType dtype, const ConvGeometry& g, std::int64_t batch, std::int64_t multiplier,
                               const void* grad_y, const void* x, void* grad_weight) {
  const std::int64_t blocks = g.channels * multiplier * g.taps();  // one per weight element
  visit_floating(dtype, "conv2d_backward_weight", [&]<typename T, typename C>() {
    FRUGAL_LAUNCH(static_cast<int>(blocks), kGridBlockThreads, kWarps * sizeof(Sum<C>), nullptr,
                  depthwise_backward_weight_kernel<T, C>)(g, batch, multiplier, static_cast<const T*>(grad_y),
                                                          static_cast<const T*>(x), static_cast<T*>(grad_weight));
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

}  // namespace frugal::FRUGAL_CUDA_NAMESPACE
