// The optimizer step fused into backward: each parameter is updated the moment backward has
// finished its gradient, and that gradient is freed at once. Without it, backward ends holding every
// weight's gradient (as many bytes as the weights) and the optimizer step reads them all; with it,
// only the gradients of the parameters whose backward is running are alive at a time. This is
// PyTorch's post-accumulate-grad hook pattern (register_post_accumulate_grad_hook running
// optimizer.step for one parameter): the update arithmetic is the optimizer's own, one parameter
// per call, so the weights after a step are bit for bit those of the ordinary step.
//
//   nn::OptimizerInBackward fused(optimizer);    // one hook per parameter, for the object's life
//   {
//     const nn::OptimizerInBackward::Armed armed(fused);  // this backward updates as it goes
//     autograd::backward(loss);
//   }                                           // every parameter with a gradient has been updated
//
// What it cannot combine with, because each needs every gradient complete before any update:
// gradient accumulation over micro-batches (the gradient is complete only in the last one's
// backward), a loss scaler that checks all gradients for overflow first (GradScaler), gradient
// clipping by the global norm, and data parallelism's all-reduce. train/options.cpp refuses those
// combinations for `frugal train --optimizer-in-backward`.
// Not here: the update arithmetic (nn/optim.h), the training step that arms it (train/step.h).
#pragma once

#include <cstddef>
#include <memory>

#include "nn/optim.h"

namespace frugal::nn {

class OptimizerInBackward {
 public:
  // Registers a post-accumulate hook on every parameter of `optimizer`, which must outlive this
  // object. The hooks stay registered after it dies (autograd keeps no way to remove one) and do
  // nothing then.
  explicit OptimizerInBackward(Optimizer& optimizer);
  OptimizerInBackward(const OptimizerInBackward&) = delete;
  OptimizerInBackward& operator=(const OptimizerInBackward&) = delete;

  // While an Armed lives, each completed gradient is applied and freed; otherwise the hooks leave
  // gradients to accumulate as usual (an evaluation, a backward the caller steps itself). Arming
  // starts a step (no parameter updated yet); arming twice at once is an error.
  class Armed {
   public:
    explicit Armed(OptimizerInBackward& owner);
    ~Armed();
    Armed(const Armed&) = delete;
    Armed& operator=(const Armed&) = delete;

   private:
    OptimizerInBackward& owner_;
  };

  // Parameters updated since the last arming: those that received a gradient.
  std::size_t updated() const;

 private:
  struct State;  // what the hooks share, held weakly by them
  std::shared_ptr<State> state_;
};

}  // namespace frugal::nn
