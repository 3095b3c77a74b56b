// How a model runs one of its repeated blocks (MobileNetV2's inverted residuals, ResNet's residual
// blocks, the small CNN's conv units): directly, or through nn::checkpoint when the model was built
// with checkpoint_activations. Checkpointed, a block keeps only its input for backward and runs again
// during backward; the modules and their names are the same either way, so state dicts do not change.
// Not here: checkpointing itself (nn/checkpoint.h), choosing blocks (each model's forward does).
#pragma once

#include <functional>
#include <memory>

#include "nn/module.h"

namespace frugal::models {

// The block: x -> y. It must keep alive what it uses (capture shared_ptrs, not references): a
// checkpointed block is kept by the graph until backward.
using Block = std::function<Tensor(const Tensor& x)>;

Tensor run_block(const Block& block, const Tensor& x, bool checkpointed);
Tensor run_block(const std::shared_ptr<nn::Module>& block, const Tensor& x, bool checkpointed);

}  // namespace frugal::models
