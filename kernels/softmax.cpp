// Softmax and log-softmax (see softmax.h), composed from kernels/reduce.h and kernels/elementwise.h.
#include "kernels/softmax.h"

#include "kernels/elementwise.h"
#include "kernels/reduce.h"

namespace frugal {

Tensor log_softmax(const Tensor& x, std::int64_t dim) {
  FRUGAL_CHECK_VALUE(x.defined(), "log_softmax: the input is undefined");
  dim = wrap_dim(dim, x.dim());
  FRUGAL_CHECK_SHAPE(x.size(dim) > 0, "log_softmax: dim ", dim, " of shape ", shape_str(x.shape()), " is empty");
  const Tensor shifted = sub(x, max(x, dim, true).values);
  return sub(shifted, log(sum(exp(shifted), {dim}, true)));
}

Tensor softmax(const Tensor& x, std::int64_t dim) { return exp(log_softmax(x, dim)); }

Tensor softmax_backward(const Tensor& grad, const Tensor& y, std::int64_t dim) {
  check_same_shape(grad, y, "softmax_backward");
  return mul(y, sub(grad, sum(mul(grad, y), {dim}, true)));
}

Tensor log_softmax_backward(const Tensor& grad, const Tensor& y, std::int64_t dim) {
  check_same_shape(grad, y, "log_softmax_backward");
  return sub(grad, mul(exp(y), sum(grad, {dim}, true)));
}

}  // namespace frugal
