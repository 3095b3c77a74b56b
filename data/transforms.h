// Per-sample transforms, applied by the loader's workers to each sample's input before batching,
// with torchvision's names: ToFloat, Normalize, Pad, RandomCrop, RandomHorizontalFlip, and Compose
// to chain them. Images are [C, H, W] (C = channels, H = rows, W = columns).
// A random transform draws from the sample's RandomStream (data/random_stream.h), keyed by (seed,
// epoch, index): the same sample in the same epoch is transformed the same way on any worker, in any
// order; a new epoch gives new crops and flips.
// Every transform returns a new tensor (or its input unchanged) and never writes into its input, which
// may be a dataset's own memory.
// Not here: batching and device copies (data/loader.h). Nothing here runs on the GPU: these are plain
// loops over one small CPU sample, which the workers run beside the model's work.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "data/random_stream.h"

namespace frugal::data {

class Transform {
 public:
  virtual ~Transform() = default;
  // Transforms one sample's input (a CPU tensor), drawing any random numbers from `random`.
  virtual Tensor apply(const Tensor& input, RandomStream& random) const = 0;
};

using TransformPtr = std::shared_ptr<const Transform>;

// The transforms in order, all drawing from one stream per sample. Empty: the input unchanged.
class Compose final : public Transform {
 public:
  Compose() = default;
  Compose(std::initializer_list<TransformPtr> transforms) : transforms_(transforms) {}
  explicit Compose(std::vector<TransformPtr> transforms) : transforms_(std::move(transforms)) {}

  bool empty() const { return transforms_.empty(); }
  Tensor apply(const Tensor& input, RandomStream& random) const override;
  // Sample `index` of `epoch`, with its own stream: what a loader worker calls.
  Tensor operator()(const Tensor& input, std::uint64_t seed, std::int64_t epoch, std::int64_t index) const;

 private:
  std::vector<TransformPtr> transforms_;
};

// Any dtype to f32, times `scale` (1/255 maps u8 pixels to [0, 1]). Any shape.
class ToFloat final : public Transform {
 public:
  explicit ToFloat(double scale = 1.0) : scale_(scale) {}
  Tensor apply(const Tensor& input, RandomStream& random) const override;

 private:
  double scale_;
};

// (x - mean[c]) / stddev[c] for each channel c of a floating [C, ...] input; same dtype out.
class Normalize final : public Transform {
 public:
  Normalize(std::vector<double> mean, std::vector<double> stddev);
  Tensor apply(const Tensor& input, RandomStream& random) const override;

 private:
  std::vector<double> mean_, stddev_;
};

// `amount` elements of `value` on every side of H and W: [C, H, W] -> [C, H + 2a, W + 2a]. Any dtype.
class Pad final : public Transform {
 public:
  explicit Pad(std::int64_t amount, double value = 0.0);
  Tensor apply(const Tensor& input, RandomStream& random) const override;

 private:
  std::int64_t amount_;
  double value_;
};

// Zero-pads by `padding` (as Pad), then cuts a height x width window at a random top-left corner,
// each position equally likely (the standard CIFAR augmentation: RandomCrop(32, 32, 4)).
class RandomCrop final : public Transform {
 public:
  RandomCrop(std::int64_t height, std::int64_t width, std::int64_t padding = 0);
  Tensor apply(const Tensor& input, RandomStream& random) const override;

 private:
  std::int64_t height_, width_;
  Pad pad_;
};

// Mirrors the W axis of a [C, H, W] input with probability p. Draws one number whatever p is, so
// changing p does not shift the numbers that later transforms draw.
class RandomHorizontalFlip final : public Transform {
 public:
  explicit RandomHorizontalFlip(double p = 0.5);
  Tensor apply(const Tensor& input, RandomStream& random) const override;

 private:
  double p_;
};

}  // namespace frugal::data
