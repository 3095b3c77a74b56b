// The flags more than one `frugal` command takes, each declared once here (name, help, default, range)
// and added by every command that takes it, so that `frugal plan` plans the run the same flags train
// and `frugal eval` reads them as train does:
//   ModelFlags (train, plan; eval: --model, --width, --cifar-stem): which model, and how it spends
//     memory: --checkpoint-activations, --checkpoint-blocks, --(no-)inplace-activations, and what the
//     graph saves: --bn-from-output, --bit-masks, --compress-activations (nn/saved_activations.h);
//   StepFlags (train, plan; eval: --batch-size, --workers, --image-size, --num-classes): what one
//     step is: --batch-size, --accum, --optimizer, --optimizer-in-backward, --momentum, --amp, --workers,
//     --image-size, --num-classes;
//   DdpFlags (train, plan): --bucket-cap, --bucket-views, --zero (how many ranks differs: `train --ddp`
//     takes mpirun's, `plan --ddp N` N);
//   DataFlags (train, eval): --data, --test-data;  DeviceFlag (train, eval): --device.
// A flag whose default or meaning differs between commands (eval's batch of 256, its model options
// from the checkpoint) takes its help from the FlagsFor it is added for, never a second declaration.
// Not here: the flags only one command has (the recipe for train; --depth, --budget for plan; --weights
// for eval), nor --json, which names a different document in each.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "train/options.h"

namespace CLI {
class App;
}

namespace frugal::cli {

// "0.9", "1e-05": a default number as the help shows it.
std::string default_number(double value);

// The command a group is added to: it picks the help (and the range check) true of that command.
enum class FlagsFor { train, plan, eval };

struct ModelFlags {
  std::optional<std::string> model;  // default: train::TrainOptions's (eval: the checkpoint's first)
  std::optional<double> width;
  std::optional<std::string> checkpoint_blocks;
  bool cifar_stem = false, checkpoint_activations = false, inplace_activations = true;
  bool bn_from_output = false, bit_masks = false;
  std::string compress_activations = "none";

  void add_to(CLI::App& command, FlagsFor flags_for);
  // Into `o`; ValueError for a block selection that does not parse.
  void apply(train::TrainOptions& o) const;
};

struct StepFlags {
  static constexpr std::int64_t kEvalBatchSize = 256;  // eval's default: no gradients, so larger batches fit
  std::string batch_size;  // as given ("" when not): train also takes "auto" (TrainCommand::choose_batch)
  std::optional<std::int64_t> accum, image_size, num_classes;
  std::optional<double> momentum;
  std::optional<int> workers;
  std::string optimizer, amp;
  bool optimizer_in_backward = false;
  std::vector<std::string> offload;  // --offload: "optimizer", "activations", or both

  void add_to(CLI::App& command, FlagsFor flags_for);
  bool batch_size_given() const { return !batch_size.empty() && batch_size != "auto"; }
  // The --batch-size number; ValueError naming the flag for one that is not auto or in range.
  std::int64_t batch_size_number() const;
  // Into `o`, each flag given (train leaves "auto" to TrainCommand::choose_batch); ValueError as above.
  void apply(train::TrainOptions& o) const;
};

struct DdpFlags {
  std::string bucket_cap;
  bool bucket_views = false;
  std::optional<int> zero;  // --zero: the ZeRO stage

  void add_to(CLI::App& command);
  bool any() const { return bucket_views || zero || !bucket_cap.empty(); }
  // Into `o` (which has ddp set); ValueError for a size that does not parse.
  void apply(train::TrainOptions& o) const;
};

struct DataFlags {
  std::string data, test_data;  // "": Debian's Fashion-MNIST; the test split found beside `data`

  void add_to(CLI::App& command, FlagsFor flags_for);
};

struct DeviceFlag {
  std::string device = "auto";

  void add_to(CLI::App& command);
  // auto: cuda:0 when usable, else the CPU; a named device that is not usable is an error (core/cuda_status.h).
  Device resolve() const;
};

}  // namespace frugal::cli
