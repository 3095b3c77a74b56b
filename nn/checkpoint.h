// Activation checkpointing (Chen et al. 2016; torch.utils.checkpoint): run a block without saving
// anything for backward, keep only its inputs, and run it again during backward to get the
// activations back. Memory: the block's saved activations are replaced by its inputs; time: one more
// forward of the block.
//
// Two things must not change between the two runs: random numbers (the generator's state is
// replayed, so dropout draws the same mask) and module state (the recomputation runs with
// checkpoint_recomputing() true, and BatchNorm2d then leaves its running statistics alone instead of
// updating them a second time).
// Not here: choosing what to checkpoint (the planner's job), non-reentrant saved-tensor hooks.
#pragma once

#include <functional>
#include <vector>

#include "core/tensor.h"

namespace frugal::nn {

using CheckpointFn = std::function<Tensor(const std::vector<Tensor>& inputs)>;

// fn's output; its gradient flows to `inputs` and to every tensor fn uses that requires grad (a
// module's parameters). With grad mode on the output always requires grad, since only running fn
// again could tell whether something inside does. fn must be a function of its inputs and of state that backward does not
// change; it must draw random numbers only from the default generator.
Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs);

// True while a checkpointed block is being recomputed during backward (on this thread).
bool checkpoint_recomputing();

}  // namespace frugal::nn
