// A small CNN for quick runs and tests: three 3x3 convolutions with ReLU, two 2x2 max pools, global
// average pooling and a linear classifier. No BatchNorm on purpose: with no per-batch statistics, a
// data-parallel run over R processes computes exactly the gradient of one process on the whole batch,
// so the two can be compared value for value. PyTorch's default initialisation (nn/layers.h).
//
//   features   0 Conv2d(in, 32, 3, padding 1)  1 ReLU  2 MaxPool2d(2)
//              3 Conv2d(32, 64, 3, padding 1)  4 ReLU  5 MaxPool2d(2)
//              6 Conv2d(64, 128, 3, padding 1) 7 ReLU
//   then       adaptive average pooling to 1x1, flatten
//   classifier 0 Linear(128, num_classes)
// Any input of at least 4x4 works (the pools need it); 28x28 Fashion-MNIST and 32x32 CIFAR are the usual.
// The repeated unit is a convolution with what follows it up to the next one (features 0-2, 3-5, 6-7):
// checkpoint_activations runs each unit through nn::checkpoint, checkpoint_blocks a chosen few (unit
// i is block i, from 1), inplace_activations = false computes the ReLUs out of place; none changes a
// name or a shape.
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

struct SmallCnnOptions {
  std::int64_t num_classes = 10;
  std::int64_t in_channels = 1;
  bool checkpoint_activations = false;  // the conv units recomputed in backward
  BlockSelection checkpoint_blocks = {};  // or only these of them (unit i is block i, from 1)
  bool inplace_activations = true;      // ReLU(inplace=True)
  Generator* generator = nullptr;  // initial weights; nullptr is the default generator
};

class SmallCnn : public nn::Module {
 public:
  explicit SmallCnn(const SmallCnnOptions& options = {});
  // The units as blocks, named by the layers they span: "features.0-2", "features.3-5", "features.6-7".
  static std::vector<std::string> block_names();
  Tensor forward(const Tensor& x) override;  // [N, in_channels, H, W] -> logits [N, num_classes]

 private:
  SmallCnnOptions options_;
  std::shared_ptr<nn::CheckpointedSequential> features_;  // the chosen units checkpointed
  std::shared_ptr<nn::Sequential> classifier_;
};

}  // namespace frugal::models
