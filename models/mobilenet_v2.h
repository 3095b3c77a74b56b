// MobileNetV2 (Sandler et al., 2018) exactly as torchvision's `mobilenet_v2`: the same blocks, the
// same parameter and buffer names in the same order ("features.0.0.weight" ... "classifier.1.bias"),
// the same shapes and the same initialisation, so a torchvision state dict loads as it is.
//
//   features.0        Conv2dNormActivation: 3x3 conv (stride 2), BatchNorm, ReLU6   (the stem)
//   features.1..17    InvertedResidual blocks from the (t, c, n, s) table in mobilenet_v2.cpp
//   features.18       Conv2dNormActivation: 1x1 conv to the last channel (1280), BatchNorm, ReLU6
//   (each Conv2dNormActivation in place: the conv, then BatchNorm with the ReLU6 fused into its pass)
//   then              adaptive average pooling to 1x1, flatten,
//   classifier        Dropout(p), Linear(last channel, num_classes)
//
// Memory: every ReLU6 is in place (as torchvision's ReLU6(inplace=True)), here fused into its
// BatchNorm's pass, so a conv-BN-ReLU6 unit keeps two tensors for backward: the conv's output, which
// BatchNorm needs, and BatchNorm's output clamped by ReLU6, which is also what the next convolution
// saves. Three options trade or measure
// memory without changing a name or a shape: checkpoint_activations runs features.1..17 through
// nn::checkpoint (each keeps only its input and runs again in backward; features is an
// nn::CheckpointedSequential), checkpoint_blocks runs a chosen few of them so (block i is
// features.i, models/block_selection.h), and inplace_activations =
// false builds the ReLU6s out of place. models/README.md has the whole account.
// Not here: training (the CLI and samples), the registry by name (models/registry.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/block_selection.h"
#include "nn/checkpoint.h"
#include "nn/layers.h"

namespace frugal::models {

struct MobileNetV2Options {
  std::int64_t num_classes = 1000;
  double width_mult = 1.0;     // scales every layer's channels (rounded to multiples of 8)
  std::int64_t in_channels = 3;  // 1 for grey images such as Fashion-MNIST
  double dropout = 0.2;        // the classifier's dropout probability
  // For 32x32 inputs: the stem and the first stride-2 block run at stride 1, so the last feature
  // map is 4x4 instead of 1x1 (the adaptation of chenyaofo/pytorch-cifar-models).
  bool cifar_stem = false;
  bool checkpoint_activations = false;  // the inverted-residual blocks recomputed in backward
  BlockSelection checkpoint_blocks = {};  // or only these of them (block i is features.i)
  bool inplace_activations = true;      // ReLU6(inplace=True), as torchvision
  Generator* generator = nullptr;  // initial weights; nullptr is the default generator
};

// torchvision's _make_divisible(v, 8): v rounded to the nearest multiple of `divisor`, at least
// `divisor`, and never more than 10% below v.
std::int64_t make_divisible(double value, std::int64_t divisor = 8);

// torchvision's Conv2dNormActivation, with its children and defaults (a 3x3 kernel padded to keep the
// size): 0 Conv2d (no bias), 1 BatchNorm2d, 2 ReLU6 (in place unless `inplace` is false).
// What runs, in place: the conv, then the BatchNorm with ReLU6 fused into its pass
// (BatchNorm2d::forward_relu6), the same values, gradients and saved tensors as the two layers one
// after the other, one read and write of the data fewer each way. Out of place: the three children
// in turn, as torchvision's ReLU6(inplace=False).
class Conv2dNormActivation : public nn::Sequential {
 public:
  struct Args {
    std::int64_t kernel = 3;
    std::int64_t stride = 1;
    std::int64_t groups = 1;
    bool inplace = true;
    Generator* generator = nullptr;  // the convolution's initial weights
  };
  Conv2dNormActivation(std::int64_t in_channels, std::int64_t out_channels, const Args& args);
  Tensor forward(const Tensor& x) override;
  // Whether inference on x runs this unit as one convolution with its BatchNorm folded in
  // (nn/fold_batch_norm.h).
  bool folds(const Tensor& x) const;
  // In inference on x: how many samples one GEMM of its 1x1 convolution covers (1 for a 3x3 one),
  // or 0 when it does not fold (Note [Inference across the batch on the CPU] in mobilenet_v2.cpp).
  std::int64_t inference_gemm_samples(const Tensor& x) const;

