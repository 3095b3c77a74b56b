// One training step of a classifier, with what it holds in memory read from the allocator's per-tag
// books of the batch's device: the figures of sample 06 and of `frugal bench train`. The step is the
// trainer's own (train/step.h: forward in the model's current mode, mean cross-entropy, backward,
// optimizer step, zero_grad), so a benchmark can time this function itself.
// Not here: choosing the model, the batch or the optimizer (the callers), formatting figures.
#pragma once

#include <cstdint>

#include "nn/module.h"
#include "nn/optim.h"
#include "train/step.h"

namespace frugal::train {

struct StepMemory {
  std::int64_t activation_bytes = 0;  // tag activation alive at the end of the forward beyond what was
                                      // alive before it: what the forward keeps for backward (and the loss)
  std::int64_t grad_bytes = 0;        // the .grad tensors after backward
  std::int64_t optimizer_bytes = 0;   // tag optimizer after the update (momentum buffers, ...)
  std::int64_t peak_bytes = 0;        // the most requested bytes alive during the step, everything counted
};

// images [N, C, H, W] and labels [N] i64 on the model's device. Resets the allocator's peak
// statistics; the gradients are freed again at the end (zero_grad sets them to none).
// `recipe`: how the step runs (what forward saves, autocast), as train/step.h's.
StepMemory training_step(nn::Module& model, nn::Optimizer& optimizer, const Tensor& images, const Tensor& labels,
                         const StepRecipe& recipe = {});

}  // namespace frugal::train
