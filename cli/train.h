// `frugal train`: trains a model from the registry on a dataset, showing progress and memory as it
// goes, and ends with test accuracy, speed and peak memory by tag (train/trainer.h does the work).
//   frugal train                                  # MobileNetV2, one epoch of Fashion-MNIST, the default recipe
//   frugal train --epochs 15 --cifar-stem --augment --save run.safetensors --json run.json
//   frugal train --resume run.safetensors --steps 2000
//   frugal train --steps 3 --memory-timeline step.html --memory-report --report run.md
//   frugal train --batch-size auto --global-batch 256 --memory-limit 512MiB
//   mpirun -np 2 frugal train --ddp --model cnn --batch-size 32   # data parallel: 32 per rank
// With --ddp, rank 0 alone prints progress, writes checkpoints, JSON and memory files, and ends with
// every rank's peak memory and communication time; the other ranks print only their errors. An
// error on one rank (a dead peer past --ddp-timeout included) ends every rank (MPI_Abort).
// Output: on a terminal a progress line per epoch redrawn in place; otherwise plain lines. The leak
// check's report, when memory grows from one step to the next, goes to stderr (--no-leak-check: off).
// Exit codes: 0 done (or stopped by --steps); 1 a runtime failure; 2 a bad flag or bad input, one
// line naming it; 3 out of memory, with the allocator's explanation and what filled the device
// (train/oom_explainer.h: the ledger by tag, the largest tensors and who made them, fixes), the
// last checkpoint intact;
// 128 + the signal when SIGINT, SIGTERM, SIGHUP or SIGQUIT stopped it at a step boundary (130 for
// Ctrl-C), after saving a checkpoint when --save was given (cli/interrupt.h).
// Not here: the loop (train/trainer.h), the display (train/progress.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cli/shared_flags.h"
#include "cli/subcommand.h"
#include "cli/train_memory.h"
#include "train/batch_finder.h"

namespace frugal::cli {

class TrainCommand final : public Subcommand {
 public:
  explicit TrainCommand(CLI::App& app);
  int run() const override;

 private:
  train::TrainOptions options_from_flags() const;  // ValueError naming the first bad flag
  void apply_ddp_flags(train::TrainOptions& o) const;
  void choose_batch(train::TrainOptions& o, const train::RunShape& shape, std::optional<train::BatchChoice>& choice) const;

  std::string schedule_, memory_limit_, save_, resume_, json_;
  std::optional<double> dropout_, lr_, wd_, warmup_, label_smoothing_;
  std::optional<std::int64_t> epochs_, steps_, save_every_, global_batch_;
  std::optional<std::uint64_t> seed_;
  MemoryFlags memory_;  // --memory-timeline, --chrome-trace, --memory-report, --report
  ModelFlags model_;    // --model, --width, --cifar-stem, --checkpoint-activations, --checkpoint-blocks, --inplace-activations
  StepFlags step_;      // --batch-size, --accum, --optimizer, --momentum, --amp, --workers, --image-size, --num-classes
  DataFlags data_;      // --data, --test-data
  DeviceFlag device_;   // --device
  bool augment_ = false, no_eval_ = false;
  bool ddp_ = false;    // data parallelism (dist/)
  DdpFlags ddp_flags_;  // --bucket-cap, --bucket-views, --zero
  std::optional<double> ddp_timeout_;
  bool no_leak_check_ = false;
  bool allow_nonfinite_ = false;
  bool no_plan_check_ = false;
};

}  // namespace frugal::cli
