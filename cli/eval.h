// `frugal eval`: test accuracy and loss of trained weights, per class with --json.
//   frugal eval --weights run.safetensors                 # a checkpoint: its model options are used
//   frugal eval --model cnn --weights cnn.safetensors --data /path/to/idx-folder --json eval.json
// --weights is a checkpoint of `frugal train --save` (the model part is used, and the model's
// options come from the checkpoint unless given) or a plain state dict (safetensors) of the model
// the flags describe. The test split is the one found beside --data (default: Debian's
// Fashion-MNIST) or --test-data; inputs are normalised with the training split's statistics, as in
// training.
// Exit codes: 0; 1 a runtime failure; 2 a bad flag, file or mismatch of weights and model, one line.
// Not here: the evaluation loop (train/trainer.h evaluate).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cli/shared_flags.h"
#include "cli/subcommand.h"

namespace frugal::cli {

class EvalCommand final : public Subcommand {
 public:
  explicit EvalCommand(CLI::App& app);
  int run() const override;

 private:
  std::string weights_, json_;
  ModelFlags model_;  // --model, --width, --cifar-stem: each the checkpoint's unless given
  DataFlags data_;    // --data, --test-data
  StepFlags step_;    // --batch-size, --workers, --image-size, --num-classes
  DeviceFlag device_;
};

}  // namespace frugal::cli
