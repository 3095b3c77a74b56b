// Activation codecs: ways to keep a tensor saved for backward in fewer bytes, and to get back what
// the backward needs. Two codecs:
//   - 1-bit masks (0.125 bytes per element): where an activation's gradient passes. ReLU6's backward
//     needs only [0 < y < 6], so it can save 1 bit per element instead of y (4 bytes in f32).
//   - 8-bit codes per channel (1 byte per element, plus 8 bytes per channel): a lossy copy of a
//     saved tensor, each channel's [min, max] cut into 255 equal steps, rounded to nearest and
//     deterministic (no stochastic rounding, unlike ActNN), so the same input codes the same way on
//     any thread count and on the CPU and the GPU.
// Kernels: kernels/cpu/activation_codec.cpp, kernels/cuda/activation_codec.cu; their arithmetic is
// kernels/activation_codec_ops.h. On the meta device the ops allocate what the CPU or a GPU would
// (the outputs, and a contiguous copy of a strided input) and compute nothing.
// Not here: choosing what the autograd graph saves, or when (nn/).
#pragma once

#include "core/tensor.h"

namespace frugal {

// 1-bit masks. Bit i of the mask is bit (i % 8) of byte i / 8 (least significant first), for x's
// elements in row-major order; the result is a u8 tensor of shape [ceil(numel / 8)], the last byte's
// unused bits 0. bit = low < x < high (strict on both sides: ReLU6's gradient rule is 0 at exactly 0
// and 6), compared in double, which holds every floating dtype's values exactly; a NaN gives 0.
// x floating (DTypeError otherwise); ValueError for a NaN bound. A strided x is read through a
// contiguous copy.
Tensor pack_mask_between(const Tensor& x, double low, double high);
// grad where the bit is set, 0 where not (a select: a non-finite grad under a 0 bit gives 0); grad's
// shape and dtype (contiguous). ValueError if the mask's size does not match ceil(grad.numel() / 8)
// or it is not u8; DTypeError for a grad that is not floating; DeviceError if they are on different devices.
Tensor apply_packed_mask(const Tensor& grad, const Tensor& mask);

// 8-bit codes per channel: for x [N, C, *] (or [N, C]) floating, per channel c over every other dim:
// low_c = min, step_c = (max - min) / 255 (step 0 when max == min: every code 0), code =
// round-to-nearest((x - low_c) / step_c), halves up, clamped to [0, 255], computed in float (double
// for f64), so every |x - decoded| <= step_c * (1/2 + 2^-14) before the decoded value is rounded to
// its dtype (kernels/activation_codec_ops.h). low and step are f32: for f64 input low_c is the min
// rounded down to f32 (so no value lies below it), step_c from it.
// A channel of no elements (N = 0) gets low 0, step 0.
// Non-finite input: ValueError naming the first channel holding a NaN or an infinity; for f64 input,
// ValueError too for a channel with values beyond f32's range. On CUDA the check reads the steps
// back to the host ([C] floats), which waits for the range kernel.
// ShapeError for x of fewer than 2 dims, DTypeError for x not floating. A strided x is read through
// a contiguous copy.
struct ChannelCodes {
  Tensor codes;      // u8, x's shape, contiguous
  Tensor low, step;  // f32 [C]
  DType dtype;       // x's dtype, which decode returns
};
ChannelCodes encode_per_channel_u8(const Tensor& x);
// low_c + code * step_c, in codes.dtype (computed in double, rounded once), contiguous, on the codes'
// device. ValueError/ShapeError/DTypeError for parts that do not fit together as encode made them.
Tensor decode_per_channel_u8(const ChannelCodes& codes);

}  // namespace frugal
