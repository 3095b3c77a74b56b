// The data-moving kernels that a tensor needs to exist: strided copy with dtype conversion, fill,
// random fill, and byte transfers between devices. Declared once per backend with the same names
// (cpu::, cuda::, and cuda_emulated:: for the emulator), and dispatched by device in core/copy.cpp. Everything else that computes is in
// kernels/. The cuda:: declarations use no CUDA types, so any .cpp can include this header.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/device.h"
#include "core/dtype.h"
#include "core/random_spec.h"
#include "core/strided.h"

namespace frugal {

class Tensor;

// Dispatchers: the tensors must be on one device; copy_elements needs equal shapes.
void copy_elements(const Tensor& dst, const Tensor& src);
void fill_elements(const Tensor& dst, double value);
void random_fill(const Tensor& dst, const RandomSpec& spec);  // dst contiguous
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes);

// Each backend implements the same three kernels under the same names.
#define FRUGAL_CORE_KERNELS                                                                               \
  void copy_strided(void* dst, DType dst_dtype, const StridedLayout& dst_layout, const void* src, DType src_dtype, \
                    const StridedLayout& src_layout);                                                     \
  void fill_strided(void* dst, DType dtype, const StridedLayout& layout, double value);                  \
  void random_fill(void* dst, DType dtype, std::int64_t numel, const RandomSpec& spec);

namespace cpu { FRUGAL_CORE_KERNELS }            // core/cpu/kernels.cpp
namespace cuda { FRUGAL_CORE_KERNELS }           // core/cuda/kernels.cu built by nvcc
namespace cuda_emulated { FRUGAL_CORE_KERNELS }  // the same file built for the emulator (tests only)

#undef FRUGAL_CORE_KERNELS

}  // namespace frugal
