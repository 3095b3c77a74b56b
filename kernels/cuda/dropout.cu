// CUDA dropout (kernels/dropout_backends.h), the same name as the CPU kernel: a grid-stride loop, one
// thread per Philox block of four elements, each through dropout_block (kernels/dropout_ops.h), so
// the GPU keeps exactly the elements the CPU keeps. Built by nvcc and for the CUDA emulator
// (core/cuda/kernel_support.h).
#include "core/cuda/kernel_support.h"
#include "kernels/dropout_backends.h"
#include "kernels/visit_floating.h"

namespace frugal::FRUGAL_CUDA_NAMESPACE {

namespace {
template <typename T, typename C>
__global__ void dropout_kernel(const T* in, T* out, std::int64_t numel, DropoutSpec spec, std::int64_t blocks) {
  for (std::int64_t block = grid_thread(); block < blocks; block += grid_threads())
    dropout_block<T, C>(in, out, numel, spec, block);
}
}  // namespace

void dropout_apply(DType dtype, const void* in, void* out, std::int64_t numel, const DropoutSpec& spec) {
  const std::int64_t blocks = philox_blocks_for(numel);
  visit_floating(dtype, "dropout", [&]<typename T, typename C>() {
    FRUGAL_LAUNCH(grid_for(blocks), kGridBlockThreads, 0, nullptr, dropout_kernel<T, C>)(
        static_cast<const T*>(in), static_cast<T*>(out), numel, spec, blocks);
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

}  // namespace frugal::FRUGAL_CUDA_NAMESPACE
