// Per-sample transforms, applied by the loader's workers to each sample's input before batching,
// with torchvision's names: ToFloat, Normalize, Pad, Resize, RandomCrop, RandomHorizontalFlip, and
// Compose to chain them; and the standard chain for training an image classifier
// (training_transforms) with the per-channel statistics it normalises by (image_statistics).
// Images are [C, H, W] (C = channels, H = rows, W = columns).
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
#include "data/dataset.h"
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
// With `before` and `after`: `before` on the top and left, `after` on the bottom and right, as
// torchvision's CenterCrop pads an image smaller than its size ((size - side) / 2 before).
class Pad final : public Transform {
 public:
  explicit Pad(std::int64_t amount, double value = 0.0) : Pad(amount, amount, value) {}
  Pad(std::int64_t before, std::int64_t after, double value);
  Tensor apply(const Tensor& input, RandomStream& random) const override;

 private:
  std::int64_t before_, after_;
  double value_;
};

// A floating [C, H, W] image to [C, height, width] by bilinear interpolation between the nearest
// pixel centres (align_corners=False), as torchvision's Resize on a tensor with antialias=False
// (F.interpolate's "bilinear"): shrinking reads only the two pixels beside each sample point, so it
// can alias, where image_folder.h's resize_image (PIL's filter) averages every pixel it covers.
class Resize final : public Transform {
 public:
  Resize(std::int64_t height, std::int64_t width);
  Tensor apply(const Tensor& input, RandomStream& random) const override;

 private:
  std::int64_t height_, width_;
};

// Zero-pads by `padding` (as Pad), then cuts a height x width window at a random top-left corner,
// each position equally likely (the standard CIFAR augmentation: RandomCrop(32, 32, 4)).
class RandomCrop final : public Transform {
 public:
  RandomCrop(std::int64_t height, std::int64_t width, std::int64_t padding = 0);
  Tensor apply(const Tensor& input, RandomStream& random) const override;
  // The window's top-left corner in an image of h x w before padding: the two numbers apply draws.
  // ShapeError if the window does not fit the padded image.
  struct Corner {
    std::int64_t top, left;
  };
  Corner draw(std::int64_t h, std::int64_t w, RandomStream& random) const;
  std::int64_t padding() const { return padding_; }

 private:
  std::int64_t height_, width_, padding_;
};

// Mirrors the W axis of a [C, H, W] input with probability p. Draws one number whatever p is, so
// changing p does not shift the numbers that later transforms draw.
class RandomHorizontalFlip final : public Transform {
 public:
  explicit RandomHorizontalFlip(double p = 0.5);
  Tensor apply(const Tensor& input, RandomStream& random) const override;
  bool draw(RandomStream& random) const { return random.uniform() < p_; }  // whether apply mirrors

 private:
  double p_;
};

// ---- the standard training chain

// Pad, then optionally RandomCrop and RandomHorizontalFlip, then ToFloat(1/255) and Normalize, in one
// pass over a u8 [C, S, S] image: what training_transforms gives for images no larger than
// image_size, bit for bit (the same arithmetic, the same random numbers drawn in the same order),
// with one tensor allocated where the five transforms allocate five. A Fashion-MNIST sample with
// augmentation took 3.7 us, the five transforms 19.7 us (2 shared cores; see data/README.md).
// Every output pixel is a lookup in a table of the 256 normalised values of its channel.
class PadCropFlipNormalize final : public Transform {
 public:
  // `size` = S + pad_before + pad_after, the side of the image before the crop (and after it).
  PadCropFlipNormalize(std::int64_t size, std::int64_t pad_before, bool augment, std::vector<double> mean,
                       std::vector<double> stddev);
  Tensor apply(const Tensor& input, RandomStream& random) const override;

 private:
  std::int64_t size_, pad_before_;
  bool augment_;
  RandomCrop crop_;
  RandomHorizontalFlip flip_;
  std::vector<float> table_;  // [C, 257]: Normalize(ToFloat(v)) for v = 0..255, then the padding (v = 0)
};

// Per channel, of the pixels scaled to [0, 1] (u8 / 255): what Normalize needs.
struct ImageStatistics {
  std::vector<double> mean, stddev;
};

// The mean and (population) standard deviation of each channel over `max_samples` samples spread
// evenly over a dataset of u8 [C, H, W] images (all of them when it has no more): sample
// floor(k * size / count) for k = 0, 1, ..., count - 1. Sums are kept as exact integers.
// ValueError for another dtype or rank, an empty dataset or max_samples < 1.
ImageStatistics image_statistics(const Dataset& dataset, std::int64_t max_samples = 10000);

// The per-sample chain for training on `dataset`'s u8 [C, S, S] images at image_size x image_size:
//   ToFloat(1/255)
//   S < image_size: Pad with zeros to image_size, (image_size - S) / 2 before (Fashion-MNIST's
//                   28 -> 32: 2 on every side); S > image_size: Resize; S = image_size: nothing
//   augment:        RandomCrop(image_size, image_size, padding = image_size / 8), RandomHorizontalFlip
//   Normalize(stats.mean, stats.stddev)
// For S <= image_size the chain is one PadCropFlipNormalize, which gives the same values in one pass.
// augment is for the train split only. ValueError for non-square or non-u8 samples, a rank other
// than 3, stats of another channel count, or image_size < 1.
Compose training_transforms(const Dataset& dataset, std::int64_t image_size, bool augment,
                            const ImageStatistics& stats);

}  // namespace frugal::data
