// The memory planner: what a training run will hold in memory, predicted before it runs.
//
// It does not estimate. It builds the run's model and recipe exactly as `frugal train` does
// (train/recipe.h), but on the meta device (core/device.h: shapes and a caching allocator with fake
// addresses, no memory, no kernels), and runs the trainer's own step (train/step.h) there six times,
// the loader's batches made as the run holds them: the first step makes the optimizer's state, the
// second is what every later step allocates, and the rest let the reuse of freed blocks settle. The
// meta allocator records every allocation and free with its tag (core/caching_allocator.h:
// record_history); the plan is read off that record, so the allocator's rounding is in it too, and
// the record's requests, replayed on ever smaller simulated devices, give the device the run needs. What it cannot see: memory a
// kernel or library takes outside frugal's allocator (cuDNN's and cuBLAS's own workspaces on a GPU).
// What a plan costs grows with the model's layers, not with the batch, the images or the parameters'
// sizes: nothing on the meta device touches an element (tests/cpu/test_planner.cpp holds it there).
//
// Per layer (leaf modules, dotted names as in the state dict): bytes of parameters, gradients and
// optimizer state, the activation bytes it left alive at the end of the forward (what backward
// needs from it), and the most workspace it held at once. Per phase: what was allocated when it
// started and ended and the most at any moment in it.
// Under a budget (fit_budget): every way of keeping the same samples per optimizer step (the batch
// split into accumulated micro-batches, activation checkpointing of some or all blocks, bf16
// autocast), each planned, the ones that fit ranked cheapest first.
// Under a device limit (smallest_checkpoint_prefix): the fewest blocks to checkpoint, from the first,
// for a run to fit. After an out-of-memory (planned_fixes): each single change that needs a smaller
// device, allocator settings included.
// Not here: formatting (cli/plan.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "memory/alloc_trace.h"
#include "train/oom_explainer.h"
#include "train/options.h"

