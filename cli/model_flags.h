// The flags that say which model a run trains and how it spends memory on it, shared by `frugal
// train` and `frugal plan` so that both read them alike and a plan is of the run the same flags train:
// --model, --width, --cifar-stem, --checkpoint-activations, --checkpoint-blocks,
// --(no-)inplace-activations, and what the graph saves: --bn-from-output, --bit-masks,
// --compress-activations (nn/saved_activations.h); and the data-parallel memory flags, DdpFlags: --bucket-cap,
// --bucket-views and --zero1 (how many ranks differs: `train --ddp` takes mpirun's, `plan --ddp N` N).
// Not here: the flags only one command has (data and recipe for train; --depth, --budget for plan).
#pragma once

#include <optional>
#include <string>

#include "train/options.h"

namespace CLI {
class App;
}

namespace frugal::cli {

struct ModelFlags {
  std::string model = "mobilenet_v2";
  std::optional<double> width;
  std::optional<std::string> checkpoint_blocks;
  bool cifar_stem = false, checkpoint_activations = false, inplace_activations = true;
  bool bn_from_output = false, bit_masks = false;
  std::string compress_activations = "none";

  void add_to(CLI::App& command);
  // Into `o`; ValueError for a block selection that does not parse.
  void apply(train::TrainOptions& o) const;
};

struct DdpFlags {
  std::string bucket_cap;
  bool bucket_views = false, zero1 = false;

  void add_to(CLI::App& command);
  bool any() const { return bucket_views || zero1 || !bucket_cap.empty(); }
  // Into `o` (which has ddp set); ValueError for a size that does not parse.
  void apply(train::TrainOptions& o) const;
};

}  // namespace frugal::cli
