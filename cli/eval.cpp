// `frugal eval` (see eval.h): the model from flags or the checkpoint, the weights into it, then
// train::evaluate on the test split.
#include "cli/eval.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/train_output.h"
#include "core/cuda_status.h"
#include "core/error.h"
#include "core/output_paths.h"
#include "core/mapped_file.h"
#include "models/registry.h"
#include "nn/safetensors.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace frugal::cli {

namespace {

// The model options a checkpoint's run was trained with (train/options.h run_identity_json).
struct TrainedWith {
  std::optional<std::string> model;
  std::optional<double> width;
  std::optional<std::int64_t> num_classes, image_size;
  bool cifar_stem = false;
};

TrainedWith trained_with(const std::string& run_identity) {
  const auto j = nlohmann::json::parse(run_identity, nullptr, /*allow_exceptions=*/false);
  TrainedWith t;
  if (!j.is_object()) return t;
  if (j.contains("model") && j["model"].is_string()) t.model = j["model"].get<std::string>();
  if (j.contains("width") && j["width"].is_number()) t.width = j["width"].get<double>();
  if (j.contains("num-classes") && j["num-classes"].is_number_integer()) t.num_classes = j["num-classes"].get<std::int64_t>();
  if (j.contains("image-size") && j["image-size"].is_number_integer()) t.image_size = j["image-size"].get<std::int64_t>();
  if (j.contains("cifar-stem") && j["cifar-stem"].is_boolean()) t.cifar_stem = j["cifar-stem"].get<bool>();
  return t;
}

}  // namespace

EvalCommand::EvalCommand(CLI::App& app)
    : Subcommand(app.add_subcommand("eval", "Test accuracy and loss of trained weights (per class with --json)")) {
  CLI::App* c = command_;
  c->add_option("--weights", weights_, "A checkpoint of frugal train, or a state dict (safetensors)")
      ->required()
      ->check(not_empty());
  c->add_option("--model", model_, "Model: " + models::model_names() + " (default: the checkpoint's, else mobilenet_v2)");
  c->add_option("--width", width_, "MobileNetV2's width multiplier");
  c->add_flag("--cifar-stem", cifar_stem_, "MobileNetV2's stem for 32x32 inputs");
  c->add_option("--num-classes", num_classes_, "Classes of the classifier (default: the dataset's)")->check(between(2, 1'000'000));
  c->add_option("--data", data_, "Data whose test split is evaluated (default: Debian's Fashion-MNIST)");
  c->add_option("--test-data", test_data_, "The test split itself");
  c->add_option("--image-size", image_size_, "Side of the square images (default: the checkpoint's, else 32)")
      ->check(between(8, 4096));
  c->add_option("--batch-size", batch_size_, "Images per forward (default 256)")->check(between(1, 1 << 20));
  c->add_option("--workers", workers_, "Loader threads (default 1)")->check(between(0, 64));
  c->add_option("--device", device_, "cpu, cuda or cuda:N (default: cuda:0 when usable, else cpu)");
  c->add_option("--json", json_, "Write accuracy, loss and per-class accuracy as JSON to this file")->check(not_empty());
}

int EvalCommand::run() const {
  try {
    const Device device = device_ == "auto" ? (cuda_available() ? Device::cuda(0) : Device::cpu()) : Device::parse(device_);
    check_device_usable(device);
    check_output_paths({{"--json", json_}}, {{"--weights", weights_}});  // before reading anything
    const bool checkpoint = train::is_checkpoint(weights_);
    nn::StateDict weights;
    TrainedWith t;
    if (checkpoint) {
      train::Checkpoint c = train::load_checkpoint(weights_);
      weights = std::move(c.model);
      t = trained_with(c.run_identity);
    } else {
      weights = nn::read_safetensors(weights_).tensors;
    }
    const std::string model_name = model_.value_or(t.model.value_or("mobilenet_v2"));
    const std::int64_t image_size = image_size_.value_or(t.image_size.value_or(32));
    const train::RunData inputs = train::open_run_data(data_, test_data_, image_size, false);
    check_output_paths({{"--json", json_}}, data_inputs(inputs.splits.sources, test_data_));  // the data's own files
    const std::string nonfinite = train::first_nonfinite(weights);
    FRUGAL_CHECK_VALUE(nonfinite.empty(), weights_, ": tensor '", printable(nonfinite),
                       "' holds a NaN or an infinity: a diverged run's weights, nothing to evaluate");
    FRUGAL_CHECK_VALUE(inputs.splits.test != nullptr, "no test split found for ",
                       data_.empty() ? "Debian's Fashion-MNIST" : data_, ": give --test-data");
    const std::int64_t classes = num_classes_.value_or(t.num_classes.value_or(inputs.splits.train->num_classes()));
    const auto model = models::make_model(
        model_name, {.num_classes = classes,
                     .in_channels = inputs.splits.train->sample_shape()[0],
                     .width_mult = width_ ? width_ : t.width,
                     .cifar_stem = cifar_stem_ || t.cifar_stem});
    try {
      model->load_state_dict(weights);
    } catch (const Error& e) {
      FRUGAL_THROW(ValueError, weights_, ": does not fit ", model_name, ": ", e.message());
    }
    model->to(device);
    const train::EvalResult result =
        train::evaluate(*model, inputs.splits.test, inputs.test_transforms, batch_size_, device, workers_, classes);
    std::printf("%s on %s: test accuracy %.2f%%, loss %.4f (%lld images)\n", model_name.c_str(), device.str().c_str(),
                100.0 * result.accuracy, result.loss, static_cast<long long>(result.samples));
    if (!json_.empty()) write_json_file(json_, eval_json(result));
    return 0;
  } catch (const Error& e) {
    return report_error("eval", e);
  }
}

}  // namespace frugal::cli
