// models/registry.h: one table of names and builders; each builder refuses the options it lacks.
#include "models/registry.h"

#include <functional>

#include "models/cnn.h"
#include "models/mobilenet_v2.h"
#include "models/resnet.h"

namespace frugal::models {

namespace {

struct Entry {
  ModelInfo info;
  std::function<std::shared_ptr<nn::Module>(const ModelOptions&)> build;
  std::vector<std::string> blocks;  // the checkpointable blocks' names, from the model's own table
};

void refuse_mobilenet_options(std::string_view name, const ModelOptions& o) {
  FRUGAL_CHECK_VALUE(!o.width_mult, name, " has no width option (only mobilenet_v2 has)");
  FRUGAL_CHECK_VALUE(!o.dropout, name, " has no dropout option (only mobilenet_v2 has)");
  FRUGAL_CHECK_VALUE(!o.cifar_stem, name, " has no CIFAR stem option (only mobilenet_v2 has)");
}

std::shared_ptr<nn::Module> build_mobilenet_v2(const ModelOptions& o) {
  FRUGAL_CHECK_VALUE(!o.zero_init_residual, "mobilenet_v2 has no zero_init_residual option (only ResNet has)");
  MobileNetV2Options options;
  options.num_classes = o.num_classes.value_or(options.num_classes);
  options.in_channels = o.in_channels.value_or(options.in_channels);
  options.width_mult = o.width_mult.value_or(options.width_mult);
  options.dropout = o.dropout.value_or(options.dropout);
  options.cifar_stem = o.cifar_stem;
  options.checkpoint_activations = o.checkpoint_activations;
  options.checkpoint_blocks = o.checkpoint_blocks;
  options.inplace_activations = o.inplace_activations;
  options.generator = o.generator;
  return std::make_shared<MobileNetV2>(options);
}

std::shared_ptr<nn::Module> build_resnet(ResNetDepth depth, std::string_view name, const ModelOptions& o) {
  refuse_mobilenet_options(name, o);
  ResNetOptions options;
  options.num_classes = o.num_classes.value_or(options.num_classes);
  options.in_channels = o.in_channels.value_or(options.in_channels);
  options.zero_init_residual = o.zero_init_residual;
  options.checkpoint_activations = o.checkpoint_activations;
  options.checkpoint_blocks = o.checkpoint_blocks;
  options.inplace_activations = o.inplace_activations;
  options.generator = o.generator;
  return std::make_shared<ResNet>(depth, options);
}

std::shared_ptr<nn::Module> build_cnn(const ModelOptions& o) {
  refuse_mobilenet_options("cnn", o);
  FRUGAL_CHECK_VALUE(!o.zero_init_residual, "cnn has no zero_init_residual option (only ResNet has)");
  SmallCnnOptions options;
  options.num_classes = o.num_classes.value_or(options.num_classes);
  options.in_channels = o.in_channels.value_or(options.in_channels);
  options.checkpoint_activations = o.checkpoint_activations;
  options.checkpoint_blocks = o.checkpoint_blocks;
  options.inplace_activations = o.inplace_activations;
  options.generator = o.generator;
  return std::make_shared<SmallCnn>(options);
}

const std::vector<Entry>& entries() {
  static const std::vector<Entry> table = {
      {{"mobilenet_v2", "torchvision's MobileNetV2 (3.5 M parameters at 1000 classes); width, dropout, CIFAR stem"},
       build_mobilenet_v2, MobileNetV2::block_names()},
      {{"resnet18", "torchvision's ResNet-18 (11.7 M parameters at 1000 classes); zero_init_residual"},
       [](const ModelOptions& o) { return build_resnet(ResNetDepth::resnet18, "resnet18", o); },
       ResNet::block_names(ResNetDepth::resnet18)},
      {{"resnet50", "torchvision's ResNet-50 (25.6 M parameters at 1000 classes); zero_init_residual"},
       [](const ModelOptions& o) { return build_resnet(ResNetDepth::resnet50, "resnet50", o); },
       ResNet::block_names(ResNetDepth::resnet50)},
      {{"cnn", "a small CNN without BatchNorm (3 convolutions, 94 K parameters at 10 classes, 1 channel)", 10, 1},
       build_cnn, SmallCnn::block_names()},
  };
  return table;
}

}  // namespace

const std::vector<ModelInfo>& model_infos() {
  static const std::vector<ModelInfo> infos = [] {
    std::vector<ModelInfo> out;
    for (const Entry& entry : entries()) out.push_back(entry.info);
    return out;
  }();
  return infos;
}

std::string model_names() {
  std::string names;
  for (const Entry& entry : entries()) {
    if (!names.empty()) names += ", ";
    names += entry.info.name;
  }
  return names;
}

namespace {
const Entry& entry_named(std::string_view name) {
  for (const Entry& entry : entries())
    if (entry.info.name == name) return entry;
  FRUGAL_THROW(::frugal::ValueError, "unknown model '", name, "' (known: ", model_names(), ")");
}
}  // namespace

const ModelInfo& model_info(std::string_view name) { return entry_named(name).info; }

std::shared_ptr<nn::Module> make_model(std::string_view name, const ModelOptions& options) {
  return entry_named(name).build(options);
}

const std::vector<std::string>& block_names(std::string_view name) { return entry_named(name).blocks; }

void check_checkpoint_blocks(std::string_view name, const BlockSelection& blocks) {
  blocks.check(name, block_names(name));
}

}  // namespace frugal::models
