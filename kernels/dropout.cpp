// Dropout (see dropout.h).
#include "kernels/dropout.h"

#include "kernels/elementwise.h"

namespace frugal {

namespace {
void check_p(double p) { FRUGAL_CHECK_VALUE(p >= 0.0 && p < 1.0, "dropout: p must be in [0, 1), got ", p); }
}  // namespace

DropoutResult dropout(const Tensor& x, double p, bool training, Generator* generator) {
  check_p(p);
  FRUGAL_CHECK_VALUE(x.defined(), "dropout: the input is undefined");
  if (!training || p == 0.0) return {x, Tensor()};
  Tensor mask = bernoulli(x.shape(), 1.0 - p, {.dtype = x.dtype(), .device = x.device()}, generator);
  return {mul(mul(x, mask), 1.0 / (1.0 - p)), mask};
}

Tensor dropout_backward(const Tensor& grad, const Tensor& mask, double p) {
  check_p(p);
  if (!mask.defined()) return grad;  // evaluation, or p == 0: the identity
  return mul(mul(grad, mask), 1.0 / (1.0 - p));
}

}  // namespace frugal
