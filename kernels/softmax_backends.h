// The fused softmax kernels each backend implements under one name: cpu::, cuda:: and
// cuda_emulated::. Every tensor is row-major [rows, cols] with the softmax dim last (cols > 0);
// kernels/softmax.cpp moves the dim there. `log` picks log-softmax.
//   softmax_rows            y = softmax(x) or log_softmax(x), row by row
//   softmax_backward_rows   dx from the upstream gradient g and the forward's output y
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/softmax_ops.h"

namespace frugal {

#define FRUGAL_SOFTMAX_KERNELS                                                                                \
  void softmax_rows(DType dtype, bool log, const void* x, void* y, std::int64_t rows, std::int64_t cols);    \
  void softmax_backward_rows(DType dtype, bool log, const void* grad, const void* y, void* dx, std::int64_t rows, \
                             std::int64_t cols);

namespace cpu { FRUGAL_SOFTMAX_KERNELS }
namespace cuda { FRUGAL_SOFTMAX_KERNELS }
namespace cuda_emulated { FRUGAL_SOFTMAX_KERNELS }

#undef FRUGAL_SOFTMAX_KERNELS

}  // namespace frugal
