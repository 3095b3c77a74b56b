// `frugal eval` (see eval.h): the model from flags or the checkpoint, the weights into it, then
// train::evaluate on the test split.
#include "cli/eval.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/train_output.h"
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
  model_.add_to(*c, FlagsFor::eval);
  data_.add_to(*c, FlagsFor::eval);
  step_.add_to(*c, FlagsFor::eval);
  device_.add_to(*c);
  c->add_option("--json", json_, "Write accuracy, loss and per-class accuracy as JSON to this file")->check(not_empty());
}

int EvalCommand::run() const {
  try {
    const Device device = device_.resolve();
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
    const train::TrainOptions defaults;  // what train would have used where neither flag nor checkpoint says
    const std::string model_name = model_.model.value_or(t.model.value_or(defaults.model));
    const std::int64_t image_size = step_.image_size.value_or(t.image_size.value_or(defaults.image_size));
    const train::RunData inputs = train::open_run_data(data_.data, data_.test_data, image_size, false);
    check_output_paths({{"--json", json_}}, data_inputs(inputs.splits.sources, data_.test_data));  // the data's own files
    const std::string nonfinite = train::first_nonfinite(weights);
    FRUGAL_CHECK_VALUE(nonfinite.empty(), weights_, ": tensor '", printable(nonfinite),
                       "' holds a NaN or an infinity: a diverged run's weights, nothing to evaluate");
    FRUGAL_CHECK_VALUE(inputs.splits.test != nullptr, "no test split found for ",
                       data_.data.empty() ? "Debian's Fashion-MNIST" : data_.data, ": give --test-data");
    const std::int64_t classes = step_.num_classes.value_or(t.num_classes.value_or(inputs.splits.train->num_classes()));
    const auto model = models::make_model(
        model_name, {.num_classes = classes,
                     .in_channels = inputs.splits.train->sample_shape()[0],
                     .width_mult = model_.width ? model_.width : t.width,
                     .cifar_stem = model_.cifar_stem || t.cifar_stem});
    try {
      model->load_state_dict(weights);
    } catch (const Error& e) {
      FRUGAL_THROW(ValueError, weights_, ": does not fit ", model_name, ": ", e.message());
    }
    model->to(device);
    const std::int64_t batch_size = step_.batch_size.empty() ? StepFlags::kEvalBatchSize : step_.batch_size_number();
    const train::EvalResult result = train::evaluate(*model, inputs.splits.test, inputs.test_transforms, batch_size, device,
                                                     step_.workers.value_or(defaults.workers), classes);
    std::printf("%s on %s: test accuracy %.2f%%, loss %.4f (%lld images)\n", model_name.c_str(), device.str().c_str(),
                100.0 * result.accuracy, result.loss, static_cast<long long>(result.samples));
    if (!json_.empty()) write_json_file(json_, eval_json(result));
    return 0;
  } catch (const Error& e) {
    return report_error("eval", e);
  }
}

}  // namespace frugal::cli
