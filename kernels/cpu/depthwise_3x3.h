// The CPU's fast depthwise convolution for the shape MobileNetV2 uses: f32, 3x3 kernel, padding 1,
// dilation 1, stride 1 or 2 (the same along H and W). The forward and the weight gradient take any
// channel multiplier (a 1-channel image's stem convolution is depthwise with multiplier C_out), the
// input gradient multiplier 1. kernels/cpu/conv.cpp sends those shapes here and every other one to its
// reference loops.
// Not here: other shapes, other dtypes, the GPU (kernels/cuda/conv.cu).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/conv_ops.h"

namespace frugal::cpu {

// Whether the fast kernels below take this dtype and geometry (the input gradient: with multiplier 1).
bool depthwise_3x3_applies(DType dtype, const ConvGeometry& g);

// The operands of kernels/conv_backends.h's depthwise kernels, as floats.
void depthwise_3x3_forward(const ConvGeometry& g, std::int64_t batch, std::int64_t multiplier, const float* x,
                           const float* weight, const float* bias, float* y, bool relu6);
void depthwise_3x3_backward_input(const ConvGeometry& g, std::int64_t batch, const float* grad_y, const float* weight,
                                  float* grad_x);  // multiplier 1
void depthwise_3x3_backward_weight(const ConvGeometry& g, std::int64_t batch, std::int64_t multiplier,
                                   const float* grad_y, const float* x, float* grad_weight);

}  // namespace frugal::cpu