namespace frugal::train {

struct PlanShape {
  std::int64_t in_channels = 1;  // of the input images (Fashion-MNIST: 1)
  std::int64_t num_classes = 10;
};

struct LayerPlan {
  std::string name = {};  // "features.3.conv.1"
  std::string type = {};  // "BatchNorm2d"
  std::int64_t param_bytes = 0, grad_bytes = 0, optimizer_bytes = 0;  // on the device
  // Pinned host memory, with --offload optimizer only: the optimizer's state and a copy of each
  // parameter and of its gradient (nn/optimizer_offload.h); optimizer_bytes is then 0.
  std::int64_t host_bytes = 0;
  std::int64_t saved_bytes = 0;      // made by this layer's forward, still alive when the forward ends
  std::int64_t workspace_bytes = 0;  // the most workspace-tagged bytes alive during its forward calls
};

// The optimizer steps a plan runs. The first makes the optimizer's state and the second is what every
// later step looks like, as far as what is allocated goes; how the freed blocks are reused, and so
// what is reserved, settles over a few more (measured against whole epochs: docs/memory-guide.md).
inline constexpr int kPlannedSteps = 6;

// One phase over the planned steps. Allocated bytes (block sizes): at the phase's first start (in
// step 1, before the optimizer has state), its last end (in step kPlannedSteps), the most in between.
struct PhasePlan {
  std::string name = {};  // init, forward, backward, optimizer step
  std::int64_t start_bytes = 0, end_bytes = 0, peak_bytes = 0;
  std::int64_t peak_reserved_bytes = 0;
};

struct MemoryPlan {
  std::vector<LayerPlan> layers;
  std::vector<PhasePlan> phases;
  std::int64_t data_bytes = 0;         // the loader's batches alive at once (images and labels)
  // Pinned host memory at its most: the offloaded optimizer's (LayerPlan::host_bytes), which stays
  // for the whole run, plus the offloaded saved activations' at their most (the end of a forward).
  std::int64_t host_bytes = 0;
  std::int64_t activation_host_bytes = 0;  // --offload activations: that second part
  std::int64_t peak_bytes = 0;         // the most allocated at any moment: the figure to compare
  std::int64_t peak_reserved_bytes = 0;
  // The smallest device (a --memory-limit, in whole MiB) on which the planned steps run, fragmentation
  // included: their requests replayed through an allocator of the run's policy (FRUGAL_ALLOC_CONF) on
  // ever smaller simulated devices, each emptying its cache and retrying before it gives up, as the
  // run's does; plus loader_allowance for the loader's workers. The figure to size a device by.
  std::int64_t device_needed_bytes = 0;
  std::shared_ptr<const Trace> requests;  // the planned steps' requests, to replay under other policies
  std::string peak_phase;              // where the peak happened
  std::int64_t peak_layer_index = -1;  // the layer running at the peak (index into layers), -1 if none
  // Tagged bytes alive at the peak (requested sizes, by MemoryTag).
  std::vector<std::pair<std::string, std::int64_t>> peak_by_tag;
};

// The allocator policy of CachingOptions as a replay's options (no limit).
ReplayOptions replay_policy(const CachingOptions& options);
// The smallest device, in whole MiB, on which `requests` replay under `policy` without running out of
// memory: a binary search between the most they hold allocated at once and what they reserve
// unlimited, to a 64th of that range or 1 MiB, whichever is larger (so its cost stays the same for
// any sizes: one unlimited replay and at most seven capped ones). The answer is a size that was
// replayed and fitted. The search assumes that a larger device never fails where a smaller one fits;
// a caching allocator does not promise that (emptying its cache at a smaller limit can pack segments
// differently), so between the answer and the unlimited figure a size may exist that fails.
std::int64_t smallest_device(const Trace& requests, const ReplayOptions& policy);

// What device_needed_bytes adds for the loader's workers. On a CPU device a worker makes each batch's
// temporaries (a sample decoded, converted, padded, normalised: a few KiB each) from the same
// allocator as the step, at moments that depend on the threads' timing, so their small blocks end up
// among the step's and keep small segments from being reused. Measured on the CPU only: on a GPU a
// worker's batch comes from its side stream's pool (data/loader.h), which the plan, recording
// everything on one stream, does not model, and its temporaries stay in host memory. One small segment (kSmallBuffer,
// 2 MiB) per batch a worker may be making: measured on the default run, a whole epoch at the
// replayed figure fails at step 119 (8 MiB of split small blocks), and at the figure with this
// allowance completes (docs/memory-guide.md). Nothing without workers: then the batch is made
// in the step's own order, which the plan replays.
std::int64_t loader_allowance(int workers);

// The loader's batches that can be alive at once: each worker's prefetched batches plus the one
// being trained on (data/loader.h, Note [Bounded, ordered prefetching]).
std::int64_t loader_batches_alive(int workers);

// Plans `options` (model, its options, batch size, accumulation, optimizer, autocast, image size,
// workers) for inputs of `shape`. Other options (data path, epochs, device) are ignored: the plan is
// of one run's memory on any device. Throws what building or running the model throws (a ValueError
// for a batch of 1 under BatchNorm, a ShapeError for an image too small for the model).
MemoryPlan plan_memory(const TrainOptions& options, const PlanShape& shape = {});

// One way to run the same optimizer steps, and what it would need.
struct BudgetOption {
  std::int64_t batch_size = 0, accum = 1;  // batch_size x accum = the samples per optimizer step
  models::BlockSelection checkpoint_blocks = {};  // the blocks recomputed in backward (all, some, none)
  double recomputed = 0.0;  // the fraction of the model's blocks that is: the recompute cost's measure
  bool bf16 = false;
  nn::ActivationSaving saving = {};  // what the graph saves (nn/saved_activations.h)
  bool optimizer_in_backward = false;  // --optimizer-in-backward (one micro-batch per step only)
  OptimizerKind optimizer = OptimizerKind::adamw;  // for AdamW runs also adamw8bit and adafactor
  bool offload_optimizer = false;        // --offload optimizer: the optimizer's state in host memory
  bool offload_activations = false;      // --offload activations: saved feature maps in host memory
  int zero = 0;                          // with --ddp: the ZeRO stage (--zero 1|2)
  std::int64_t peak_bytes = 0;           // allocated at the peak
  std::int64_t device_needed_bytes = 0;  // the smallest device it runs on (MemoryPlan::device_needed_bytes)
  bool fits = false;                     // device_needed_bytes is within the budget
  std::string cost = {};  // what it costs against the configuration as given, in words
};

// Every combination of: the micro-batch (the step's samples split into 1, 2, 4, ... accumulated
// micro-batches, down to 2 samples each), the checkpointed blocks (as given; the first quarter, half
// and three quarters of the blocks, where the feature maps, and so the activations, are largest; all),
// autocast as given or bf16, and (with the blocks as given) what the graph saves: as given,
// BatchNorm from its output, and that with bit masks and bf16 compression; and, with one micro-batch
// per step (no f16 loss scaling, no DDP), the optimizer in backward; and for AdamW (with the blocks
// and saving as given) 8-bit moments and Adafactor's factored ones; and (with the blocks and saving
// as given) the optimizer's state offloaded to the host, and the saved activations offloaded there
// (uncompressed); and for a --ddp run of SGD or AdamW, the higher ZeRO stages; each planned. Sorted:
// those that fit first, cheapest first (no change, or the optimizer in backward, which costs nothing;
// then more micro-batches, which cost speed only;
// then recomputing, the fewer blocks the cheaper: all of them costs about one more forward, and
// BatchNorm from its output is priced as recomputing a third of the blocks (kRebuildCost in
// planner.cpp) and offloading the optimizer or the activations as recomputing all of them (kOffloadCost); then bf16 autocast, compression or another optimizer, which change the numbers), those that do not by
// how far over they are.
std::vector<BudgetOption> fit_budget(const TrainOptions& options, std::int64_t budget_bytes, const PlanShape& shape = {});

// The smallest k for which checkpointing blocks 1..k (and no others) fits `limit_bytes`, fitting
// meaning the predicted device_needed_bytes is within it; nullopt when not even every block does. A binary search over k: it takes
// checkpointing one more block never to need more (so for the models here; test_planner.cpp checks
// it on MobileNetV2).
std::optional<std::int64_t> smallest_checkpoint_prefix(const TrainOptions& options, std::int64_t limit_bytes,
                                                       const PlanShape& shape = {});

// The planner's fixes for a run that ran out of memory: one change at a time (half and a quarter of
// the batch with accumulation keeping the step's samples, checkpointing blocks 1..k, activation
// checkpointing of every block, bf16 autocast, the smaller optimizers, the optimizer's state on the
// host, the saved activations on the host, the optimizer in backward, the ways of saving less, and
// for a --ddp run the higher ZeRO stages), each planned, those predicted to need less listed
// largest saving first. k is the smallest that fits when the run had a --memory-limit, else half the
// blocks. Also the allocator settings that fight fragmentation (FRUGAL_ALLOC_CONF: expandable
// segments the other way, max_split), each predicted by replaying the planned run's requests under
// it. Empty when the failing configuration cannot be planned.
std::vector<MemoryFix> planned_fixes(const TrainOptions& failing, const PlanShape& shape);

}  // namespace frugal::train
