// ResNet-18 and ResNet-50 (He et al., 2016) exactly as torchvision's `resnet18` / `resnet50`: the same
// modules, parameter and buffer names in the same order ("conv1.weight", "bn1.*", "layer1.0.conv1.weight"
// ... "fc.bias"), shapes and initialisation, so a torchvision state dict loads as it is. ResNet-50's
// Bottleneck puts the stride on its 3x3 convolution (torchvision's "ResNet v1.5").
//
//   conv1 7x7/2, bn1, ReLU, max pool 3x3/2       (the stem; 1/4 of the input's side)
//   layer1..layer4                               BasicBlock x [2,2,2,2] (18) or Bottleneck x [3,4,6,3] (50)
//   adaptive average pool to 1x1, flatten, fc
//
// They are here as the contrast to MobileNetV2: more parameters (11.7 M and 25.6 M against 3.5 M) and,
// per sample, more activation memory at the same input (models/README.md). checkpoint_activations
// runs each residual block through nn::checkpoint, checkpoint_blocks a chosen few (numbered over
// layer1..layer4 in order: resnet18's blocks 1-8 are layer1.0, layer1.1, layer2.0 .. layer4.1), and
// inplace_activations = false computes every ReLU out of place; none changes a name or a shape.
// Not here: the registry by name (models/registry.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/block_selection.h"
#include "nn/checkpoint.h"
#include "nn/layers.h"

namespace frugal::models {

struct ResNetOptions {
  std::int64_t num_classes = 1000;
  std::int64_t in_channels = 3;
  // Starts each residual branch's last BatchNorm at weight 0, so every block begins as the identity.
  bool zero_init_residual = false;
  bool checkpoint_activations = false;  // the residual blocks recomputed in backward
  BlockSelection checkpoint_blocks = {};  // or only these of them (numbered over layer1..layer4 from 1)
  bool inplace_activations = true;      // ReLU(inplace=True), as torchvision
  Generator* generator = nullptr;  // initial weights; nullptr is the default generator
};

// Two 3x3 convolutions; expansion 1.
class BasicBlock : public nn::Module {
 public:
  static constexpr std::int64_t kExpansion = 1;
  BasicBlock(std::int64_t in_channels, std::int64_t channels, std::int64_t stride,
             std::shared_ptr<nn::Sequential> downsample, Generator* generator, bool inplace = true);
  Tensor forward(const Tensor& x) override;
  const nn::BatchNorm2d& last_norm() const { return *bn2_; }

 private:
  bool inplace_;  // the ReLUs
  std::shared_ptr<nn::Conv2d> conv1_, conv2_;
  std::shared_ptr<nn::BatchNorm2d> bn1_, bn2_;
  std::shared_ptr<nn::Sequential> downsample_;  // null when the shapes already match
};

// 1x1 down to `channels`, 3x3 (strided), 1x1 up to 4 x channels; expansion 4.
class Bottleneck : public nn::Module {
 public:
  static constexpr std::int64_t kExpansion = 4;
  Bottleneck(std::int64_t in_channels, std::int64_t channels, std::int64_t stride,
             std::shared_ptr<nn::Sequential> downsample, Generator* generator, bool inplace = true);
  Tensor forward(const Tensor& x) override;
  const nn::BatchNorm2d& last_norm() const { return *bn3_; }

 private:
  bool inplace_;  // the ReLUs
  std::shared_ptr<nn::Conv2d> conv1_, conv2_, conv3_;
  std::shared_ptr<nn::BatchNorm2d> bn1_, bn2_, bn3_;
  std::shared_ptr<nn::Sequential> downsample_;
};

enum class ResNetDepth : std::uint8_t { resnet18, resnet50 };

class ResNet : public nn::Module {
 public:
  explicit ResNet(ResNetDepth depth, const ResNetOptions& options = {});
  // The checkpointable blocks' module names in their numbering: "layer1.0", "layer1.1", ... "layer4.2".
  static std::vector<std::string> block_names(ResNetDepth depth);
  Tensor forward(const Tensor& x) override;  // [N, in_channels, H, W] -> logits [N, num_classes]
  const ResNetOptions& options() const { return options_; }

 private:
  template <typename Block>
  std::shared_ptr<nn::CheckpointedSequential> make_layer(std::int64_t channels, std::int64_t blocks, std::int64_t stride);

  ResNetOptions options_;
  BlockSelection checkpointed_;  // checkpoint_activations and checkpoint_blocks together
  std::int64_t in_channels_ = 64;  // channels entering the next layer while building
  std::int64_t blocks_built_ = 0;  // blocks made so far while building: block numbers run across layers
  std::shared_ptr<nn::Conv2d> conv1_;
  std::shared_ptr<nn::BatchNorm2d> bn1_;
  std::shared_ptr<nn::MaxPool2d> maxpool_;
  std::vector<std::shared_ptr<nn::CheckpointedSequential>> layers_;  // the chosen blocks checkpointed
  std::shared_ptr<nn::Linear> fc_;
};

}  // namespace frugal::models
