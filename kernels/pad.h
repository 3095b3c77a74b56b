// Padding and cropping of images: the last two dims (H, W) of a tensor of rank >= 2, any dtype (u8
// images too), any device. Composed from views (Tensor::narrow) and core's fill_/copy_, which have
// CPU and CUDA kernels, so these need no kernel of their own. Each backward is the other op: the
// gradient of a pad is the crop of the gradient back to the input, and the gradient of a crop is
// the gradient padded back with zeros.
// Not here: reflect/replicate padding, padding of other dims, random crops (data/ draws the offsets).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace frugal {

// Rows added above and below, columns added left and right; a negative amount crops that many.
struct Padding2d {
  std::int64_t top = 0, bottom = 0, left = 0, right = 0;
};

// A new tensor: x with `amounts` rows and columns of `value` around it (cropped where negative).
// ShapeError when the result would have fewer than one row or column, or when the crops on one axis
// take more than the image has.
Tensor pad2d(const Tensor& x, Padding2d amounts, double value = 0.0);
// The gradient of pad2d with respect to x: pad2d(grad_output, negated amounts), a crop of the
// padding away (and zeros where the forward cropped).
Tensor pad2d_backward(const Tensor& grad_output, Padding2d amounts);

// A contiguous copy of the height x width window whose top-left corner is (top, left). A copy on
// purpose: a view would keep the whole batch's storage alive for as long as the crop lives (a
// 224 x 224 crop of a 512 x 512 batch would hold five times its own memory). Where a view is wanted,
// take it: x.narrow(-2, top, height).narrow(-1, left, width). IndexError for a window outside the image.
Tensor crop2d(const Tensor& x, std::int64_t top, std::int64_t left, std::int64_t height, std::int64_t width);
// The gradient of crop2d with respect to x: grad_output placed at (top, left) in zeros of input_shape.
Tensor crop2d_backward(const Tensor& grad_output, const Shape& input_shape, std::int64_t top, std::int64_t left);

}  // namespace frugal
