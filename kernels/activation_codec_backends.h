// The activation codec kernels each backend implements under one name: cpu::, cuda:: and
// cuda_emulated::. No CUDA types here. Operands are contiguous; kernels/activation_codec.cpp calls
// none of them on an empty tensor, except channel_ranges on channels of no elements (N or S is 0),
// which it gives low 0 and step 0.
//   pack_mask        mask[b] = the bits of low < x < high for elements 8b .. 8b+7 (mask: ceil(numel / 8) bytes)
//   apply_mask       out = grad where the mask's bit is set, else 0
//   channel_ranges   low[c], step[c] of each channel of x [N, C, S] (finish_channel marks the uncodable)
//   encode_channels  codes = encode_value(x, low[c], step[c]), u8, x's [N, C, S]
//   decode_channels  out = decode_value(codes, low[c], step[c]) in dtype
// x, grad and out are of the floating `dtype`; low and step are f32 [C].
// The arithmetic is kernels/activation_codec_ops.h, the same in every backend.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/activation_codec_ops.h"
#include "kernels/batch_norm_ops.h"  // BatchNormShape: the [N, C, S] view, shared with batch norm

namespace frugal {

#define FRUGAL_ACTIVATION_CODEC_KERNELS                                                                              \
  void pack_mask(DType dtype, const void* x, std::int64_t numel, double low, double high, std::uint8_t* mask);       \
  void apply_mask(DType dtype, const void* grad, const std::uint8_t* mask, std::int64_t numel, void* out);          \
  void channel_ranges(DType dtype, const void* x, const BatchNormShape& shape, float* low, float* step);              \
  void encode_channels(DType dtype, const void* x, const BatchNormShape& shape, const float* low, const float* step, \
                       std::uint8_t* codes);                                                                          \
  void decode_channels(DType dtype, const std::uint8_t* codes, const BatchNormShape& shape, const float* low,       \
                       const float* step, void* out);

namespace cpu { FRUGAL_ACTIVATION_CODEC_KERNELS }
namespace cuda { FRUGAL_ACTIVATION_CODEC_KERNELS }
namespace cuda_emulated { FRUGAL_ACTIVATION_CODEC_KERNELS }

#undef FRUGAL_ACTIVATION_CODEC_KERNELS

}  // namespace frugal
