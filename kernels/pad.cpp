// Padding and cropping (see pad.h): narrow views of the input and the output, and core's
// fill_/copy_ between them.
#include "kernels/pad.h"

#include <algorithm>

namespace frugal {

namespace {

void check_image(const Tensor& x, const char* op) {
  FRUGAL_CHECK_VALUE(x.defined(), op, ": the input is undefined");
  FRUGAL_CHECK_SHAPE(x.dim() >= 2, op, ": needs at least 2 dims (H, W), got shape ", shape_str(x.shape()));
}

// Along one axis: the input positions [from, from + length) that survive the crops, and where they
// land in the output (`to`).
struct Kept {
  std::int64_t from, to, length;
};

Kept kept(const Tensor& x, int dim, std::int64_t before, std::int64_t after, const char* op) {
  const std::int64_t size = x.size(dim);
  const char* what = dim == -2 ? "rows" : "columns";
  const std::int64_t cut_before = std::max<std::int64_t>(-before, 0), cut_after = std::max<std::int64_t>(-after, 0);
  FRUGAL_CHECK_SHAPE(cut_before + cut_after <= size, op, ": cropping ", cut_before, " + ", cut_after, " ", what,
                     " takes more than the ", size, " of shape ", shape_str(x.shape()));
  FRUGAL_CHECK_SHAPE(size + before + after >= 1, op, ": padding (", before, ", ", after, ") leaves ", size + before + after,
                     " ", what, " of shape ", shape_str(x.shape()));
  return {cut_before, std::max<std::int64_t>(before, 0), size - cut_before - cut_after};
}

Tensor pad(const Tensor& x, Padding2d a, double value, const char* op) {
  check_image(x, op);
  const Kept rows = kept(x, -2, a.top, a.bottom, op), cols = kept(x, -1, a.left, a.right, op);
  Shape shape = x.shape();
  shape.end()[-2] += a.top + a.bottom;
  shape.end()[-1] += a.left + a.right;
  Tensor out = empty(shape, {.dtype = x.dtype(), .device = x.device()});
  // A pure crop is all copy. Otherwise the fill also writes the kept window, which the copy then
  // overwrites: one extra pass over the output buys a composition of two existing kernels.
  if (a.top > 0 || a.bottom > 0 || a.left > 0 || a.right > 0) out.fill_(value);
  if (rows.length > 0 && cols.length > 0)
    out.narrow(-2, rows.to, rows.length)
        .narrow(-1, cols.to, cols.length)
        .copy_(x.narrow(-2, rows.from, rows.length).narrow(-1, cols.from, cols.length));
  return out;
}

void check_window(const Shape& image, std::int64_t top, std::int64_t left, std::int64_t height, std::int64_t width,
                  const char* op) {
  FRUGAL_CHECK_VALUE(height >= 1 && width >= 1, op, ": the crop must be at least 1 x 1, got ", height, " x ", width);
  FRUGAL_CHECK_INDEX(top >= 0 && left >= 0 && top + height <= image.end()[-2] && left + width <= image.end()[-1], op,
                     ": the ", height, " x ", width, " window at (", top, ", ", left, ") is outside the image of shape ",
                     shape_str(image));
}

}  // namespace

Tensor pad2d(const Tensor& x, Padding2d amounts, double value) { return pad(x, amounts, value, "pad2d"); }

Tensor pad2d_backward(const Tensor& grad_output, Padding2d a) {
  return pad(grad_output, {-a.top, -a.bottom, -a.left, -a.right}, 0.0, "pad2d_backward");
}

Tensor crop2d(const Tensor& x, std::int64_t top, std::int64_t left, std::int64_t height, std::int64_t width) {
  check_image(x, "crop2d");
  check_window(x.shape(), top, left, height, width, "crop2d");
  return x.narrow(-2, top, height).narrow(-1, left, width).clone();  // clone: never the view, even when contiguous
}

Tensor crop2d_backward(const Tensor& grad_output, const Shape& input_shape, std::int64_t top, std::int64_t left) {
  const char* op = "crop2d_backward";
  check_image(grad_output, op);
  const Shape& g = grad_output.shape();
  FRUGAL_CHECK_SHAPE(input_shape.size() == g.size() && std::equal(g.begin(), g.end() - 2, input_shape.begin()), op,
                     ": grad_output of shape ", shape_str(g), " is not a crop of input shape ", shape_str(input_shape));
  const std::int64_t height = g.end()[-2], width = g.end()[-1];
  check_window(input_shape, top, left, height, width, op);
  return pad(grad_output, {top, input_shape.end()[-2] - top - height, left, input_shape.end()[-1] - left - width}, 0.0, op);
}

}  // namespace frugal
