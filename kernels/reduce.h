// Reductions over chosen dims or over all: sum, mean, var (with a correction: 1 unbiased, 0
// biased), max with the index of its first occurrence, argmax. Accumulation is in double on every
// device (Kahan for sums, Welford for variance), so the result is accurate in any dtype.
// Empty `dims` means every dim; dims may be negative; keepdim keeps reduced dims with size 1.
// Sums over no elements are 0; mean and var of nothing are NaN; max of nothing is an error.
// Kernels: kernels/cpu/reduce.cpp, kernels/cuda/reduce.cu (one block per output, warp shuffles).
// Not here: the backward (sum and mean broadcast the gradient back, which is an expand; autograd).
#pragma once

#include <vector>

#include "core/tensor.h"
#include "kernels/reduce_ops.h"

namespace frugal {

Tensor sum(const Tensor& x, std::vector<std::int64_t> dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, std::vector<std::int64_t> dims = {}, bool keepdim = false);
Tensor var(const Tensor& x, std::vector<std::int64_t> dims = {}, std::int64_t correction = 1, bool keepdim = false);

struct MaxResult {
  Tensor values;   // the input's dtype
  Tensor indices;  // i64, positions along `dim`
};
MaxResult max(const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor max(const Tensor& x);  // over every element, a 0-dim tensor
Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim = false);

}  // namespace frugal
