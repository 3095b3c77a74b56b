// f32 <-> bf16 over a contiguous run of elements, vectorised (Note [bf16 casts in vectors],
// core/cpu/kernels.cpp): what Tensor::to runs between the two, and what a kernel that keeps a
// tensor in bf16 calls on a piece of it at a time. Host code only; one thread (callers split the work).
#pragma once

#include <cstdint>

#include "core/half.h"

namespace frugal::cpu {

// half_bits::from_float_bf16's rounding (nearest even, NaN kept and made quiet), element by element.
void f32_to_bf16(const float* in, BFloat16* out, std::int64_t n);
// Exact: a bf16 is the top half of the f32 it stands for.
void bf16_to_f32(const BFloat16* in, float* out, std::int64_t n);

}  // namespace frugal::cpu
