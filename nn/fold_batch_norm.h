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
// weights. BatchNorm's own pass computes (v - mean) * scale + shift; the folded form rounds
// differently, and where |mean| is much larger than the spread of v it loses precision to
// cancellation in v * s + t: close to BatchNorm's result relative to |v * s|, not bit for bit.
// s and t are made at every call (two values per channel), so a change to the weights or the
// statistics is seen at once.
// It applies only where nothing else could notice the difference, and where it pays:
// - BatchNorm in eval mode with running statistics, its parameters of the convolution's dtype;
// - autograd off (no graph: folded weights would give the convolution's weight gradient the wrong
//   history) and not inside a checkpoint's first run, whose recomputation, with autograd on, must
//   compute the same values (nn/checkpoint.h);
// - no autocast (its casts are per op), and no module call observer (each observer sees the
//   convolution and the BatchNorm as separate calls);
// - on the CPU in f32, where the epilogue runs inside the convolution's own passes; elsewhere it
//   would be three passes after the convolution in place of BatchNorm's one.
// Not here: training (BatchNorm then needs the batch's statistics, known only after the
// convolution), folding into other layers.
#pragma once

#include "kernels/conv.h"
#include "nn/layers.h"

namespace frugal::nn {

// Whether conv followed by norm may run as one folded convolution now, on x (the conditions of the Note).
bool folds_batch_norm(const Conv2d& conv, const BatchNorm2d& norm, const Tensor& x);

// activation(norm(conv(x))) as one convolution; folds_batch_norm(conv, norm, x) must hold (ValueError if not).
Tensor conv_batch_norm_folded(const Conv2d& conv, const BatchNorm2d& norm, const Tensor& x,
                              ConvActivation activation = ConvActivation::none);

}  // namespace frugal::nn
