// visit_floating: the one place a floating dtype becomes the pair of C++ types every kernel of
// kernels/ works with: T, the stored type, and C, the compute type (float, or double for f64; the
// 16-bit floats compute in float and round once). Host code only: launchers and CPU loops.
#pragma once

#include "core/dtype.h"

namespace frugal {

// Calls fn.template operator()<T, C>(); DTypeError naming `op` for a dtype that is not floating.
template <typename Fn>
decltype(auto) visit_floating(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::f32: return fn.template operator()<float, float>();
    case DType::f64: return fn.template operator()<double, double>();
    case DType::f16: return fn.template operator()<Half, float>();
    case DType::bf16: return fn.template operator()<BFloat16, float>();
    default: FRUGAL_THROW(DTypeError, op, " take floating dtypes, got ", dtype);
  }
}

}  // namespace frugal
