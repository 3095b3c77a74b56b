// The training loop behind `frugal train`.
//
//   TrainOptions options;                      // train/options.h: defaults are the 1-epoch recipe
//   TrainResult result = train(options, hooks);
//
// One run: open the data (data/open_dataset.h), build the model (models/registry.h) and put it on
// the device, make the optimizer (weight decay on weights only) and the schedule (laid over all
// epochs, stepped per optimizer step), then per epoch: batches from a shuffling DataLoader, forward
// under autocast when asked, the loss scaled by each micro-batch's share of the optimizer step's
// samples (so --accum K gives the gradient of one batch K times as large), backward, the step; a
// test evaluation after each epoch. A checkpoint (train/checkpoint.h) is written at each epoch's
// end, every save_every steps, when stopping early (--steps, or hooks.should_stop after SIGINT), and
// at the end; resuming restores the model, optimizer, scaler, schedule, the default generator and
// the loader's position, so on the CPU a resumed run gives bit-identical losses and parameters.
// Memory: every block the run allocates records who made it (train/memory_context.h: the layer's
// dotted name and class, "loss", "backward", "optimizer step", "model construction"); from the second
// step on, the leak check compares what each step leaves allocated with the step before and reports
// the first growth (train/leak_check.h).
// Data parallelism (options.ddp, docs/distributed.md): this process is one of the ranks mpirun
// started. Each takes its DistributedSampler share of every step's samples, DistributedDataParallel
// (dist/ddp.h) averages the gradients in buckets while backward runs (no_sync for all micro-batches
// but the last), ZeRO-1 shards the optimizer; the ranks add their step totals and agree on stopping
// over MPI; rank 0 alone evaluates and writes checkpoints; the result gathers every rank's peaks.
// Errors escape as frugal exceptions: an OutOfMemoryError during the run as a TrainingOutOfMemoryError
// carrying the explanation of what filled the device (train/oom_explainer.h) when the device, real or
// simulated by memory_limit, cannot hold the run.
// Not here: the step itself (train/step.h); the optimizer, schedule and scaler (train/recipe.h); the
// ranks' collectives and agreements (train/ranks.h); the data and the test evaluation, also behind
// `frugal eval` (train/evaluation.h); the command line, the exit codes and what is printed
// (cli/train.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/allocator.h"
#include "train/evaluation.h"
#include "data/dataset.h"
#include "data/open_dataset.h"
#include "data/transforms.h"
#include "dist/ddp.h"
#include "models/registry.h"
#include "nn/module.h"
#include "nn/optim.h"
#include "train/leak_check.h"
#include "train/oom_explainer.h"
#include "train/options.h"

