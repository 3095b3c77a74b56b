// Softmax and log-softmax along a dim, and their backward, composed from the reduction and
// elementwise kernels, so they run on every device and in every floating dtype:
//   log_softmax(x) = (x - max) - log(sum(exp(x - max)))   (subtracting the max keeps exp finite)
//   softmax(x)     = exp(log_softmax(x))
// Not here (kernels issue, still to come): a fused single-pass kernel and fused cross-entropy.
#pragma once

#include "core/tensor.h"

namespace frugal {

Tensor log_softmax(const Tensor& x, std::int64_t dim);
Tensor softmax(const Tensor& x, std::int64_t dim);
// Given the forward's output y: dx = y * (g - sum(g * y))  and  dx = g - exp(y) * sum(g).
Tensor softmax_backward(const Tensor& grad, const Tensor& y, std::int64_t dim);
Tensor log_softmax_backward(const Tensor& grad, const Tensor& y, std::int64_t dim);

}  // namespace frugal
