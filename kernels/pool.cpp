// Pooling (see pool.h): PyTorch's checks, the geometry the kernels read (kernels/pool_ops.h), and
// the one switch per direction that picks the device's kernel.
#include "kernels/pool.h"

#include <string>

#include "core/dispatch.h"
#include "kernels/pool_backends.h"

namespace frugal {

namespace {

using Pair = std::array<std::int64_t, 2>;

// [N, C, H, W] or [C, H, W] with C, H, W >= 1 (N may be 0: an empty batch).
void check_image_shape(const Shape& shape, const char* op) {
  FRUGAL_CHECK_SHAPE(shape.size() == 3 || shape.size() == 4, op, ": expects an input of shape [N, C, H, W] or [C, H, W], got ",
                     shape_str(shape));
  for (std::size_t d = shape.size() - 3; d < shape.size(); ++d)
    FRUGAL_CHECK_SHAPE(shape[d] >= 1, op, ": channels, height and width must be >= 1, got input shape ", shape_str(shape));
}

void check_floating(const Tensor& t, const char* what, const char* op) {
  FRUGAL_CHECK_VALUE(t.defined(), op, ": ", what, " is undefined");
  FRUGAL_CHECK_DTYPE(is_floating(t.dtype()), op, ": ", what, " needs a floating dtype, got ", t.dtype(), " (shape ",
                     shape_str(t.shape()), ")");
}

PoolGeometry planes_of(const Shape& input_shape) {
  PoolGeometry g;
  g.planes = shape_numel(input_shape) / (input_shape.end()[-2] * input_shape.end()[-1]);
  return g;
}

// Checks the options as PyTorch does and returns the windows' geometry over an input of `input_shape`.
PoolGeometry window_geometry(PoolKind kind, const Shape& input_shape, const Pool2dOptions& o, const char* op) {
  check_image_shape(input_shape, op);
  const Pair stride = o.stride == Pair{0, 0} ? o.kernel : o.stride;
  const std::string context = detail::str(" (kernel ", shape_str(o.kernel), ", stride ", shape_str(stride), ", padding ",
                                          shape_str(o.padding), ", dilation ", shape_str(o.dilation), ", input shape ",
                                          shape_str(input_shape), ")");
  for (int d = 0; d < 2; ++d) {
    FRUGAL_CHECK_VALUE(o.kernel[d] >= 1, op, ": kernel sizes must be >= 1", context);
    FRUGAL_CHECK_VALUE(stride[d] >= 1, op, ": strides must be >= 1 (or both 0, meaning the kernel)", context);
    FRUGAL_CHECK_VALUE(o.dilation[d] >= 1, op, ": dilations must be >= 1", context);
    FRUGAL_CHECK_VALUE(o.padding[d] >= 0 && o.padding[d] <= o.kernel[d] / 2, op,
                       ": padding must be between 0 and half the kernel size", context);
  }
  if (kind == PoolKind::avg) {
    FRUGAL_CHECK_VALUE(o.dilation == (Pair{1, 1}), op, ": average pooling has no dilation", context);
    FRUGAL_CHECK_VALUE(o.divisor_override >= 0, op, ": divisor_override must be >= 0 (0: none), got ", o.divisor_override);
  }
  PoolGeometry g = planes_of(input_shape);
  PoolAxis* axes[2] = {&g.h, &g.w};
  for (int d = 0; d < 2; ++d) {
    const std::int64_t in = input_shape.end()[d - 2];
    *axes[d] = {.in = in,
                .out = pool_output_size(in, o.kernel[d], stride[d], o.padding[d], o.dilation[d], o.ceil_mode),
                .kernel = o.kernel[d],
                .stride = stride[d],
                .padding = o.padding[d],
                .dilation = o.dilation[d]};
  }
  FRUGAL_CHECK_SHAPE(g.h.out >= 1 && g.w.out >= 1, op, ": the output would be ", g.h.out, " x ", g.w.out,
                     "; the window does not fit", context);
  g.count_include_pad = o.count_include_pad;
  g.divisor_override = o.divisor_override;
  return g;
}

PoolGeometry adaptive_geometry(const Shape& input_shape, Pair output_size, const char* op) {
  check_image_shape(input_shape, op);
  FRUGAL_CHECK_VALUE(output_size[0] >= 1 && output_size[1] >= 1, op, ": the output size must be >= 1, got ",
                     shape_str(output_size), " (input shape ", shape_str(input_shape), ")");
  PoolGeometry g = planes_of(input_shape);
  g.h = {.in = input_shape.end()[-2], .out = output_size[0]};
  g.w = {.in = input_shape.end()[-1], .out = output_size[1]};
  return g;
}

Shape output_shape(Shape input_shape, const PoolGeometry& g) {
  input_shape.end()[-2] = g.h.out;
  input_shape.end()[-1] = g.w.out;
  return input_shape;
}

ImageLayout image_layout(const Tensor& x) {
  return {.channels = x.size(-3),
          .stride_n = x.dim() == 4 ? x.stride(0) : 0,  // [C, H, W]: one image, n is always 0
          .stride_c = x.stride(-3),
          .stride_h = x.stride(-2),
          .stride_w = x.stride(-1)};
}

// The forward kernel of x's device into `out` (and `indices`, max pooling only), both contiguous.
void forward(PoolKind kind, const Tensor& x, const PoolGeometry& g, const Tensor& out, const Tensor* indices,
             const char* op) {
  if (out.numel() == 0) return;  // an empty batch
  std::int64_t* index_data = indices ? indices->data<std::int64_t>() : nullptr;
  switch (x.device().type()) {
    case DeviceType::CPU:
      return cpu::pool2d(kind, x.dtype(), x.data_ptr(), image_layout(x), g, out.data_ptr(), index_data);
    case DeviceType::Meta: return;
    case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
      return cuda::pool2d(kind, x.dtype(), x.data_ptr(), image_layout(x), g, out.data_ptr(), index_data);
#else
      throw_no_cuda(op);
#endif
  }
  (void)op;
}

// The backward kernel of grad_output's device: grad_output (and indices) must be contiguous.
Tensor backward(PoolKind kind, const Tensor& grad_output, const Tensor* indices, const Shape& input_shape,
                const PoolGeometry& g, const char* op) {
  Tensor grad_input = empty(input_shape, {.dtype = grad_output.dtype(), .device = grad_output.device()});
  if (grad_input.numel() == 0) return grad_input;
  const std::int64_t* index_data = indices ? indices->data<std::int64_t>() : nullptr;
  switch (grad_output.device().type()) {
    case DeviceType::CPU:
      cpu::pool2d_backward(kind, grad_output.dtype(), grad_output.data_ptr(), index_data, g, grad_input.data_ptr());
      return grad_input;
    case DeviceType::Meta: return grad_input;
    case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
      cuda::pool2d_backward(kind, grad_output.dtype(), grad_output.data_ptr(), index_data, g, grad_input.data_ptr());
      return grad_input;
#else
      throw_no_cuda(op);
#endif
  }
  (void)op;
  return grad_input;
}

// grad_output checked against the output the forward made from `input_shape`; returned contiguous.
Tensor checked_grad(const Tensor& grad_output, const Shape& input_shape, const PoolGeometry& g, const char* op) {
  check_floating(grad_output, "grad_output", op);
  const Shape expected = output_shape(input_shape, g);
  FRUGAL_CHECK_SHAPE(grad_output.shape() == expected, op, ": grad_output has shape ", shape_str(grad_output.shape()),
                     " but the output for input shape ", shape_str(input_shape), " has shape ", shape_str(expected));
  return grad_output.contiguous();
}

}  // namespace

MaxPoolResult max_pool2d(const Tensor& x, const Pool2dOptions& options) {
  check_floating(x, "the input", "max_pool2d");
  const PoolGeometry g = window_geometry(PoolKind::max, x.shape(), options, "max_pool2d");
  const Shape shape = output_shape(x.shape(), g);
  MaxPoolResult r{empty(shape, {.dtype = x.dtype(), .device = x.device()}),
                  empty(shape, {.dtype = DType::i64, .device = x.device()})};
  forward(PoolKind::max, x, g, r.output, &r.indices, "max_pool2d");
  return r;
}

Tensor max_pool2d_backward(const Tensor& grad_output, const Tensor& indices, const Shape& input_shape,
                           const Pool2dOptions& options) {
  const char* op = "max_pool2d_backward";
  const PoolGeometry g = window_geometry(PoolKind::max, input_shape, options, op);
  const Tensor grad = checked_grad(grad_output, input_shape, g, op);
  FRUGAL_CHECK_VALUE(indices.defined(), op, ": the indices are undefined");
  FRUGAL_CHECK_DTYPE(indices.dtype() == DType::i64, op, ": indices must be i64, got ", indices.dtype());
  check_same_shape(grad_output, indices, op);
  check_same_device(grad_output, indices, op);
  const Tensor index = indices.contiguous();
  return backward(PoolKind::max, grad, &index, input_shape, g, op);
}

Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& options) {
  check_floating(x, "the input", "avg_pool2d");
  const PoolGeometry g = window_geometry(PoolKind::avg, x.shape(), options, "avg_pool2d");
  Tensor out = empty(output_shape(x.shape(), g), {.dtype = x.dtype(), .device = x.device()});
  forward(PoolKind::avg, x, g, out, nullptr, "avg_pool2d");
  return out;
}

