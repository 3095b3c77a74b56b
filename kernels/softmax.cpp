// Softmax and log-softmax (see softmax.h): the checks, the move of `dim` to the last place, and the
// one switch that picks the device's row kernel (kernels/softmax_backends.h).
#include "kernels/softmax.h"

#include <numeric>

#include "core/dispatch.h"
#include "kernels/softmax_backends.h"

namespace frugal {

namespace {

// The permutation that moves `dim` last, keeping the others in order; and its inverse, which puts
// the rows' result back in the input's order.
std::vector<std::int64_t> dim_last_order(std::int64_t ndim, std::int64_t dim) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(ndim));
  std::iota(order.begin(), order.end(), 0);
  order.erase(order.begin() + dim);
  order.push_back(dim);
  return order;
}

std::vector<std::int64_t> inverse(const std::vector<std::int64_t>& order) {
  std::vector<std::int64_t> result(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) result[static_cast<std::size_t>(order[i])] = static_cast<std::int64_t>(i);
  return result;
}

std::int64_t checked_dim(const Tensor& x, std::int64_t dim, const char* op) {
  FRUGAL_CHECK_VALUE(x.defined(), op, ": the input is undefined");
  FRUGAL_CHECK_DTYPE(is_floating(x.dtype()), op, ": needs a floating dtype, got ", x.dtype(), " (shape ",
                     shape_str(x.shape()), ")");
  dim = wrap_dim(dim, x.dim());
  FRUGAL_CHECK_SHAPE(x.size(dim) > 0, op, ": dim ", dim, " of shape ", shape_str(x.shape()), " is empty");
  return dim;
}

Tensor forward(const Tensor& x, std::int64_t dim, bool log, const char* op) {
  dim = checked_dim(x, dim, op);
  const std::vector<std::int64_t> order = dim_last_order(x.dim(), dim);
  const Tensor rows = x.permute(order).contiguous();  // itself when x is row-major with dim last
  const Tensor y = empty(rows.shape(), {.dtype = x.dtype(), .device = x.device()});
  const std::int64_t cols = x.size(dim), count = x.numel() / cols;
  if (count > 0) {
    switch (x.device().type()) {
      case DeviceType::CPU: cpu::softmax_rows(x.dtype(), log, rows.data_ptr(), y.data_ptr(), count, cols); break;
      case DeviceType::Meta: break;
      case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
        cuda::softmax_rows(x.dtype(), log, rows.data_ptr(), y.data_ptr(), count, cols);
        break;
#else
        throw_no_cuda(op);
#endif
    }
  }
  return y.permute(inverse(order));
}

Tensor backward(const Tensor& grad, const Tensor& y, std::int64_t dim, bool log, const char* op) {
  dim = checked_dim(y, dim, op);
  FRUGAL_CHECK_VALUE(grad.defined(), op, ": the gradient is undefined");
  check_same_shape(grad, y, op);
  check_same_dtype(grad, y, op);
  check_same_device(grad, y, op);
  const std::vector<std::int64_t> order = dim_last_order(y.dim(), dim);
  const Tensor g_rows = grad.permute(order).contiguous(), y_rows = y.permute(order).contiguous();
  const Tensor dx = empty(y_rows.shape(), {.dtype = y.dtype(), .device = y.device()});
  const std::int64_t cols = y.size(dim), count = y.numel() / cols;
  if (count > 0) {
    switch (y.device().type()) {
      case DeviceType::CPU:
        cpu::softmax_backward_rows(y.dtype(), log, g_rows.data_ptr(), y_rows.data_ptr(), dx.data_ptr(), count, cols);
        break;
      case DeviceType::Meta: break;
      case DeviceType::CUDA:
#if FRUGAL_WITH_CUDA
        cuda::softmax_backward_rows(y.dtype(), log, g_rows.data_ptr(), y_rows.data_ptr(), dx.data_ptr(), count, cols);
        break;
#else
        throw_no_cuda(op);
#endif
    }
  }
  return dx.permute(inverse(order));
}

}  // namespace

Tensor log_softmax(const Tensor& x, std::int64_t dim) { return forward(x, dim, true, "log_softmax"); }
Tensor softmax(const Tensor& x, std::int64_t dim) { return forward(x, dim, false, "softmax"); }

Tensor softmax_backward(const Tensor& grad, const Tensor& y, std::int64_t dim) {
  return backward(grad, y, dim, false, "softmax_backward");
}
Tensor log_softmax_backward(const Tensor& grad, const Tensor& y, std::int64_t dim) {
  return backward(grad, y, dim, true, "log_softmax_backward");
}

}  // namespace frugal
