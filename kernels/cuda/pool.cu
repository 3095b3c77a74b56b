// CUDA pooling (kernels/pool_backends.h), the same names as the CPU ones: thin grid-stride loops
// around the per-element functions of kernels/pool_ops.h. The forward is one thread per output
// element; the backward is one thread per input element that gathers from the outputs whose
// windows hold it (Note [Backward as a gather]).
// Built by nvcc for the GPU and by the host compiler for the emulator (core/cuda/kernel_support.h).
//
// Note [Backward as a gather]
// The obvious backward of max pooling is one thread per output doing atomicAdd into the input it
// picked. Overlapping windows (3x3 stride 2, ResNet's stem) make several outputs add to one input,
// so the float sum's order, and its last bits, would change from run to run. Instead each input
// thread finds the outputs whose windows span it (pool_ops.h: outputs_covering; about
// ceil(extent / stride)^2 of them, 4 for 3x3 stride 2) and adds those that recorded its position.
// That reads a few extra gradients and indices per input, no more than pooling's small windows
// cost, and is deterministic, needs no atomics (so no atomicAdd on f16/bf16 either), and adds in
// the CPU's order, so the result has the same bits as the CPU reference. The averages gather the
// same way (each covering output contributes gradient / divisor).
#include "core/cuda/kernel_support.h"
#include "kernels/pool_backends.h"
#include "kernels/visit_floating.h"

namespace frugal::FRUGAL_CUDA_NAMESPACE {

namespace {

// Element i of the contiguous [planes, OH, OW] output.
template <typename T, typename C>
__global__ void pool_kernel(PoolKind kind, const T* x, ImageLayout x_layout, PoolGeometry g, T* out, std::int64_t* indices,
                            std::int64_t n) {
  for (std::int64_t i = grid_thread(); i < n; i += grid_threads()) {
    const std::int64_t ow = i % g.w.out, oh = i / g.w.out % g.h.out, p = i / (g.w.out * g.h.out);
    const PoolValue<C> v = pool_element<T, C>(kind, x + plane_offset(x_layout, p), x_layout, g, oh, ow);
    out[i] = convert<T>(v.value);
    if (indices) indices[i] = v.index;
  }
}

// Element i of the contiguous [planes, H, W] input gradient.
template <typename T, typename C>
__global__ void pool_backward_kernel(PoolKind kind, const T* grad_output, const std::int64_t* indices, PoolGeometry g,
                                     T* grad_input, std::int64_t n) {
  for (std::int64_t i = grid_thread(); i < n; i += grid_threads()) {
    const std::int64_t x = i % g.w.in, y = i / g.w.in % g.h.in, p = i / (g.w.in * g.h.in);
    const std::int64_t plane = p * g.h.out * g.w.out;
    grad_input[i] = convert<T>(
        pool_input_gradient<T, C>(kind, grad_output + plane, indices ? indices + plane : nullptr, g, y, x));
  }
}

}  // namespace

void pool2d(PoolKind kind, DType dtype, const void* x, const ImageLayout& x_layout, const PoolGeometry& geometry, void* out,
            std::int64_t* indices) {
  const std::int64_t n = geometry.planes * geometry.h.out * geometry.w.out;
  visit_floating(dtype, "pooling", [&]<typename T, typename C>() {
    FRUGAL_LAUNCH(grid_for(n), kGridBlockThreads, 0, nullptr, pool_kernel<T, C>)(
        kind, static_cast<const T*>(x), x_layout, geometry, static_cast<T*>(out), indices, n);
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

void pool2d_backward(PoolKind kind, DType dtype, const void* grad_output, const std::int64_t* indices,
                     const PoolGeometry& geometry, void* grad_input) {
  const std::int64_t n = geometry.planes * geometry.h.in * geometry.w.in;
  visit_floating(dtype, "pooling", [&]<typename T, typename C>() {
    FRUGAL_LAUNCH(grid_for(n), kGridBlockThreads, 0, nullptr, pool_backward_kernel<T, C>)(
        kind, static_cast<const T*>(grad_output), indices, geometry, static_cast<T*>(grad_input), n);
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

}  // namespace frugal::FRUGAL_CUDA_NAMESPACE
