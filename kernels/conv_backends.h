// The native convolution's kernels, which each backend implements under one name: cpu::, cuda::
// and cuda_emulated:: (tests). All operands are contiguous; the GEMMs between them go through
// kernels/gemm.h. Plus cuDNN on the GPU, declared apart because it cannot run in the emulator.
// No CUDA types here.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/conv.h"
#include "kernels/conv_ops.h"

namespace frugal {

// im2col / col2im work on one group of one sample: x [g.channels, H, W], col [g.channels * KH * KW, OH * OW].
// col2im overwrites x with the gathered sums. The depthwise kernels take the whole batch:
// x [batch, g.channels, H, W], weight [C_out, 1, KH, KW], y [batch, C_out, OH, OW] with
// C_out = multiplier * g.channels; bias [C_out] or null; relu6: each output (bias included) clamped to
// [0, 6] as it is written (conv2d's epilogue). The backward of the weight overwrites it.
#define FRUGAL_CONV_KERNELS                                                                                       \
  void im2col(DType dtype, const ConvGeometry& g, const void* x, void* col);                                   \
  void col2im(DType dtype, const ConvGeometry& g, const void* col, void* x);                                   \
  void depthwise_forward(DType dtype, const ConvGeometry& g, std::int64_t batch, std::int64_t multiplier,        \
                         const void* x, const void* weight, const void* bias, void* y, bool relu6 = false);     \
  void depthwise_backward_input(DType dtype, const ConvGeometry& g, std::int64_t batch, std::int64_t multiplier, \
                                const void* grad_y, const void* weight, void* grad_x);                          \
  void depthwise_backward_weight(DType dtype, const ConvGeometry& g, std::int64_t batch, std::int64_t multiplier, \
                                 const void* grad_y, const void* x, void* grad_weight);

namespace cpu {
FRUGAL_CONV_KERNELS
// The CPU's depthwise kernels above take a fast path for f32 3x3 convolutions
// (kernels/cpu/depthwise_3x3.h) and these readable loops for everything else; the loops are the ones
// that give the CUDA kernels' bits, and tests compare both paths against them.
void depthwise_forward_reference(DType dtype, const ConvGeometry& g, std::int64_t batch, std::int64_t multiplier,
                                 const void* x, const void* weight, const void* bias, void* y, bool relu6 = false);
void depthwise_backward_input_reference(DType dtype, const ConvGeometry& g, std::int64_t batch, std::int64_t multiplier,
                                        const void* grad_y, const void* weight, void* grad_x);
void depthwise_backward_weight_reference(DType dtype, const ConvGeometry& g, std::int64_t batch,
                                         std::int64_t multiplier, const void* grad_y, const void* x, void* grad_weight);
}  // namespace cpu
namespace cuda { FRUGAL_CONV_KERNELS }
namespace cuda_emulated { FRUGAL_CONV_KERNELS }

#undef FRUGAL_CONV_KERNELS

namespace cuda {
// cuDNN (kernels/cuda/cudnn_conv.cpp): contiguous NCHW tensors on the current device; bias is added
// by the caller. Each picks the fastest algorithm (cuDNN's heuristic order) whose workspace fits
// `workspace_limit`, borrows that workspace from frugal's allocator, and says what it chose.
ConvDecision cudnn_conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& y, const Conv2dOptions& options,
                                  std::size_t workspace_limit);
ConvDecision cudnn_conv2d_backward_input(const Tensor& grad_y, const Tensor& weight, const Tensor& grad_x,
                                         const Conv2dOptions& options, std::size_t workspace_limit);
ConvDecision cudnn_conv2d_backward_weight(const Tensor& grad_y, const Tensor& x, const Tensor& grad_weight,
                                          const Conv2dOptions& options, std::size_t workspace_limit);
}  // namespace cuda

}  // namespace frugal
