// The pooling kernels each backend implements under one name: cpu::, cuda:: and cuda_emulated::.
// Shapes (glossary in kernels/pool_ops.h): the forward reads x, [planes, H, W] through `x_layout`
// (any strides), and writes `out` (and, for max pooling, `indices`, i64) contiguous
// [planes, OH, OW]. The backward reads `grad_output` (and `indices`) contiguous [planes, OH, OW] and
// writes `grad_input` contiguous [planes, H, W]; `indices` is null for the average kinds.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/pool_ops.h"

namespace frugal {

#define FRUGAL_POOL_KERNELS                                                                                       \
  void pool2d(PoolKind kind, DType dtype, const void* x, const ImageLayout& x_layout, const PoolGeometry& geometry, \
              void* out, std::int64_t* indices);                                                                  \
  void pool2d_backward(PoolKind kind, DType dtype, const void* grad_output, const std::int64_t* indices,         \
                       const PoolGeometry& geometry, void* grad_input);

namespace cpu { FRUGAL_POOL_KERNELS }
namespace cuda { FRUGAL_POOL_KERNELS }
namespace cuda_emulated { FRUGAL_POOL_KERNELS }

#undef FRUGAL_POOL_KERNELS

}  // namespace frugal
