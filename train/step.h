// One training step of a classifier: the only copy. `frugal train` runs it, and so do the memory
// planner (on the meta device, train/planner.h), `frugal run-step` (forward and backward only,
// train/run_step.h), the step-memory measurement of sample 06 and `frugal bench train`
// (train/step_memory.h) and the training-trace recorder (train/training_trace.h). So what the planner
// predicts and what a benchmark times is the step that trains, GradScaler, loss weighting and
// learning-rate schedule included.
//
//   for each of the step's micro-batches:
//     forward   the batch (taken from the caller's source), the model under autocast when asked,
//               cross-entropy with label smoothing                 (what forward saves: recipe.saving;
//                                                                  where: recipe.offload_activations)
//     backward  of the loss weighted by the micro-batch's share of the step's samples, times the
//               GradScaler's scale; with DDP the buckets are reduced during the last one only
//   optimizer   DDP's buckets awaited, GradScaler's unscale/skip-on-overflow/step, its update,
//               zero_grad (gradients freed), the schedule's next lr
//
// With the optimizer in backward (StepParts::in_backward, --optimizer-in-backward), each parameter's
// update runs inside backward as soon as its gradient is complete, and the optimizer phase is the
// schedule's next lr alone; one micro-batch per step, no GradScaler, no DDP (the updates need each
// gradient final when backward produces it).
//
// The modes a step runs in (autocast, how activations are saved) are set here, where they apply, for
// the length of the call. On the meta device (shapes, no values) everything runs and allocates as on
// a real one; only the loss and accuracy cannot be read, so the totals stay 0.
// Not here: the loop over epochs, checkpoints, evaluation (train/trainer.h); choosing the recipe
// (train/recipe.h makes the optimizer, the schedule and the scaler from TrainOptions).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "core/dtype.h"
#include "data/loader.h"
#include "nn/module.h"
#include "nn/optim.h"
#include "nn/saved_activations.h"

namespace frugal::nn {
class GradScaler;
class LRScheduler;
class OptimizerInBackward;
}  // namespace frugal::nn
namespace frugal::dist {
class DistributedDataParallel;
}

namespace frugal::train {

struct TrainOptions;

// How a step computes, beside the model's own layers.
struct StepRecipe {
  std::optional<DType> amp = std::nullopt;  // autocast forward and loss to f16 or bf16
  double label_smoothing = 0.0;
  nn::ActivationSaving saving = {};   // what forward saves for backward (nn/saved_activations.h)
  bool offload_activations = false;   // and keeps it in host memory until backward (nn/activation_offload.h)
};
StepRecipe step_recipe(const TrainOptions& options);

// What a step updates. Only the model is required: without an optimizer a step is forward and
// backward alone (`frugal run-step`); the scaler, the schedule and DDP are optional too.
struct StepParts {
  nn::Module& model;
  nn::Optimizer* optimizer = nullptr;
  nn::GradScaler* scaler = nullptr;
  nn::LRScheduler* schedule = nullptr;
  dist::DistributedDataParallel* ddp = nullptr;
  nn::OptimizerInBackward* in_backward = nullptr;  // given: `optimizer`'s updates run inside backward
};

enum class StepPhase : std::uint8_t { forward, backward, optimizer };

struct StepHooks {
  // Required: the next micro-batch's images and labels, on the model's device. Called inside the
  // forward phase (taking a batch from a loader is part of a step's forward).
  std::function<data::Batch()> next_batch = {};
  // Each phase's begin (true) and end (false), with the micro-batch (0 for the optimizer phase).
  std::function<void(StepPhase, bool begin, std::int64_t micro_batch)> on_phase = {};
};

// What one step trained on, summed over its micro-batches.
struct StepTotals {
  double loss_sum = 0.0;  // of the samples' losses (each micro-batch's mean times its samples)
  double correct = 0.0;
  double samples = 0.0;
};

struct StepResult {
  StepTotals totals;
  bool updated = true;  // false: the GradScaler skipped the update (a gradient overflowed)
};

// One optimizer step over `micro_batches` batches holding `step_samples` samples together (the
// last batch of an epoch may be short). Needs parts.optimizer.
StepResult optimizer_step(const StepParts& parts, const StepRecipe& recipe, std::int64_t micro_batches,
                          std::int64_t step_samples, const StepHooks& hooks);

// One micro-batch of a step: its batch, forward and loss, then backward of the loss weighted by the
// batch's share of `step_samples` (so the accumulated gradient is that of the mean over the step's
// samples, as one large batch would give), times the scaler's scale. With DDP the buckets are
// reduced during the backward of the `last` micro-batch only. No update.
struct MicroBatch {
  data::Batch batch;
  Tensor logits, loss;  // the loss: mean cross-entropy, before weighting and scaling
};
MicroBatch micro_batch(const StepParts& parts, const StepRecipe& recipe, const StepHooks& hooks, std::int64_t index,
                       bool last, std::int64_t step_samples);

}  // namespace frugal::train
