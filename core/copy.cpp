// Dispatch of core's data-moving kernels by device: the one `switch` per operation that picks
// the CPU or CUDA implementation. CUDA branches are compiled only when FRUGAL_WITH_CUDA.
#include "core/copy.h"

#include <cstring>

#include "core/dispatch.h"
#include "core/tensor.h"

#if FRUGAL_WITH_CUDA
#include "core/cuda/runtime.h"
#endif

namespace frugal {

void copy_elements(const Tensor& dst, const Tensor& src) {
  check_same_device(dst, src, "copy");
  check_same_shape(dst, src, "copy");
  if (dst.numel() == 0) return;
  switch (dst.device().type()) {
    case DeviceType::CPU:
      return cpu::copy_strided(dst.data_ptr(), dst.dtype(), dst.layout(), src.data_ptr(), src.dtype(), src.layout());
    case DeviceType::Meta:
      return;
    case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
      cuda::set_current_device(dst.device().index());
      return cuda::copy_strided(dst.data_ptr(), dst.dtype(), dst.layout(), src.data_ptr(), src.dtype(), src.layout());
#else
      throw_no_cuda("copy");
#endif
  }
}

void fill_elements(const Tensor& dst, double value) {
  if (dst.numel() == 0) return;
  switch (dst.device().type()) {
    case DeviceType::CPU:
      return cpu::fill_strided(dst.data_ptr(), dst.dtype(), dst.layout(), value);
    case DeviceType::Meta:
      return;
    case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
      cuda::set_current_device(dst.device().index());
      return cuda::fill_strided(dst.data_ptr(), dst.dtype(), dst.layout(), value);
#else
      throw_no_cuda("fill");
#endif
  }
}

void random_fill(const Tensor& dst, const RandomSpec& spec) {
  FRUGAL_CHECK(dst.is_contiguous(), "random_fill needs a contiguous destination");
  if (dst.numel() == 0) return;
  switch (dst.device().type()) {
    case DeviceType::CPU:
      return cpu::random_fill(dst.data_ptr(), dst.dtype(), dst.numel(), spec);
    case DeviceType::Meta:
      return;
    case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
      cuda::set_current_device(dst.device().index());
      return cuda::random_fill(dst.data_ptr(), dst.dtype(), dst.numel(), spec);
#else
      throw_no_cuda("random");
#endif
  }
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes) {
  if (bytes == 0 || dst_device.is_meta()) return;  // to meta: nothing to write
  if (src_device.is_meta()) throw_meta_has_no_data("copy");
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if FRUGAL_WITH_CUDA
  cuda::copy_bytes(dst, src, bytes);  // unified addressing: the runtime knows each pointer's device
#else
  throw_no_cuda("copy_bytes");
#endif
}

}  // namespace frugal
