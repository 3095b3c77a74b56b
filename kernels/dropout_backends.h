// The dropout kernel each backend implements under one name: cpu::, cuda:: and cuda_emulated::.
// `in` and `out` are contiguous, numel elements of a floating dtype; out may not alias in.
//   dropout_apply   out = in * mask / (1 - p), the mask drawn from spec.keep (kernels/dropout_ops.h)
// The forward applies it to x, the backward to the gradient: the same draw, the same mask.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/dropout_ops.h"

namespace frugal {

#define FRUGAL_DROPOUT_KERNELS \
  void dropout_apply(DType dtype, const void* in, void* out, std::int64_t numel, const DropoutSpec& spec);

namespace cpu { FRUGAL_DROPOUT_KERNELS }
namespace cuda { FRUGAL_DROPOUT_KERNELS }
namespace cuda_emulated { FRUGAL_DROPOUT_KERNELS }

#undef FRUGAL_DROPOUT_KERNELS

}  // namespace frugal