namespace frugal::train {

// The state after one optimizer step, for a progress display.
struct StepInfo {
  std::int64_t epoch = 0, epochs = 0;                  // epoch from 0
  std::int64_t step_in_epoch = 0, steps_in_epoch = 0;  // optimizer steps, step_in_epoch from 1
  std::int64_t global_step = 0, total_steps = 0;
  double loss = 0.0;             // the epoch's mean training loss so far
  double accuracy = 0.0;         // the epoch's training accuracy so far
  double images_per_sec = 0.0;   // this epoch's trained samples over its elapsed time
  double epoch_seconds = 0.0;    // elapsed in this epoch (since the run started or resumed it)
  double lr = 0.0;
  std::size_t allocated = 0, reserved = 0, peak_allocated = 0;  // the device's caching allocator
  // With --amp f16 (a GradScaler): the loss scale now, and the optimizer steps this run skipped
  // because a gradient overflowed. loss_scale is 0 without a scaler.
  double loss_scale = 0.0;
  std::int64_t skipped_steps = 0;
};

// A run whose loss stopped being a finite number (an lr far too large, an overflow): thrown after
// that step unless TrainOptions::allow_nonfinite, before any checkpoint could be written from the
// diverged weights. The message names the step and the last good checkpoint.
struct TrainingDivergedError : Error {
  using Error::Error;
};

// The ranks of a --ddp run were started with different flags: every rank throws it, with the same
// message, before any collective that depends on the flags, so each can end on its own (exit 2).
struct RanksDisagreeError : ValueError {
  using ValueError::ValueError;
};

struct EpochInfo {
  StepInfo last;                      // the epoch's last step
  std::optional<EvalResult> test;     // when there is a test split
};

// The stretches of a run that memory reports and the run report tell apart. A step's forward
// includes taking its batch from the loader; with --accum each micro-batch has its own forward and
// backward.
enum class Phase : std::uint8_t { setup, epoch, forward, backward, optimizer, evaluation };
inline constexpr int kNumPhases = 6;
std::string_view phase_name(Phase phase);  // "setup", "epoch", "forward", "backward", "optimizer step", "evaluation"

struct PhaseEvent {
  Phase phase;
  bool begin = true;                 // false: the phase has just ended
  std::int64_t epoch = 0;            // from 0
  std::int64_t global_step = 0;      // optimizer steps taken before this one
  const nn::Module* model = nullptr; // the model being trained; nullptr during setup
};

struct TrainHooks {
  std::function<void(const std::string&)> on_start;  // one line: model, parameters, data, device
  std::function<void(const StepInfo&)> on_step;
  std::function<void(const EpochInfo&)> on_epoch_end;
  std::function<void(const std::string&)> on_message;  // "checkpoint saved to ...", "resumed at step ..."
  std::function<bool()> should_stop;                   // checked after every optimizer step (SIGINT)
  std::function<void(const PhaseEvent&)> on_phase;     // each phase's begin and end, on the training thread
  std::function<void(const std::string&)> on_warning;  // a problem the run survives: the leak report
  FixPlanner plan_fixes;  // predicted fixes for an out-of-memory's explanation (train/oom_explainer.h)
};

// One rank's memory and communication in a --ddp run.
struct RankReport {
  int rank = 0;
  std::size_t peak_allocated_bytes = 0, peak_reserved_bytes = 0;
  std::array<std::size_t, kNumMemoryTags> peak_bytes_by_tag{};
  double communication_wait_seconds = 0.0;  // blocked waiting for gradient collectives to finish
  double communication_seconds = 0.0;       // gradient collectives in flight, hidden behind backward or not
};

struct TrainResult {
  std::string model;
  std::int64_t parameters = 0;
  std::string device;
  std::int64_t batch_size = 0, accum = 1;  // samples per micro-batch, micro-batches per optimizer step
  std::int64_t steps = 0;   // optimizer steps trained, in total since the start (resumed runs count all)
  std::int64_t steps_taken = 0;  // optimizer steps this run took (a resumed run: since it resumed)
  std::int64_t epochs = 0;  // epochs completed
  double images_per_sec = 0.0;
  // The pinned host allocator's peak of requested bytes (as tags count them): the offloaded optimizer's
  // state and copies, the offloaded saved activations, and the loader's staging buffers on a GPU; 0
  // when none was used.
  std::size_t peak_pinned_host_bytes = 0;
  // The mean training loss of the samples this run trained in its last epoch (those of a resumed
  // epoch before the resume are not this run's); NaN when it took no step.
  double final_loss = 0.0;
  std::optional<double> loss_scale;  // with a GradScaler (--amp f16): the scale at the end
  std::int64_t skipped_steps = 0;    // optimizer steps the GradScaler skipped (inf/NaN gradients)
  std::optional<EvalResult> test;
  std::size_t peak_allocated_bytes = 0, peak_reserved_bytes = 0;
  std::array<std::size_t, kNumMemoryTags> peak_bytes_by_tag{};
  double wall_seconds = 0.0;
  std::uint64_t seed = 0;
  bool stopped_early = false;  // --steps or should_stop before the last epoch's end
  bool interrupted = false;    // should_stop said so
  bool training_done = false;  // every step of the run was taken (--steps, or the last epoch's end)
  std::string checkpoint;      // the last checkpoint written, "" if none
  std::optional<LeakReport> leak;  // when memory grew from one step's end to the next (options.leak_check)
  int ranks = 1;                   // processes that trained together (--ddp)
  bool root = true;                // this process is rank 0 (or the only one): the one that reports
  std::vector<RankReport> per_rank;  // with --ddp: every rank's, in rank order
};

// `opened`: the run's splits when the caller has opened them already (run_shape's, train/batch_finder.h,
// so that `frugal train` opens its data once); otherwise options.data is opened here.
TrainResult train(const TrainOptions& options, const TrainHooks& hooks = {},
                  std::optional<data::DatasetSplits> opened = std::nullopt);

}  // namespace frugal::train
