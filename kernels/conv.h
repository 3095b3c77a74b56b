// 2-D convolution, NCHW, as torch.nn.functional.conv2d: any stride, padding, dilation and groups
// (depthwise included), an optional bias, and the two backward passes (data and weight).
//
// Two implementations per CUDA device, selectable at run time so they can be compared:
//   native  frugal's own: a direct kernel for depthwise convolutions (each output channel reads one
//           input channel), and im2col + GEMM for everything else, one sample at a time so the
//           im2col buffer is one sample's worth however large the batch (1x1 stride-1 convolutions
//           need no im2col at all: the input already is the GEMM operand);
//   cudnn   cuDNN v9, with the fastest algorithm whose workspace fits under the workspace limit.
// The CPU has the native implementation only. Every scratch buffer comes from frugal's allocator
// tagged `workspace`, and last_conv2d_decision() tells which path ran and how much it borrowed.
//
// Shapes: x [N, C_in, H, W], weight [C_out, C_in / groups, KH, KW], bias [C_out] or undefined,
// y [N, C_out, OH, OW] with OH = (H + 2 pad - dilation (KH - 1) - 1) / stride + 1 (likewise OW).
// Operands share one floating dtype and one device; f16/bf16 accumulate in float.
// Not here: autograd (nn/ wraps these), other layouts than NCHW, transposed convolution.
#pragma once

#include <array>
#include <cstddef>
#include <string>

#include "core/tensor.h"

namespace frugal {

struct Conv2dOptions {
  std::array<std::int64_t, 2> stride{1, 1};    // {vertical, horizontal}
  std::array<std::int64_t, 2> padding{0, 0};   // zeros on both sides
  std::array<std::int64_t, 2> dilation{1, 1};  // spacing between kernel taps
  std::int64_t groups = 1;                     // C_in and C_out both divisible by it
};

enum class ConvImpl : std::uint8_t { native, cudnn };
std::string_view conv_impl_name(ConvImpl impl);
ConvImpl parse_conv_impl(std::string_view name);  // ValueError on anything else

// The implementation used for `device`'s convolutions: cudnn on CUDA by default (a library path is
// the default until a hand-written kernel has been measured to beat it on a GPU), native on the
// CPU. The environment variable FRUGAL_CONV_IMPL=native|cudnn sets the CUDA choice for a whole run.
// Setting cudnn for the CPU is a ValueError.
void set_conv_impl(DeviceType device, ConvImpl impl);
ConvImpl conv_impl(DeviceType device);

// The most workspace (bytes) cuDNN may use for one call; algorithms that need more are skipped.
// Unlimited by default, as in PyTorch, or FRUGAL_CONV_WORKSPACE_MB for a whole run; 0 forces the
// algorithms that need none (usually slower).
void set_conv_workspace_limit(std::size_t bytes);
std::size_t conv_workspace_limit();

// The output shape of conv2d, and ShapeError/ValueError for any invalid combination (checked
// before anything is allocated).
Shape conv2d_output_shape(const Shape& x, const Shape& weight, const Conv2dOptions& options);

// What the forward applies to each output channel c after its sum v: v * scale[c] (scale [C_out],
// when defined), + bias[c], then the activation: ReLU6 is min(max(v, 0), 6). On the CPU in f32 a
// 1x1 convolution applies it to each GEMM's result while it is in cache (Note [The pointwise
// forward's epilogue] in conv.cpp) and a depthwise one takes the scale into its few weights;
// elsewhere each part is a pass of its own after the convolution. Inference with BatchNorm folded
// into the convolution runs this (nn/fold_batch_norm.h).
enum class ConvActivation : std::uint8_t { none, relu6 };
struct ConvEpilogue {
  Tensor scale;
  ConvActivation activation = ConvActivation::none;
};

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Conv2dOptions& options = {},
              const ConvEpilogue& epilogue = {});

// How many samples a 1x1 convolution (stride 1, one group) puts in one GEMM for maps of `plane` pixels
// (Note [Pointwise convolutions over the batch] in conv.cpp), when the batch has that many: a caller
// that splits a batch into chunks of a multiple of it gets the same GEMMs, so the same bits, as the
// whole batch would.
std::int64_t pointwise_samples_per_gemm(std::int64_t plane);
// Whether a 1x1 convolution of `dtype` on `device` gives the same bits whichever samples its GEMMs
// cover: on the CPU in f32 with the library GEMM (direct_gemm: each output element is one chain of
// multiply-adds over the input channels, whatever columns a call computes; Note [Planes of whole
// vectors, sample by sample] in conv.cpp). Elsewhere a caller that splits the batch keeps to multiples
// of pointwise_samples_per_gemm.
bool pointwise_bits_independent_of_samples(Device device, DType dtype);

// d loss / d x, given d loss / d y and the weight.
Tensor conv2d_backward_input(const Tensor& grad_output, const Tensor& weight, const Shape& input_shape,
                             const Conv2dOptions& options = {});
// d loss / d weight, given d loss / d y and the input.
Tensor conv2d_backward_weight(const Tensor& grad_output, const Tensor& x, const Shape& weight_shape,
                              const Conv2dOptions& options = {});
// d loss / d bias: grad_output summed over N, OH and OW.
Tensor conv2d_backward_bias(const Tensor& grad_output);

// What the last conv2d* call on this thread did: the path taken and the scratch it borrowed.
struct ConvDecision {
  ConvImpl impl = ConvImpl::native;
  std::string algorithm;             // "depthwise", "im2col+gemm", "1x1 gemm", or cuDNN's algorithm name
  std::size_t workspace_bytes = 0;   // scratch borrowed from the allocator (tag `workspace`)
};
const ConvDecision& last_conv2d_decision();

}  // namespace frugal
