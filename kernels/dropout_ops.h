// Element i of dropout, written once as FRUGAL_HOST_DEVICE code for the CPU loop and the CUDA kernel:
//   out[i] = keep(i) ? in[i] / (1 - p) : 0,   keep(i) = (uniform(seed, offset, i) < 1 - p)
// keep(i) is bernoulli(1 - p)'s element i for the same (seed, offset) (core/random_spec.h), so the
// mask is never stored: the forward (in = x) and the backward (in = the gradient) recompute it.
// Not here: loops, launches or checks (kernels/dropout.cpp).
#pragma once

#include <cstdint>

#include "core/convert.h"
#include "core/random_spec.h"

namespace frugal {

struct DropoutSpec {
  RandomSpec keep;     // bernoulli with a = 1 - p, at the draw's (seed, offset)
  double scale = 1.0;  // 1 / (1 - p)
};

// Writes elements 4*block .. 4*block+3 (those below numel): one Philox call serves four elements,
// the same grouping as random_fill_block, so element i reads the word that bernoulli's element i does.
template <typename T, typename C>
FRUGAL_HOST_DEVICE inline void dropout_block(const T* in, T* out, std::int64_t numel, const DropoutSpec& spec,
                                             std::int64_t block) {
  const PhiloxWords words = philox_block(spec.keep.seed, spec.keep.offset, static_cast<std::uint64_t>(block));
  for (int lane = 0; lane < kPhiloxWordsPerBlock && block * kPhiloxWordsPerBlock + lane < numel; ++lane) {
    const std::int64_t i = block * kPhiloxWordsPerBlock + lane;
    const bool kept = random_value(spec.keep, words, lane) != 0.0;
    out[i] = convert<T>(kept ? convert<C>(in[i]) * static_cast<C>(spec.scale) : C(0));
  }
}

}  // namespace frugal
