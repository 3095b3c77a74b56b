// Models by name, so the CLI, the benchmarks and the samples build a model one way:
//   make_model("mobilenet_v2", {.num_classes = 10, .in_channels = 1})
// Names: mobilenet_v2, resnet18, resnet50, cnn (models/*.h say what each is). An option left unset
// takes the model's own default (1000 classes and 3 channels for the ImageNet models, 10 and 1 for
// the small CNN); an option the model does not have (a width for ResNet) is a ValueError rather than
// silently ignored, and so is an unknown name (the message lists the known ones).
// Not here: the models themselves, loading weights (nn/module.h load_state_dict, nn/safetensors.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/random.h"
#include "models/block_selection.h"
#include "nn/module.h"

namespace frugal::models {

struct ModelOptions {
  std::optional<std::int64_t> num_classes = std::nullopt;
  std::optional<std::int64_t> in_channels = std::nullopt;
  std::optional<double> width_mult = std::nullopt;        // mobilenet_v2
  std::optional<double> dropout = std::nullopt;           // mobilenet_v2
  bool cifar_stem = false;                 // mobilenet_v2
  bool zero_init_residual = false;         // resnet18, resnet50
  // Memory, every model: run the repeated blocks through nn::checkpoint (each keeps only its input and
  // runs again in backward): all of them, or the chosen checkpoint_blocks (numbered as block_names
  // lists them; a block outside the model's range is a ValueError); and the ReLU/ReLU6s in place as
  // torchvision (false: out of place, to measure what that saves). None changes a parameter's name
  // or shape, nor a result.
  bool checkpoint_activations = false;
  BlockSelection checkpoint_blocks = {};
  bool inplace_activations = true;
  Generator* generator = nullptr;          // initial weights; nullptr is the default generator
};

struct ModelInfo {
  std::string name;
  std::string summary;  // one line: what it is and which options it takes
  std::int64_t default_num_classes = 1000;
  std::int64_t default_in_channels = 3;
};

const std::vector<ModelInfo>& model_infos();
const ModelInfo& model_info(std::string_view name);  // ValueError for an unknown name, as make_model
std::string model_names();  // "mobilenet_v2, resnet18, resnet50, cnn", for messages
std::shared_ptr<nn::Module> make_model(std::string_view name, const ModelOptions& options = {});
// The model's checkpointable blocks, block i (from 1) being block_names(name)[i - 1]: module names
// such as "features.1" (models/block_selection.h has each model's numbering). ValueError as make_model.
const std::vector<std::string>& block_names(std::string_view name);
// ValueError, before any model is built, when `blocks` names a block `name` does not have.
void check_checkpoint_blocks(std::string_view name, const BlockSelection& blocks);

}  // namespace frugal::models
