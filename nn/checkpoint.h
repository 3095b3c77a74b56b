// Activation checkpointing (Chen et al. 2016; torch.utils.checkpoint): run a block without saving
// anything for backward, keep only its inputs, and run it again during backward to get the
// activations back. Memory: the block's saved activations are replaced by its inputs; time: one more
// forward of the block.
//
// Two things must not change between the two runs: random numbers (the generator's state is
// replayed, so dropout draws the same mask) and module state (the recomputation runs with
// checkpoint_recomputing() true, and BatchNorm2d then leaves its running statistics alone instead of
// updating them a second time).
// CheckpointedSequential is the container a model builds its repeated blocks into: a Sequential
// whose chosen runs of children go through checkpoint, with the children's names unchanged.
// Not here: choosing what to checkpoint (the planner's job, models/block_selection.h), non-reentrant
// saved-tensor hooks.
#pragma once

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "nn/layers.h"

namespace frugal::nn {

using CheckpointFn = std::function<Tensor(const std::vector<Tensor>& inputs)>;

// fn's output; its gradient flows to `inputs` and to every tensor fn uses that requires grad (a
// module's parameters). With grad mode on the output always requires grad, since only running fn
// again could tell whether something inside does. fn must be a function of its inputs and of state that backward does not
// change; it must draw random numbers only from the default generator.
Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs);

// True while a checkpointed block is being recomputed during backward (on this thread).
bool checkpoint_recomputing();
// True while a checkpointed block runs its first time, in the forward (on this thread): autograd is
// off there, yet the recomputation must compute the same values (nn/fold_batch_norm.h asks).
bool checkpoint_first_run();

// A Sequential (children "0", "1", ..., so a state dict is the same either way) in which each run
// of children marked by checkpoint_children is one checkpoint: it keeps only its input for backward
// and runs again during backward. The other children run as in a Sequential.
class CheckpointedSequential : public Sequential {
 public:
  // Children [first, first + count) as one checkpointed block; runs must not overlap.
  void checkpoint_children(std::size_t first, std::size_t count = 1);
  Tensor forward(const Tensor& x) override;

 private:
  std::vector<std::pair<std::size_t, std::size_t>> runs_;  // [first, end) in order of first
};

}  // namespace frugal::nn
