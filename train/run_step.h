// One step of a model on one batch, with every result named, so that it can be written to a file and
// compared value for value with another implementation (`frugal run-step`, tests/cpu/test_model_fixtures.cpp).
// Training runs the trainer's own micro-batch (train/step.h) without the update.
//   eval   model.eval(), forward, no graph:             logits, loss
//   train  model.train(), forward, backward, no update: logits, loss, grad.<parameter name> for every
//          parameter, state.<buffer name> for every buffer after the forward (BatchNorm's running
//          statistics updated, num_batches_tracked incremented)
// The loss is the mean cross-entropy of the logits against the labels. Every result is a detached CPU
// tensor in the dtype the model ran in (buffers keep theirs: num_batches_tracked stays i64).
// Not here: files (cli/run_step.cpp reads the weights and the batch and writes the results).
#pragma once

#include <cstdint>

#include "nn/module.h"

namespace frugal::train {

enum class StepMode : std::uint8_t { eval, train };

// x [N, C, H, W] floating and y [N] i64 are moved to the model's device and x converted to `dtype`,
// the dtype the model's parameters are in (the caller converts the model with Module::to).
nn::StateDict run_step(nn::Module& model, const Tensor& x, const Tensor& y, StepMode mode, DType dtype, Device device);

}  // namespace frugal::train
