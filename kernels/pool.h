// 2-D pooling over the last two dims of an NCHW batch [N, C, H, W] or a single image [C, H, W],
// with PyTorch's semantics (torch.nn.functional.max_pool2d, avg_pool2d, adaptive_avg_pool2d): the
// same output sizes, windows, divisors and indices. Any input strides; outputs are contiguous.
// Floating dtypes (f16/bf16 compute in float and round once). Each backward sits beside its forward
// and returns the gradient with respect to the input, contiguous, of `input_shape`.
// Kernels: kernels/cpu/pool.cpp, kernels/cuda/pool.cu (the backward as a deterministic gather).
// Not here: autograd nodes (nn/), max unpooling, 1-D/3-D pooling, adaptive max pooling.
#pragma once

#include <array>
#include <cstdint>

#include "core/tensor.h"

namespace frugal {

// Each pair is (height, width).
struct Pool2dOptions {
  std::array<std::int64_t, 2> kernel{};        // each >= 1
  std::array<std::int64_t, 2> stride{};        // {0, 0}, the default, means the kernel (PyTorch's stride=None)
  std::array<std::int64_t, 2> padding{0, 0};   // each <= kernel / 2; max: -inf, avg: zeros
  std::array<std::int64_t, 2> dilation{1, 1};  // max pooling only (avg pooling has none, as in PyTorch)
  bool ceil_mode = false;                      // keep a last partial window (never one starting in the right padding)
  bool count_include_pad = true;               // avg: the padding inside a window counts in its divisor
  std::int64_t divisor_override = 0;           // avg: when > 0, divide every sum by this instead
};

struct MaxPoolResult {
  Tensor output;   // the input's dtype
  Tensor indices;  // i64: the flat position y * W + x, inside its input plane, of each output's element
};

// Padding acts as -inf; ties keep the first element of the window, a NaN wins (the last NaN's index).
MaxPoolResult max_pool2d(const Tensor& x, const Pool2dOptions& options);
// Adds each output's gradient to the input element it picked (overlapping windows add up).
// `indices` must come from max_pool2d with the same options; unlike PyTorch's signature this one takes
// the options too, so that the GPU can gather per input element (kernels/cuda/pool.cu).
Tensor max_pool2d_backward(const Tensor& grad_output, const Tensor& indices, const Shape& input_shape,
                           const Pool2dOptions& options);

Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& options);
Tensor avg_pool2d_backward(const Tensor& grad_output, const Shape& input_shape, const Pool2dOptions& options);

// Output (i, j) averages rows [floor(i H / OH), ceil((i + 1) H / OH)) and the like columns, so any
// output size works, larger than the input too; {1, 1} is the global average pool.
Tensor adaptive_avg_pool2d(const Tensor& x, std::array<std::int64_t, 2> output_size);
// The output size is read from grad_output's last two dims.
Tensor adaptive_avg_pool2d_backward(const Tensor& grad_output, const Shape& input_shape);

}  // namespace frugal
