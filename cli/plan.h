// `frugal plan`: the memory a training run will need, predicted before it runs, per phase and per
// layer (train/planner.h runs the model on the meta device: shapes only, no data, no memory).
//   frugal plan                                        # MobileNetV2, batch 64 of 1x32x32, AdamW
//   frugal plan --model resnet18 --batch-size 128 --amp bf16 --checkpoint-activations --json plan.json
//   frugal plan --checkpoint-blocks 1-8 --budget 64MiB     # blocks as models/block_selection.h numbers them
//   frugal plan --ddp 4 --zero 2 --batch-size 16           # one of 4 data-parallel ranks
// The flags that shape memory are `frugal train`'s, with the same defaults; --in-channels and
// --num-classes stand in for the data (default Fashion-MNIST's 1 and 10). --depth groups the layer
// table by the first N parts of the names (default 2: "features.3"; 0 lists every layer).
// --budget SIZE also plans every way of running the same samples per step (accumulated micro-batches,
// checkpointing the first quarter, half, three quarters or all of the blocks, bf16) and lists those
// that fit, cheapest first (fewer blocks recomputed is cheaper), and why the rest do not.
// --ddp N plans one rank of `mpirun -np N frugal train --ddp`: its batch, the gradient buckets
// (--bucket-cap, --bucket-views) and with --zero 1 its 1/N of the optimizer state (--zero 2: and of the gradients).
// Exit codes: 0; 1 a runtime failure; 2 a bad flag, one line naming it.
// Not here: the planner (train/planner.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cli/shared_flags.h"
#include "cli/subcommand.h"

namespace frugal::cli {

class PlanCommand final : public Subcommand {
 public:
  explicit PlanCommand(CLI::App& app);
  int run() const override;

 private:
  ModelFlags model_;  // --model, --width, --cifar-stem, --checkpoint-activations, --checkpoint-blocks, --inplace-activations
  StepFlags step_;    // --batch-size, --accum, --optimizer, --momentum, --amp, --workers, --image-size, --num-classes
  std::string json_, budget_;
  std::int64_t in_channels_ = 1;
  std::optional<int> ddp_;
  DdpFlags ddp_flags_;  // --bucket-cap, --bucket-views, --zero
  int depth_ = 2;
};

}  // namespace frugal::cli
