// Softmax and log-softmax along a dim, and their backward, each one fused row kernel per device:
//   log_softmax(x) = x - max - log(sum(exp(x - max)))   (subtracting the max keeps exp finite)
//   softmax(x)     = exp(x - max) / sum(exp(x - max))
// The dim is moved last (a copy only when the input is not already row-major that way), and the
// result has the input's shape; when dim is not the last, it is a permuted view of the row-major
// result. Every floating dtype; f16/bf16 compute in float.
// Kernels: kernels/cpu/softmax.cpp, kernels/cuda/softmax.cu (one block per row, warp shuffles).
// Not here: cross-entropy, which fuses log-softmax with the loss (kernels/loss.h).
#pragma once

#include "core/tensor.h"

namespace frugal {

Tensor log_softmax(const Tensor& x, std::int64_t dim);
Tensor softmax(const Tensor& x, std::int64_t dim);
// Given the forward's output y: dx = y * (g - sum(g * y))  and  dx = g - exp(y) * sum(g).
Tensor softmax_backward(const Tensor& grad, const Tensor& y, std::int64_t dim);
Tensor log_softmax_backward(const Tensor& grad, const Tensor& y, std::int64_t dim);

}  // namespace frugal
