// The reduction kernel each backend implements under one name: cpu::, cuda:: and cuda_emulated::.
// The input is viewed as [outer, inner]: its layout walks the kept dims first and the reduced dims
// last, so element (o, r) sits at strided_offset(x_layout, o * inner + r). `out` is contiguous with
// `outer` elements; `indices` (i64, for max/argmax) too, or null.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/strided.h"
#include "kernels/reduce_ops.h"

namespace frugal {

#define FRUGAL_REDUCE_KERNELS                                                                                   \
  void reduce(Reduction op, DType dtype, const void* x, const StridedLayout& x_layout, std::int64_t outer,     \
              std::int64_t inner, std::int64_t correction, void* out, std::int64_t* indices);

namespace cpu { FRUGAL_REDUCE_KERNELS }
namespace cuda { FRUGAL_REDUCE_KERNELS }
namespace cuda_emulated { FRUGAL_REDUCE_KERNELS }

#undef FRUGAL_REDUCE_KERNELS

}  // namespace frugal
