// The elementwise kernels each backend implements under the same names: cpu:: (kernels/cpu/),
// cuda:: (kernels/cuda/elementwise.cu built by nvcc) and cuda_emulated:: (the same file built for
// the CUDA emulator, tests only). Raw pointers and layouts, no Tensor and no CUDA type, so any .cpp
// can include this. All operands share `dtype`, a floating one; layouts share their sizes.
#pragma once

#include "core/dtype.h"
#include "core/strided.h"
#include "kernels/elementwise_ops.h"

namespace frugal {

#define FRUGAL_ELEMENTWISE_KERNELS                                                                              \
  void unary(UnaryOp op, double a, double b, DType dtype, void* out, const StridedLayout& out_layout,           \
             const void* x, const StridedLayout& x_layout);                                                     \
  void binary(BinaryOp op, DType dtype, void* out, const StridedLayout& out_layout, const void* x,               \
              const StridedLayout& x_layout, const void* y, const StridedLayout& y_layout);                     \
  void where(DType dtype, void* out, const StridedLayout& out_layout, const bool* condition,                    \
             const StridedLayout& condition_layout, const void* x, const StridedLayout& x_layout, const void* y, \
             const StridedLayout& y_layout);

namespace cpu { FRUGAL_ELEMENTWISE_KERNELS }
namespace cuda { FRUGAL_ELEMENTWISE_KERNELS }
namespace cuda_emulated { FRUGAL_ELEMENTWISE_KERNELS }

#undef FRUGAL_ELEMENTWISE_KERNELS

}  // namespace frugal
