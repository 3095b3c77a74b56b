// `frugal run-step`: one evaluation or training step of a model from the registry on one batch, with
// weights and batch read from safetensors files and every result written to one, so that frugal can be
// compared value for value with another implementation (tests/fixtures/models holds torchvision's).
//   frugal run-step --model mobilenet_v2 --num-classes 10 --in-channels 1 --weights W.safetensors
//                   --input X.safetensors --mode train --out OUT.safetensors [--dtype f64] [--device cuda:0]
// The input file holds x (F32, [N, C, H, W]) and y (I64 [N], labels in [0, classes)); the weights file
// a state dict with the model's names (strict: every name, nothing else, every shape). The output holds
// what train/run_step.h names: logits and loss, and in training grad.<name> and state.<name>, in the
// dtype the model ran in (--dtype, f32 by default), with __metadata__ saying model, mode and dtype.
// Not here: the step itself (train/run_step.h), the file format (nn/safetensors.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cli/subcommand.h"

namespace frugal::cli {

class RunStepCommand final : public Subcommand {
 public:
  explicit RunStepCommand(CLI::App& app);  // adds the subcommand and its options to `app`
  // Exit codes: 0 written; 1 a runtime failure (out of memory, the output could not be written);
  // 2 bad input: one line "frugal run-step: FILE: ..." naming the file and the tensor.
  int run() const override;

 private:
  std::string model_, weights_, input_, out_, mode_ = "eval", dtype_ = "f32", device_ = "cpu";
  std::optional<std::int64_t> num_classes_, in_channels_;
  std::optional<double> width_, dropout_;
  bool cifar_stem_ = false;
};

}  // namespace frugal::cli
