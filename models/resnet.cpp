// models/resnet.h: the two block kinds, the layers built from them, and torchvision's initialisation,
// registered in torchvision's order (the order is the state dict's order).
#include "models/resnet.h"

#include "models/torchvision_init.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "nn/saved_activations.h"

namespace frugal::models {

namespace F = frugal::functional;

namespace {

std::shared_ptr<nn::Conv2d> conv3x3(std::int64_t in, std::int64_t out, std::int64_t stride, Generator* generator) {
  return std::make_shared<nn::Conv2d>(
      in, out, nn::Conv2dArgs{.kernel = 3, .stride = stride, .padding = 1, .bias = false, .generator = generator});
}
std::shared_ptr<nn::Conv2d> conv1x1(std::int64_t in, std::int64_t out, std::int64_t stride, Generator* generator) {
  return std::make_shared<nn::Conv2d>(in, out, nn::Conv2dArgs{.stride = stride, .bias = false, .generator = generator});
}

// torchvision's ReLU(inplace=True): the input's memory is overwritten; out of place to measure that.
// Its mask is kept as bits when the run's ActivationSaving says bit_masks (nn::activation_saving(),
// set by the training step's ActivationSavingGuard in train/step.cpp), as nn::ReLU's.
Tensor relu(Tensor x, bool inplace) {
  const nn::ActivationSaving& saving = nn::activation_saving();
  return inplace ? F::relu_(x, saving) : F::relu(x, saving);
}

// The block's output: the residual branch plus the shortcut, then ReLU on the sum (in place, the sum
// is a fresh tensor, so nothing the branch saved is overwritten). When its addends can be rebuilt
// (BatchNorm from its output, which BatchNorm2d applies) the sum is made again from them in backward,
// as MobileNetV2's; otherwise it is a plain add (F::add_rebuilt).
Tensor add_shortcut_and_relu(const Tensor& branch, const Tensor& x, const std::shared_ptr<nn::Sequential>& downsample,
                             bool inplace) {
  const Tensor shortcut = downsample ? (*downsample)(x) : x;
  return relu(F::add_rebuilt(branch, shortcut), inplace);
}

}  // namespace

BasicBlock::BasicBlock(std::int64_t in_channels, std::int64_t channels, std::int64_t stride,
                       std::shared_ptr<nn::Sequential> downsample, Generator* generator, bool inplace)
    : nn::Module("BasicBlock"), inplace_(inplace) {
  conv1_ = register_module("conv1", conv3x3(in_channels, channels, stride, generator));
  bn1_ = register_module("bn1", std::make_shared<nn::BatchNorm2d>(channels));
  conv2_ = register_module("conv2", conv3x3(channels, channels, 1, generator));
  bn2_ = register_module("bn2", std::make_shared<nn::BatchNorm2d>(channels));
  if (downsample) downsample_ = register_module("downsample", std::move(downsample));
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor out = (*bn1_)((*conv1_)(x));
  out = (*bn2_)((*conv2_)(relu(out, inplace_)));
  return add_shortcut_and_relu(out, x, downsample_, inplace_);
}

Bottleneck::Bottleneck(std::int64_t in_channels, std::int64_t channels, std::int64_t stride,
                       std::shared_ptr<nn::Sequential> downsample, Generator* generator, bool inplace)
    : nn::Module("Bottleneck"), inplace_(inplace) {
  conv1_ = register_module("conv1", conv1x1(in_channels, channels, 1, generator));
  bn1_ = register_module("bn1", std::make_shared<nn::BatchNorm2d>(channels));
  conv2_ = register_module("conv2", conv3x3(channels, channels, stride, generator));
  bn2_ = register_module("bn2", std::make_shared<nn::BatchNorm2d>(channels));
  conv3_ = register_module("conv3", conv1x1(channels, channels * kExpansion, 1, generator));
  bn3_ = register_module("bn3", std::make_shared<nn::BatchNorm2d>(channels * kExpansion));
  if (downsample) downsample_ = register_module("downsample", std::move(downsample));
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor out = (*bn1_)((*conv1_)(x));
  out = (*bn2_)((*conv2_)(relu(out, inplace_)));
  out = (*bn3_)((*conv3_)(relu(out, inplace_)));
  return add_shortcut_and_relu(out, x, downsample_, inplace_);
}

namespace {
// Blocks in layer1..layer4 of each depth.
constexpr std::int64_t kResNet18Blocks[] = {2, 2, 2, 2}, kResNet50Blocks[] = {3, 4, 6, 3};
const std::int64_t* blocks_per_layer(ResNetDepth depth) {
  return depth == ResNetDepth::resnet18 ? kResNet18Blocks : kResNet50Blocks;
}
}  // namespace

std::vector<std::string> ResNet::block_names(ResNetDepth depth) {
  std::vector<std::string> names;
  for (int i = 0; i < 4; ++i)
    for (std::int64_t b = 0; b < blocks_per_layer(depth)[i]; ++b)
      names.push_back("layer" + std::to_string(i + 1) + "." + std::to_string(b));
  return names;
}

template <typename Block>
std::shared_ptr<nn::CheckpointedSequential> ResNet::make_layer(std::int64_t channels, std::int64_t blocks, std::int64_t stride) {
  Generator* generator = options_.generator;
  const bool inplace = options_.inplace_activations;
  std::shared_ptr<nn::Sequential> downsample;
  if (stride != 1 || in_channels_ != channels * Block::kExpansion) {
    downsample = std::make_shared<nn::Sequential>();
    downsample->push_back(conv1x1(in_channels_, channels * Block::kExpansion, stride, generator));
    downsample->push_back(std::make_shared<nn::BatchNorm2d>(channels * Block::kExpansion));
  }
  auto layer = std::make_shared<nn::CheckpointedSequential>();
  for (std::int64_t i = 0; i < blocks; ++i) {
    layer->push_back(i == 0 ? std::make_shared<Block>(in_channels_, channels, stride, downsample, generator, inplace)
                            : std::make_shared<Block>(in_channels_, channels, 1, nullptr, generator, inplace));
    in_channels_ = channels * Block::kExpansion;
    if (checkpointed_.contains(++blocks_built_)) layer->checkpoint_children(layer->size() - 1);
  }
  return layer;
}

ResNet::ResNet(ResNetDepth depth, const ResNetOptions& options)
    : nn::Module("ResNet"),
      options_(options),
      checkpointed_(checkpointed_blocks(options.checkpoint_activations, options.checkpoint_blocks)) {
  FRUGAL_CHECK_VALUE(options.num_classes > 0 && options.in_channels > 0, "ResNet: num_classes (", options.num_classes,
                     ") and in_channels (", options.in_channels, ") must be positive");
  options.checkpoint_blocks.check(depth == ResNetDepth::resnet18 ? "resnet18" : "resnet50", block_names(depth));
  Generator* generator = options.generator;
  conv1_ = register_module("conv1", std::make_shared<nn::Conv2d>(options.in_channels, in_channels_,
                                                                 nn::Conv2dArgs{.kernel = 7, .stride = 2, .padding = 3,
                                                                                .bias = false, .generator = generator}));
  bn1_ = register_module("bn1", std::make_shared<nn::BatchNorm2d>(in_channels_));
  maxpool_ = register_module("maxpool", std::make_shared<nn::MaxPool2d>(3, 2, 1));
  constexpr std::int64_t kChannels[] = {64, 128, 256, 512};
  const bool basic = depth == ResNetDepth::resnet18;
  for (int i = 0; i < 4; ++i) {
    const std::int64_t stride = i == 0 ? 1 : 2, blocks = blocks_per_layer(depth)[i];
    auto layer = basic ? make_layer<BasicBlock>(kChannels[i], blocks, stride)
                       : make_layer<Bottleneck>(kChannels[i], blocks, stride);
    layers_.push_back(register_module("layer" + std::to_string(i + 1), layer));
  }
  // torchvision leaves fc with nn.Linear's default initialisation.
  fc_ = register_module("fc", std::make_shared<nn::Linear>(in_channels_, options.num_classes, true, generator));

  init_convolutions_and_norms(*this, generator);
  if (!options.zero_init_residual) return;
  for (const auto& [name, module] : named_modules()) {
    if (const auto* block = dynamic_cast<const BasicBlock*>(module)) nn::init::zeros_(block->last_norm().weight());
    if (const auto* block = dynamic_cast<const Bottleneck*>(module)) nn::init::zeros_(block->last_norm().weight());
  }
}

Tensor ResNet::forward(const Tensor& x) {
  FRUGAL_CHECK_SHAPE(x.dim() == 4 && x.size(1) == options_.in_channels, "ResNet: expected input [N, ",
                     options_.in_channels, ", H, W], got ", shape_str(x.shape()));
  Tensor y = (*bn1_)((*conv1_)(x));
  y = (*maxpool_)(relu(y, options_.inplace_activations));
  for (const auto& layer : layers_) y = (*layer)(y);  // the chosen blocks checkpointed
  return (*fc_)(F::flatten(F::adaptive_avg_pool2d(y, {1, 1}), 1));
}

}  // namespace frugal::models
