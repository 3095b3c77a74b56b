// CUDA implementations of core's data-moving kernels (declared in core/copy.h), the same names as
// core/cpu/kernels.cpp. Each kernel is a thin grid-stride loop around the per-element functions in
// core/strided.h and core/random_spec.h, which the CPU tests exercise directly; the whole file also
// runs in the CUDA emulator (core/cuda/kernel_support.h), where the CPU suite compares it with
// the CPU kernels.
// Not here: anything that computes (kernels/cuda/), streams (all launches use the default stream).

#include "core/copy.h"
#include "core/cuda/kernel_support.h"

namespace frugal::FRUGAL_CUDA_NAMESPACE {

namespace {
template <typename To, typename From>
__global__ void copy_strided_kernel(To* dst, StridedLayout dst_layout, const From* src, StridedLayout src_layout,
                                    std::int64_t n) {
  for (std::int64_t i = grid_thread(); i < n; i += grid_threads())
    dst[strided_offset(dst_layout, i)] = convert<To>(src[strided_offset(src_layout, i)]);
}

template <typename T>
__global__ void fill_strided_kernel(T* dst, StridedLayout layout, T value, std::int64_t n) {
  for (std::int64_t i = grid_thread(); i < n; i += grid_threads()) dst[strided_offset(layout, i)] = value;
}

template <typename T>
__global__ void random_fill_kernel(T* out, std::int64_t numel, RandomSpec spec, std::int64_t blocks) {
  for (std::int64_t block = grid_thread(); block < blocks; block += grid_threads()) random_fill_block(out, numel, spec, block);
}
}  // namespace

void copy_strided(void* dst, DType dst_dtype, const StridedLayout& dst_layout, const void* src, DType src_dtype,
                  const StridedLayout& src_layout) {
  const std::int64_t n = layout_numel(dst_layout);
  if (dst_dtype == src_dtype && is_row_major(dst_layout) && is_row_major(src_layout)) {
    FRUGAL_CUDA_CHECK(cudaMemcpy(dst, src, static_cast<std::size_t>(n) * dtype_size(dst_dtype), cudaMemcpyDeviceToDevice));
    return;
  }
  visit_dtype(dst_dtype, [&]<typename To>() {
    visit_dtype(src_dtype, [&]<typename From>() {
      FRUGAL_LAUNCH(grid_for(n), kGridBlockThreads, 0, nullptr, copy_strided_kernel<To, From>)(
          static_cast<To*>(dst), dst_layout, static_cast<const From*>(src), src_layout, n);
    });
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

void fill_strided(void* dst, DType dtype, const StridedLayout& layout, double value) {
  const std::int64_t n = layout_numel(layout);
  visit_dtype(dtype, [&]<typename T>() {
    FRUGAL_LAUNCH(grid_for(n), kGridBlockThreads, 0, nullptr, fill_strided_kernel<T>)(static_cast<T*>(dst), layout,
                                                                                     convert<T>(value), n);
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

void random_fill(void* dst, DType dtype, std::int64_t numel, const RandomSpec& spec) {
  const std::int64_t blocks = philox_blocks_for(numel);  // one thread per Philox call
  visit_dtype(dtype, [&]<typename T>() {
    FRUGAL_LAUNCH(grid_for(blocks), kGridBlockThreads, 0, nullptr, random_fill_kernel<T>)(static_cast<T*>(dst), numel,
                                                                                          spec, blocks);
  });
  FRUGAL_CUDA_CHECK_LAUNCH();
}

}  // namespace frugal::FRUGAL_CUDA_NAMESPACE
