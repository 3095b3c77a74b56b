// Elementwise ops (see elementwise.h): checks, broadcasting, the result, and the one switch per
// op that picks the device's kernel.
#include "kernels/elementwise.h"

#include "core/dispatch.h"
#include "kernels/elementwise_backends.h"

namespace frugal {

Shape broadcast_shapes(std::span<const std::int64_t> a, std::span<const std::int64_t> b, const char* op) {
  Shape out(std::max(a.size(), b.size()));
  for (std::size_t i = 0; i < out.size(); ++i) {  // aligned from the right
    const std::int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1, db = i < b.size() ? b[b.size() - 1 - i] : 1;
    FRUGAL_CHECK_SHAPE(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
                       " cannot be broadcast (dim ", static_cast<std::int64_t>(out.size() - 1 - i), ": ", da, " vs ", db, ")");
    out[out.size() - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

namespace {
void check_floating(const Tensor& x, const char* op) {
  FRUGAL_CHECK_VALUE(x.defined(), op, ": an operand is undefined");
  FRUGAL_CHECK_DTYPE(is_floating(x.dtype()), op, ": needs a floating dtype, got ", x.dtype(), " (shape ",
                     shape_str(x.shape()), ")");
}

void check_operands(const Tensor& x, const Tensor& y, const char* op) {
  check_floating(x, op);
  check_floating(y, op);
  check_same_dtype(x, y, op);
  check_same_device(x, y, op);
}

void run_unary(UnaryOp op, double a, double b, const Tensor& out, const Tensor& x) {
  if (out.numel() == 0) return;
  switch (out.device().type()) {
    case DeviceType::CPU:
      return cpu::unary(op, a, b, out.dtype(), out.data_ptr(), out.layout(), x.data_ptr(), x.layout());
    case DeviceType::Meta: return;
    case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
      return cuda::unary(op, a, b, out.dtype(), out.data_ptr(), out.layout(), x.data_ptr(), x.layout());
#else
      throw_no_cuda("unary op");
#endif
  }
}

void run_binary(BinaryOp op, const Tensor& out, const Tensor& xs, const Tensor& ys) {
  if (out.numel() == 0) return;
  switch (out.device().type()) {
    case DeviceType::CPU:
      return cpu::binary(op, out.dtype(), out.data_ptr(), out.layout(), xs.data_ptr(), xs.layout(), ys.data_ptr(),
                         ys.layout());
    case DeviceType::Meta: return;
    case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
      return cuda::binary(op, out.dtype(), out.data_ptr(), out.layout(), xs.data_ptr(), xs.layout(), ys.data_ptr(),
                          ys.layout());
#else
      throw_no_cuda("binary op");
#endif
  }
}

void check_writable(const Tensor& x, const char* op) {
  for (std::int64_t d = 0; d < x.dim(); ++d)
    FRUGAL_CHECK_VALUE(x.strides()[d] != 0 || x.shape()[d] <= 1, op, " on an expanded view of shape ",
                       shape_str(x.shape()), ": several elements share one address");
}
}  // namespace

Tensor unary(UnaryOp op, const Tensor& x, double a, double b) {
  check_floating(x, "unary op");
  Tensor out = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  run_unary(op, a, b, out, x);
  return out;
}

Tensor& unary_(UnaryOp op, Tensor& x, double a, double b) {
  check_floating(x, "in-place unary op");
  check_writable(x, "in-place unary op");
  run_unary(op, a, b, x, x);  // each element reads and writes only itself, so aliasing is safe
  x.storage()->bump_version();
  return x;
}

Tensor binary(BinaryOp op, const Tensor& x, const Tensor& y) {
  check_operands(x, y, "binary op");
  const Shape shape = broadcast_shapes(x.shape(), y.shape(), "binary op");
  Tensor out = empty(shape, {.dtype = x.dtype(), .device = x.device()});
  run_binary(op, out, x.expand(shape), y.expand(shape));
  return out;
}

Tensor& binary_(BinaryOp op, Tensor& x, const Tensor& y) {
  check_operands(x, y, "in-place binary op");
  check_writable(x, "in-place binary op");
  FRUGAL_CHECK_SHAPE(broadcast_shapes(x.shape(), y.shape(), "in-place binary op") == x.shape(),
                     "in-place binary op: ", shape_str(y.shape()), " does not broadcast to the result's shape ",
                     shape_str(x.shape()));
  // Element i reads x[i] and y[i] and writes x[i]: safe when y is x itself or shares none of its
  // memory, wrong when y is another view into x's elements (it would read values already written).
  FRUGAL_CHECK_VALUE(y.is_same(x) || !memory_overlaps(x, y), "in-place binary op: the operand of shape ",
                     shape_str(y.shape()), " overlaps the result in memory");
  run_binary(op, x, x, y.expand(x.shape()));
  x.storage()->bump_version();
  return x;
}

Tensor where(const Tensor& condition, const Tensor& x, const Tensor& y) {
  check_operands(x, y, "where");
  FRUGAL_CHECK_DTYPE(condition.defined() && condition.dtype() == DType::boolean, "where: the condition must be bool");
  check_same_device(condition, x, "where");
  const Shape shape = broadcast_shapes(broadcast_shapes(condition.shape(), x.shape(), "where"), y.shape(), "where");
  Tensor out = empty(shape, {.dtype = x.dtype(), .device = x.device()});
  if (out.numel() == 0) return out;
  const Tensor cs = condition.expand(shape), xs = x.expand(shape), ys = y.expand(shape);
  switch (out.device().type()) {
    case DeviceType::CPU:
      cpu::where(out.dtype(), out.data_ptr(), out.layout(), cs.data<bool>(), cs.layout(), xs.data_ptr(), xs.layout(),
                 ys.data_ptr(), ys.layout());
      break;
    case DeviceType::Meta: break;
    case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
      cuda::where(out.dtype(), out.data_ptr(), out.layout(), cs.data<bool>(), cs.layout(), xs.data_ptr(), xs.layout(),
                  ys.data_ptr(), ys.layout());
      break;
#else
      throw_no_cuda("where");
#endif
  }
  return out;
}

}  // namespace frugal
