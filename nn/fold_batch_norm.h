// Inference with BatchNorm folded into the convolution before it: one convolution whose outputs are
// scaled and shifted per channel and clamped in the same pass, in place of a convolution, a
// BatchNorm pass and (ReLU6 aside) the BatchNorm's output buffer. What MobileNetV2's
// Conv2dNormActivation and its blocks' projections run when evaluated without autograd.
//
// Note [BatchNorm folded into the convolution]
// In eval mode BatchNorm is a fixed map per channel: (v - mean) / sqrt(var + eps) * gamma + beta
// = v * s + t, with s = gamma / sqrt(var + eps) and t = beta - mean * s. Applied to a convolution's
// output v = W * x + b it is the convolution's sum scaled by s per output channel, plus the bias
// b * s + t: conv2d's epilogue (kernels/conv.h), which applies the scale, the bias and the activation
// to each 1x1 GEMM's result while it is in cache, and takes the scale into a depthwise filter's
// weights. The result is the same up to f32 rounding (computed as v * s + t, as BatchNorm's eval pass
// does, but s and t rounded to the parameters' dtype), not bit for bit. s and t are made at every call
// (two values per channel), so a change to the weights or statistics is seen at once.
// It applies only where nothing else could notice the difference: BatchNorm in eval mode with
// running statistics, autograd off (no graph: folded weights would give the convolution's weight
// gradient the wrong shape of history), no autocast (its casts are per op), and no module call
// observer in force (each observer sees the convolution and the BatchNorm as separate calls).
// Not here: training (BatchNorm then needs the batch's statistics, known only after the
// convolution), folding into other layers.
#pragma once

#include "kernels/conv.h"
#include "nn/layers.h"

namespace frugal::nn {

// Whether conv followed by norm may run as one folded convolution now (the conditions of the Note).
bool folds_batch_norm(const BatchNorm2d& norm);

// activation(norm(conv(x))) as one convolution; folds_batch_norm(norm) must hold (ValueError if not).
Tensor conv_batch_norm_folded(const Conv2d& conv, const BatchNorm2d& norm, const Tensor& x,
                              ConvActivation activation = ConvActivation::none);

}  // namespace frugal::nn
