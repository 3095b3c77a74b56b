// The parts of a run that `frugal train`'s recipe flags choose, made in one place so that the
// trainer and the memory planner (train/planner.h) build exactly the same run: the model's options,
// the optimizer over two parameter groups (weights decayed; biases and norm parameters not), the
// learning-rate schedule over all the run's steps, the GradScaler of --amp f16, and DDP's buckets.
// Not here: running a step (train/step.h), the loop (train/trainer.h).
#pragma once

#include <cstdint>
#include <memory>

#include "dist/ddp.h"
#include "models/registry.h"
#include "nn/grad_scaler.h"
#include "nn/lr_schedule.h"
#include "nn/module.h"
#include "nn/optim.h"
#include "nn/optimizer_in_backward.h"
#include "nn/optimizer_offload.h"
#include "train/options.h"
#include "train/step.h"

namespace frugal::train {

models::ModelOptions model_options(const TrainOptions& options, std::int64_t in_channels, std::int64_t num_classes);
std::unique_ptr<nn::Optimizer> make_optimizer(const nn::Module& model, const TrainOptions& options);
// With --ddp: the gradient buckets' options, and the optimizer of the run (ZeRO's sharded one with
// --zero 1 or 2, over `ddp`'s slices; otherwise make_optimizer's).
dist::DdpOptions ddp_options(const TrainOptions& options);
std::unique_ptr<nn::Optimizer> make_optimizer(const nn::Module& model, dist::DistributedDataParallel* ddp,
                                              const TrainOptions& options);

// What updates the weights: the optimizer, its schedule laid over `total_steps` optimizer steps, and
// the GradScaler (enabled with --amp f16 only; a disabled one passes everything through), and with
// --optimizer-in-backward the hooks that run the optimizer inside backward.
struct Recipe {
  std::unique_ptr<nn::Optimizer> optimizer;
  std::unique_ptr<nn::LRScheduler> schedule;
  std::unique_ptr<nn::GradScaler> scaler;
  std::unique_ptr<nn::OptimizerInBackward> in_backward;  // --optimizer-in-backward: the optimizer's hooks

  // The step's view of them, for `model` (and its DDP wrapper, if any).
  StepParts parts(nn::Module& model, dist::DistributedDataParallel* ddp) const {
    return {model, optimizer.get(), scaler.get(), schedule.get(), ddp, in_backward.get()};
  }
};
Recipe make_recipe(const nn::Module& model, dist::DistributedDataParallel* ddp, const TrainOptions& options,
                   std::int64_t total_steps);

}  // namespace frugal::train
