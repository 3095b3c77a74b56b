// CUDA elementwise kernels (kernels/elementwise_backends.h), the same names as the CPU ones: thin
// grid-stride loops around the per-element functions of kernels/elementwise_ops.h, with each
// operand's offset from its own StridedLayout (broadcast operands have stride-0 dims). This naive
// form reads through strides element by element; contiguous fast paths come with the op benchmarks.
// Built by nvcc for the GPU and by the host compiler for the emulator (core/cuda/kernel_support.h).
#include <type_traits>

#include "core/convert.h"
#include "core/cuda/kernel_support.h"
#include "kernels/visit_floating.h"
#include "kernels/elementwise_backends.h"

namespace frugal::FRUGAL_CUDA_NAMESPACE {

namespace {
template <typename T, typename C>
__global__ void unary_kernel(UnaryOp op, C a, C b, T* out, StridedLayout out_layout, const T* x, StridedLayout x_layout,
                             std::int64_t n) {
  for (std::int64_t i = grid_thread(); i < n; i += grid_threads())
    out[strided_offset(out_layout, i)] = convert<T>(elementwise::unary<C>(op, convert<C>(x[strided_offset(x_layout, i)]), a, b));
}

template <typename T, typename C>
__global__ void binary_kernel(BinaryOp op, T* out, StridedLayout out_layout, const T* x, StridedLayout x_layout, const T* y,
                              StridedLayout y_layout, std::int64_t n) {
  for (std::int64_t i = grid_thread(); i < n; i += grid_threads())
    out[strided_offset(out_layout, i)] = convert<T>(elementwise::binary<C>(
        op, convert<C>(x[strided_offset(x_layout, i)]), convert<C>(y[strided_offset(y_layout, i)])));
}

template <typename T>
__global__ void where_kernel(T* out, StridedLayout out_layout, const bool* condition, StridedLayout condition_layout,
                             const T* x, StridedLayout x_layout, const T* y, StridedLayout y_layout, std::int64_t n) {
  for (std::int64_t i = grid_thread(); i < n; i += grid_threads())
    out[strided_offset(out_layout, i)] =
        condition[strided_offset(condition_layout, i)] ? x[strided_offset(x_layout, i)] : y[strided_offset(y_layout, i)];
}

}  // namespace

void unary(UnaryOp op, double a, double b, DType dtype, void* out, const StridedLayout& out_layout, const void* x,
           const StridedLayout& x_layout) {
  const std::int64_t n = layout_numel(out_layout);
  visit_floating(dtype, "elementwise kernels", [&]<typename T, typename C>() {
    FRUGAL_LAUNCH(grid_for(n), kGridBlockThreads, 0, nullptr, unary_kernel<T, C>)(
        op, static_cast<C>(a), static_cast<C>(b), static_cast<T*>(out), out_layout, static_cast<const T*>(x), x_layout, n);
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

void binary(BinaryOp op, DType dtype, void* out, const StridedLayout& out_layout, const void* x,
            const StridedLayout& x_layout, const void* y, const StridedLayout& y_layout) {
  const std::int64_t n = layout_numel(out_layout);
  visit_floating(dtype, "elementwise kernels", [&]<typename T, typename C>() {
    FRUGAL_LAUNCH(grid_for(n), kGridBlockThreads, 0, nullptr, binary_kernel<T, C>)(
        op, static_cast<T*>(out), out_layout, static_cast<const T*>(x), x_layout, static_cast<const T*>(y), y_layout, n);
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

void where(DType dtype, void* out, const StridedLayout& out_layout, const bool* condition,
           const StridedLayout& condition_layout, const void* x, const StridedLayout& x_layout, const void* y,
           const StridedLayout& y_layout) {
  const std::int64_t n = layout_numel(out_layout);
  visit_floating(dtype, "elementwise kernels", [&]<typename T, typename C>() {
    FRUGAL_LAUNCH(grid_for(n), kGridBlockThreads, 0, nullptr, where_kernel<T>)(
        static_cast<T*>(out), out_layout, condition, condition_layout, static_cast<const T*>(x), x_layout,
        static_cast<const T*>(y), y_layout, n);
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

}  // namespace frugal::FRUGAL_CUDA_NAMESPACE
