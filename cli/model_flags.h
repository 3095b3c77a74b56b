// The flags that say which model a run trains and how it spends memory on it, shared by `frugal
// train` and `frugal plan` so that both read them alike and a plan is of the run the same flags train:
// --model, --width, --cifar-stem, --checkpoint-activations, --checkpoint-blocks and
// --(no-)inplace-activations.
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

  void add_to(CLI::App& command);
  // Into `o`; ValueError for a block selection that does not parse.
  void apply(train::TrainOptions& o) const;
};

}  // namespace frugal::cli
