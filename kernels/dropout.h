// Dropout: each element is zeroed with probability p and the survivors scaled by 1 / (1 - p), so
// the expected value is unchanged (inverted dropout, as PyTorch). The mask comes from the Philox
// generator (core/random.h): element i is kept when bernoulli(1 - p) drawn at the same (seed, offset)
// has a 1 there, on the CPU and the GPU alike.
// The mask is never stored. The forward takes one draw from the generator and remembers its
// (seed, offset), 16 bytes; the backward recomputes the mask from them, element by element, in the
// same kernel (kernels/dropout_ops.h). So dropout saves no activation for backward, and its forward
// allocates the output alone. Replaying a GeneratorState (activation checkpointing) replays the mask.
// Kernels: kernels/cpu/dropout.cpp, kernels/cuda/dropout.cu.
// Not here: the autograd op (nn/functional.h), the module (nn/layers.h).
#pragma once

#include <optional>

#include "core/random.h"

namespace frugal {

struct DropoutResult {
  Tensor output;
  // The draw the mask came from; empty when nothing was dropped (evaluation, or p == 0), and
  // output is then the input itself.
  std::optional<GeneratorState> draw;
};

// p in [0, 1). With `training` false (evaluation) the input passes through unchanged and no random
// numbers are drawn. A non-contiguous x is read through a contiguous copy; the output is contiguous.
DropoutResult dropout(const Tensor& x, double p, bool training = true, Generator* generator = nullptr);
// grad * mask / (1 - p), the mask recomputed from `draw`; grad itself when draw is empty.
Tensor dropout_backward(const Tensor& grad, const std::optional<GeneratorState>& draw, double p);

}  // namespace frugal
