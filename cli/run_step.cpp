// `frugal run-step` (see run_step.h): options to a model, the weights file into it, the input file
// checked against it, one step, the results into the output file. Every check happens before the
// step runs, and the output is written atomically, so a failure leaves no output behind.
#include "cli/run_step.h"

#include <CLI/CLI.hpp>
#include <iostream>

#include "core/cuda_status.h"
#include "core/error.h"
#include "core/output_paths.h"
#include "core/mapped_file.h"
#include "models/registry.h"
#include "train/run_step.h"
#include "nn/safetensors.h"

namespace frugal::cli {

namespace {

// A ValueError whose message starts with the file's name (the library's own messages name what is
// wrong but not always which file it came from).
template <typename Fn>
auto naming_file(const std::string& path, Fn&& fn) {
  try {
    return fn();
  } catch (const ValueError& e) {
    const std::string& message = e.message();
    if (message.rfind(path + ":", 0) == 0) throw;
    FRUGAL_THROW(ValueError, path, ": ", message);
  }
}

const Tensor& find_tensor(const nn::SafetensorsFile& file, const std::string& path, const std::string& name) {
  for (const auto& [key, tensor] : file.tensors)
    if (key == name) return tensor;
  FRUGAL_THROW(ValueError, path, ": no tensor '", name, "' (an input file holds x, F32 [N, C, H, W], and y, I64 [N])");
}

struct Batch {
  Tensor x, y;
};

Batch read_batch(const std::string& path, std::int64_t in_channels, std::int64_t classes) {
  const nn::SafetensorsFile file = nn::read_safetensors(path);
  for (const auto& [key, tensor] : file.tensors)
    FRUGAL_CHECK_VALUE(key == "x" || key == "y", path, ": unexpected tensor '", key, "' (an input file holds x and y only)");
  Batch batch{find_tensor(file, path, "x"), find_tensor(file, path, "y")};
  const Tensor &x = batch.x, &y = batch.y;
  FRUGAL_CHECK_VALUE(x.dtype() == DType::f32 && x.dim() == 4 && x.size(1) == in_channels && x.size(0) > 0, path,
                     ": tensor 'x' must be F32 [N, ", in_channels, ", H, W] with N > 0, got ", dtype_name(x.dtype()), " ",
                     shape_str(x.shape()));
  FRUGAL_CHECK_VALUE(y.dtype() == DType::i64 && y.dim() == 1 && y.size(0) == x.size(0), path,
                     ": tensor 'y' must be I64 [", x.size(0), "] (one label per image of x), got ", dtype_name(y.dtype()),
                     " ", shape_str(y.shape()));
  const auto labels = y.to_vector<std::int64_t>();
  for (std::size_t i = 0; i < labels.size(); ++i)
    FRUGAL_CHECK_VALUE(labels[i] >= 0 && labels[i] < classes, path, ": tensor 'y' element ", i, " is ", labels[i],
                       ", outside [0, ", classes, ")");
  return batch;
}

}  // namespace

RunStepCommand::RunStepCommand(CLI::App& app)
    : Subcommand(app.add_subcommand("run-step", "One eval or training step of a model on one batch, all results saved")) {
  command_->add_option("--model", model_, "Model: " + models::model_names())->required()->check(not_empty());
  command_->add_option("--num-classes", num_classes_, "Classes of the classifier (the model's default if not given)")
      ->check(between(1, 1'000'000));
  command_->add_option("--in-channels", in_channels_, "Input channels (the model's default if not given)")
      ->check(between(1, 4096));
  command_->add_option("--width", width_, "MobileNetV2's width multiplier");
  command_->add_option("--dropout", dropout_, "MobileNetV2's classifier dropout probability");
  command_->add_flag("--cifar-stem", cifar_stem_, "MobileNetV2's stem for 32x32 inputs (stride 1 twice)");
  command_->add_option("--weights", weights_, "safetensors file with the model's state dict")->required()->check(not_empty());
  command_->add_option("--input", input_, "safetensors file with x (F32 NCHW) and y (I64 labels)")->required()->check(not_empty());
  command_->add_option("--mode", mode_, "eval: forward only; train: forward and backward, no update")
      ->check(CLI::IsMember({"eval", "train"}));
  command_->add_option("--out", out_, "safetensors file to write the results to")->required()->check(not_empty());
  command_->add_option("--dtype", dtype_, "Precision the model runs in (f32 or f64)")->check(CLI::IsMember({"f32", "f64"}));
  command_->add_option("--device", device_, "cpu or cuda:N");
}

int RunStepCommand::run() const {
  try {
    const Device device = Device::parse(device_);
    check_device_usable(device);
    check_output_paths({{"--out", out_}}, {{"--weights", weights_}, {"--input", input_}});
    const models::ModelOptions options{.num_classes = num_classes_, .in_channels = in_channels_, .width_mult = width_,
                                       .dropout = dropout_, .cifar_stem = cifar_stem_};
    const auto model = models::make_model(model_, options);
    naming_file(weights_, [&] { return model->load_state_dict(nn::read_safetensors(weights_).tensors); });
    const DType dtype = parse_dtype(dtype_);
    model->to(dtype);
    model->to(device);
    const models::ModelInfo& info = models::model_info(model_);
    const Batch batch = naming_file(input_, [&] {
      return read_batch(input_, in_channels_.value_or(info.default_in_channels), num_classes_.value_or(info.default_num_classes));
    });
    const auto mode = mode_ == "train" ? train::StepMode::train : train::StepMode::eval;
    const nn::StateDict results = train::run_step(*model, batch.x, batch.y, mode, dtype, device);
    nn::write_safetensors(out_, results, {{"model", model_}, {"mode", mode_}, {"dtype", dtype_}});
    return 0;
  } catch (const Error& e) {
    return report_error("run-step", e);
  }
}

}  // namespace frugal::cli
