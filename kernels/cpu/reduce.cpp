// CPU reductions (kernels/reduce_backends.h): one output element per loop iteration, parallel over
// outputs, each a sequential pass over its inputs with the accumulators of kernels/reduce_ops.h.
#include <type_traits>

#include "core/convert.h"
#include "core/cpu/strided_cursor.h"
#include "kernels/reduce_backends.h"

namespace frugal::cpu {

void reduce(Reduction op, DType dtype, const void* x, const StridedLayout& x_layout, std::int64_t outer,
            std::int64_t inner, std::int64_t correction, void* out, std::int64_t* indices) {
  visit_dtype(dtype, [&]<typename T>() {
    if constexpr (std::is_floating_point_v<T> || is_half_type_v<T>) {
      const T* in = static_cast<const T*>(x);
      T* result = static_cast<T*>(out);
#pragma omp parallel for schedule(static)
      for (std::int64_t o = 0; o < outer; ++o) {
        SumAccumulator sum;
        Welford welford;
        MaxAccumulator best;
        if (inner > 0) {  // a reduced dim of size 0 has no element to place a cursor on
          StridedCursor cursor(x_layout, o * inner);
          for (std::int64_t r = 0; r < inner; ++r, cursor.advance()) {
            const double v = convert<double>(in[cursor.offset()]);
            if (op == Reduction::sum || op == Reduction::mean) sum.add(v);
            else if (op == Reduction::var) welford.add(v);
            else best.add(v, r);
          }
        }
        double value = 0.0;
        switch (op) {
          case Reduction::sum: value = sum.sum; break;
          case Reduction::mean: value = sum.sum / static_cast<double>(inner); break;
          case Reduction::var: value = welford.variance(correction); break;
          case Reduction::max:
          case Reduction::argmax: value = best.value; break;
        }
        result[o] = convert<T>(value);
        if (indices) indices[o] = best.index;
      }
    } else {
      FRUGAL_THROW(DTypeError, "reductions take floating dtypes, got ", dtype);
    }
  });
}

}  // namespace frugal::cpu