 private:
  std::shared_ptr<nn::Conv2d> conv_;       // "0"
  std::shared_ptr<nn::BatchNorm2d> norm_;  // "1"; in place, it applies the ReLU6 too
  // "2", called only out of place. In place it stays registered but is not called: its clamp is
  // norm_'s, so the module tree is torchvision's and module call observers (the memory report's
  // layer names, train/memory_context.h) name the BatchNorm, whose pass makes the output.
  std::shared_ptr<nn::ReLU6> activation_;
  bool relu6_fused_into_norm_;  // Args::inplace
};

// Expand (1x1, unless expand_ratio is 1), depthwise 3x3, project (1x1, no activation); the input is
// added to the result when the stride is 1 and the channels are equal.
class InvertedResidual : public nn::Module {
 public:
  InvertedResidual(std::int64_t in_channels, std::int64_t out_channels, std::int64_t stride,
                   std::int64_t expand_ratio, Generator* generator = nullptr, bool inplace = true);
  Tensor forward(const Tensor& x) override;
  bool uses_residual() const { return use_residual_; }
  // How many samples of x inference runs through the block at a time on the CPU (Note [Inference a
  // few samples at a time] in mobilenet_v2.cpp): x.size(0) or fewer.
  std::int64_t inference_chunk(const Tensor& x) const;
  // In inference on x: a number of samples that each of its 1x1 convolutions' GEMMs covers a whole
  // number of times, or 0 when one of its BatchNorms does not fold (Note [Inference across the
  // batch on the CPU] in mobilenet_v2.cpp).
  std::int64_t inference_gemm_samples(const Tensor& x) const;

 private:
  Tensor branch(const Tensor& x);  // the expansion, the depthwise convolution and the projection
  std::int64_t gemm_samples(const Tensor& x) const;  // the least common multiple of its 1x1 GEMMs' chunks
  bool folds_every_norm(const Tensor& x) const;

  bool use_residual_;
  std::int64_t stride_;
  std::int64_t hidden_channels_ = 0;
  std::shared_ptr<nn::Sequential> conv_;
  std::shared_ptr<nn::Conv2d> projection_;          // conv_'s last two modules
  std::shared_ptr<nn::BatchNorm2d> projection_norm_;
};

class MobileNetV2 : public nn::Module {
 public:
  explicit MobileNetV2(const MobileNetV2Options& options = {});
  // The checkpointable blocks' module names, "features.1" .. "features.17", whatever the options.
  static std::vector<std::string> block_names();
  Tensor forward(const Tensor& x) override;  // [N, in_channels, H, W] -> logits [N, num_classes]
  const MobileNetV2Options& options() const { return options_; }
  std::int64_t last_channel() const { return last_channel_; }
  // How inference on the CPU cuts x's batch among the threads (Note [Inference across the batch on
  // the CPU] in mobilenet_v2.cpp), in samples per slice; 0 where a round does not run.
  struct InferenceSlices {
    std::int64_t claimed = 0;     // kSlicesPerThread slices per thread, claimed by free threads; 0: the batch runs whole
    std::int64_t per_thread = 0;  // then one slice per thread, for the units after the claimed round
  };
  InferenceSlices inference_slices(const Tensor& x) const;
  // Where the last forward's rounds stopped, as indices into features_ (the stem 0, the blocks 1-17,
  // the last convolution 18): units [0, claimed_end) ran on the claimed slices, [claimed_end,
  // per_thread_end) on one slice per thread, the rest on the whole batch layer by layer. Both 0 when
  // the last forward ran whole. So tests can see which units a round took and which it refused.
  struct SlicedUnits {
    std::size_t claimed_end = 0;
    std::size_t per_thread_end = 0;
  };
  SlicedUnits last_sliced_units() const { return last_sliced_units_; }

 private:
  struct SlicedRun;
  // Units [first_unit, ...) of features_ on slices of `slice` samples of x, while each unit allows it.
  SlicedRun units_on_slices(const Tensor& x, std::size_t first_unit, std::int64_t slice, bool per_thread_round);
  bool unit_runs_on_slice(std::size_t unit, const Tensor& x, std::int64_t slice, bool per_thread_round) const;
  Tensor pooled_features_on_slices(const Tensor& x, const InferenceSlices& slices);

  MobileNetV2Options options_;
  std::int64_t last_channel_;
  std::shared_ptr<nn::CheckpointedSequential> features_;  // the chosen blocks checkpointed
  std::shared_ptr<nn::Sequential> classifier_;
  SlicedUnits last_sliced_units_;  // written by forward on the calling thread
};

}  // namespace frugal::models
