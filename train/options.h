// What one training run is: the model, the data, the optimisation recipe and the memory mitigations,
// as `frugal train`'s flags set them. Plain data with the defaults `frugal train` uses, plus its
// names for the choices and the conversion to and from the JSON a checkpoint carries, so a resumed
// run can check that it continues the same run.
// Not here: parsing the command line (cli/train.cpp), running (train/trainer.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "core/device.h"
#include "core/dtype.h"
#include "models/block_selection.h"
#include "nn/saved_activations.h"

namespace frugal::train {

enum class OptimizerKind { sgd, adamw, adamw8bit, adafactor };
enum class ScheduleKind { constant, cosine, onecycle };

OptimizerKind parse_optimizer(const std::string& name);  // "sgd" | "adamw" | "adamw8bit" | "adafactor"; ValueError otherwise
ScheduleKind parse_schedule(const std::string& name);    // "constant" | "cosine" | "onecycle"
std::string optimizer_name(OptimizerKind kind);
std::string schedule_name(ScheduleKind kind);

// The defaults are the recipe chosen by experiment for one epoch of Fashion-MNIST on 2 CPU cores
// (README.md, "Training"): AdamW, cosine decay per step after a short linear warm-up, weight decay
// on weights only, a little label smoothing.
struct TrainOptions {
  // The model (models/registry.h).
  std::string model = "mobilenet_v2";
  std::optional<double> width;               // MobileNetV2's width multiplier
  std::optional<double> dropout;             // MobileNetV2's classifier dropout (torchvision: 0.2)
  bool cifar_stem = false;                   // MobileNetV2's stride-1 stem for 32x32 inputs
  std::optional<std::int64_t> num_classes;   // default: the dataset's
  bool checkpoint_activations = false;       // recompute each block's activations in backward
  models::BlockSelection checkpoint_blocks = {};  // or only these blocks' (models/block_selection.h numbering)
  bool inplace_activations = true;           // ReLU/ReLU6 overwrite their input (torchvision's choice)
  nn::ActivationSaving saving = {};          // below the standard minimum: --bn-from-output, --bit-masks,
                                             // --compress-activations (nn/saved_activations.h)
  bool offload_activations = false;          // --offload activations: saved feature maps in pinned host
                                             // memory from forward to backward (nn/activation_offload.h)

  // The data (data/open_dataset.h).
  std::string data;                          // "" = Debian's Fashion-MNIST
  std::string test_data;                     // "" = the test split found beside `data`
  std::int64_t image_size = 32;              // Fashion-MNIST's 28x28 padded to 32x32
  bool augment = false;                      // random crop with padding, horizontal flip
  int workers = 1;                           // loader threads beside the training thread
  bool evaluate = true;                      // test accuracy after each epoch and at the end

  // The recipe.
  std::int64_t epochs = 1;
  std::optional<std::int64_t> steps;         // stop after this global step; the schedule still spans `epochs`
  std::int64_t batch_size = 64;
  std::int64_t accum = 1;                    // micro-batches of batch_size per optimizer step
  OptimizerKind optimizer = OptimizerKind::adamw;
  bool optimizer_in_backward = false;        // each update inside backward, its gradient freed at once
                                             // (nn/optimizer_in_backward.h): the same numbers
  bool offload_optimizer = false;            // --offload optimizer: state and update in pinned host memory
                                             // (nn/optimizer_offload.h): no optimizer state on the device
  double lr = 1e-2;
  double momentum = 0.9;                     // SGD's momentum; AdamW's beta1
  double weight_decay = 0.05;                // on weights only: biases and norm parameters are not decayed
  ScheduleKind schedule = ScheduleKind::cosine;
  double warmup = 0.01;                      // fraction of all optimizer steps spent warming up linearly
  double label_smoothing = 0.0;
  std::uint64_t seed = 0;

  // Where and how.
  Device device = Device::cpu();
  std::optional<std::size_t> memory_limit;   // bytes: a simulated device of that size
  std::optional<DType> amp;                  // f16 or bf16 autocast
  std::string save;                          // checkpoint file, written at each epoch's end, on SIGINT, at the end
  std::int64_t save_every = 0;               // also every this many optimizer steps (0: not)
  std::string resume;                        // checkpoint to continue from
  std::string json;                          // where the run's summary goes as JSON
  bool leak_check = true;                    // memory at each step's end against the step before (train/leak_check.h)
  bool allow_nonfinite = false;              // train on after a NaN or infinite loss (and save such weights)

  // Data parallelism (dist/, docs/distributed.md): this process is one of `ranks` that mpirun
  // started, each training on its share of every step's samples. batch_size is per rank (as in
  // PyTorch's DDP), so an optimizer step sees ranks x batch_size x accum samples.
  bool ddp = false;                          // --ddp: MPI between CPU ranks, NCCL between GPUs
  int ranks = 1;                             // the world's size (frugal plan --ddp N sets it without ranks)
  std::size_t bucket_cap_bytes = std::size_t{25} << 20;  // PyTorch's bucket_cap_mb default
  bool bucket_views = false;                 // gradients live in the buckets: no second copy
  int zero = 0;                              // --zero: ZeRO stage, 1 the optimizer state sharded across the
                                             // ranks, 2 the gradients too, 3 the parameters too (dist/ddp.h)
  double ddp_timeout = 300.0;                // seconds a collective may take before every rank stops
};

// ValueError naming the first option out of range (a batch size of 0, an lr of -1, a checkpoint block
// the model does not have, --checkpoint-activations with a --checkpoint-blocks other than "all", ...).
void validate(const TrainOptions& options);

// The options that define the run's arithmetic (model, data layout, recipe, seed), as one JSON text:
// what a checkpoint stores, and what a resumed run must match for its numbers to continue the same run.
// Memory options that leave every number as it is are not in it, so a run may resume with other ones:
// which blocks are checkpointed (recomputation replays the same kernels on the same inputs and dropout
// masks: bit-identical gradients, tests/cpu/test_model_memory_options.cpp) and in-place activations.
std::string run_identity_json(const TrainOptions& options);
// The flag(s) that set a run_identity_json key, for a person: "--lr" for lr, "--ddp (ranks)" for
// the ranks mpirun started, "--bn-from-output, --bit-masks, --compress-activations" for the saving.
std::string identity_key_flags(const std::string& key);
// The first difference between two run_identity_json texts, as "--lr 0.001 but the checkpoint has
// 0.002" (`them` names the other side: "rank 0"), in the flags that set it ("the checkpoint has --ddp
// on 2 ranks, this run has none"); "" when they agree.
std::string identity_difference(const std::string& ours, const std::string& theirs,
                                const std::string& them = "the checkpoint");

}  // namespace frugal::train
