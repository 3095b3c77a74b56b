// A training checkpoint: everything a run needs to continue exactly where it stopped, in one
// safetensors file (nn/safetensors.h) that any safetensors reader can list.
//   tensors   "model.NAME"      the model's state dict (parameters and buffers)
//             "optimizer.KEY"   Optimizer::state_dict (moments, step counts, lrs)
//             "scaler.KEY"      GradScaler::state_dict (empty unless f16 autocast)
//             "schedule.KEY"    LRScheduler::state_dict
//   metadata  "format": "frugal-checkpoint", "version": "1", "position": the TrainingPosition as
//             JSON, "run": run_identity_json of the options that made it.
// Written through AtomicFile (temporary file, fsync, rename): a crash or SIGKILL while saving leaves
// the previous checkpoint in place, never a half-written one.
// Not here: when checkpoints are taken (train/trainer.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "core/random.h"
#include "nn/state_dict.h"

namespace frugal::train {

// Where a run stands between two optimizer steps.
struct TrainingPosition {
  std::int64_t epoch = 0;        // the epoch in progress, from 0
  std::int64_t batch = 0;        // loader batches of that epoch already trained on
  std::int64_t global_step = 0;  // optimizer steps since the start of training
  GeneratorState generator{};    // the default generator's state (dropout draws from it)
  // The epoch's running sums, so a resumed epoch reports the same loss and accuracy.
  double loss_sum = 0.0;         // sum over trained samples of their loss
  std::int64_t correct = 0;      // trained samples whose argmax was their label
  std::int64_t samples = 0;
};

struct Checkpoint {
  nn::StateDict model, optimizer, scaler, schedule;
  TrainingPosition position;
  std::string run_identity;  // run_identity_json (train/options.h)
};

// Atomic: on any error nothing is left under `path` and a previous file there is untouched.
void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);
// FileError if it cannot be read; ValueError naming `path` if it is not a frugal checkpoint (a plain
// state dict, say) or its metadata is damaged.
Checkpoint load_checkpoint(const std::string& path);
// Whether the safetensors file at `path` says it is a frugal checkpoint (reads only the header).
bool is_checkpoint(const std::string& path);

}  // namespace frugal::train
