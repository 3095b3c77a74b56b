// CPU fused softmax (kernels/softmax_backends.h): one row per parallel_for iteration, in three plain
// loops over the row: its max, then its sum of exp(x - max), then the outputs. The row is in cache
// after the first loop, so the extra passes cost little; the CUDA kernels gather max and sum in one
// pass instead (LogSumExp, kernels/softmax_ops.h), because there each pass ends in a block reduction.
// The backward: one loop for the row's sum, one writing dx.
#include <limits>

#include "core/cpu/parallel.h"
#include "core/convert.h"
#include "kernels/softmax_backends.h"
#include "kernels/visit_floating.h"

namespace frugal::cpu {

void softmax_rows(DType dtype, bool log, const void* x, void* y, std::int64_t rows, std::int64_t cols) {
  visit_floating(dtype, "softmax", [&]<typename T, typename C>() {
    const T* in = static_cast<const T*>(x);
    T* out = static_cast<T*>(y);
    parallel_for(rows, rows * cols, [&](std::int64_t r) {
      const T* row_in = in + r * cols;
      T* row_out = out + r * cols;
      C max = -std::numeric_limits<C>::infinity();  // a NaN is skipped here and poisons the sum below
      for (std::int64_t c = 0; c < cols; ++c)
        if (const C v = convert<C>(row_in[c]); v > max) max = v;
      C sum = C(0);
      for (std::int64_t c = 0; c < cols; ++c) sum += elementwise::exp_of(convert<C>(row_in[c]) - max);
      const SoftmaxRow<C> row(max, sum);
      for (std::int64_t c = 0; c < cols; ++c) row_out[c] = convert<T>(row.output(log, convert<C>(row_in[c])));
    });
  });
}

void softmax_backward_rows(DType dtype, bool log, const void* grad, const void* y, void* dx, std::int64_t rows,
                           std::int64_t cols) {
  visit_floating(dtype, "softmax_backward", [&]<typename T, typename C>() {
    const T* g = static_cast<const T*>(grad);
    const T* out = static_cast<const T*>(y);
    T* result = static_cast<T*>(dx);
    parallel_for(rows, rows * cols, [&](std::int64_t r) {
      const std::int64_t first = r * cols;
      RowSum<C> sum;
      for (std::int64_t c = first; c < first + cols; ++c)
        sum.add(softmax_backward_term(log, convert<C>(g[c]), convert<C>(out[c])));
      for (std::int64_t c = first; c < first + cols; ++c)
        result[c] = convert<T>(softmax_backward_output(log, convert<C>(g[c]), convert<C>(out[c]), sum.value));
    });
  });
}

}  // namespace frugal::cpu