Tensor avg_pool2d_backward(const Tensor& grad_output, const Shape& input_shape, const Pool2dOptions& options) {
  const char* op = "avg_pool2d_backward";
  const PoolGeometry g = window_geometry(PoolKind::avg, input_shape, options, op);
  return backward(PoolKind::avg, checked_grad(grad_output, input_shape, g, op), nullptr, input_shape, g, op);
}

Tensor adaptive_avg_pool2d(const Tensor& x, std::array<std::int64_t, 2> output_size) {
  check_floating(x, "the input", "adaptive_avg_pool2d");
  const PoolGeometry g = adaptive_geometry(x.shape(), output_size, "adaptive_avg_pool2d");
  Tensor out = empty(output_shape(x.shape(), g), {.dtype = x.dtype(), .device = x.device()});
  forward(PoolKind::adaptive_avg, x, g, out, nullptr, "adaptive_avg_pool2d");
  return out;
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_output, const Shape& input_shape) {
  const char* op = "adaptive_avg_pool2d_backward";
  check_image_shape(input_shape, op);
  check_floating(grad_output, "grad_output", op);
  FRUGAL_CHECK_SHAPE(grad_output.dim() == static_cast<std::int64_t>(input_shape.size()), op, ": grad_output has shape ",
                     shape_str(grad_output.shape()), ", input shape ", shape_str(input_shape));
  const PoolGeometry g = adaptive_geometry(input_shape, {grad_output.size(-2), grad_output.size(-1)}, op);
  return backward(PoolKind::adaptive_avg, checked_grad(grad_output, input_shape, g, op), nullptr, input_shape, g, op);
}

}  // namespace frugal
