// Dropout: each element is zeroed with probability p and the survivors scaled by 1 / (1 - p), so
// the expected value is unchanged (inverted dropout, as PyTorch). The mask comes from the Philox
// generator (core/random.h): the same seed and offset give the same mask on the CPU and the GPU, and
// replaying a GeneratorState reproduces it (activation checkpointing relies on that).
// Composed from bernoulli and elementwise ops, not a fused kernel of its own.
#pragma once

#include "core/random.h"

namespace frugal {

struct DropoutResult {
  Tensor output;
  Tensor mask;  // 1 where kept, 0 where dropped, in the input's dtype: what the backward needs
};

// p in [0, 1). With `training` false (evaluation) the input passes through unchanged and no random
// numbers are drawn.
DropoutResult dropout(const Tensor& x, double p, bool training = true, Generator* generator = nullptr);
Tensor dropout_backward(const Tensor& grad, const Tensor& mask, double p);

}  // namespace frugal
