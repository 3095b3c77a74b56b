// models/cnn.h: the layers in the order the header draws them, and the units they form.
#include "models/cnn.h"

#include "nn/functional.h"

namespace frugal::models {

namespace F = frugal::functional;

namespace {
constexpr std::int64_t kWidths[] = {32, 64, 128};  // the units' output channels
// Unit i is a convolution, a ReLU and, but for the last unit, a pool.
bool unit_has_pool(std::size_t i) { return i + 1 < std::size(kWidths); }
}  // namespace

std::vector<std::string> SmallCnn::block_names() {
  std::vector<std::string> names;
  std::size_t first = 0;
  for (std::size_t i = 0; i < std::size(kWidths); ++i) {
    const std::size_t last = first + (unit_has_pool(i) ? 2 : 1);
    names.push_back("features." + std::to_string(first) + "-" + std::to_string(last));
    first = last + 1;
  }
  return names;
}

SmallCnn::SmallCnn(const SmallCnnOptions& options)
    : nn::Module("SmallCnn"),
      options_(options) {
  FRUGAL_CHECK_VALUE(options.num_classes > 0 && options.in_channels > 0, "SmallCnn: num_classes (",
                     options.num_classes, ") and in_channels (", options.in_channels, ") must be positive");
  options.checkpoint_blocks.check("cnn", block_names());
  Generator* generator = options.generator;
  const BlockSelection checkpointed = checkpointed_blocks(options.checkpoint_activations, options.checkpoint_blocks);
  features_ = register_module("features", std::make_shared<nn::CheckpointedSequential>());
  std::int64_t channels = options.in_channels;
  for (std::size_t i = 0; i < std::size(kWidths); ++i) {
    const std::size_t first = features_->size();
    features_->push_back(std::make_shared<nn::Conv2d>(
        channels, kWidths[i], nn::Conv2dArgs{.kernel = 3, .padding = 1, .generator = generator}));
    features_->push_back(std::make_shared<nn::ReLU>(options.inplace_activations));
    if (unit_has_pool(i)) features_->push_back(std::make_shared<nn::MaxPool2d>(2));
    if (checkpointed.contains(static_cast<std::int64_t>(i) + 1))  // unit i is block i + 1
      features_->checkpoint_children(first, features_->size() - first);
    channels = kWidths[i];
  }
  classifier_ = register_module("classifier", std::make_shared<nn::Sequential>());
  classifier_->push_back(std::make_shared<nn::Linear>(channels, options.num_classes, true, generator));
}

Tensor SmallCnn::forward(const Tensor& x) {
  FRUGAL_CHECK_SHAPE(x.dim() == 4 && x.size(1) == options_.in_channels && x.size(2) >= 4 && x.size(3) >= 4,
                     "SmallCnn: expected input [N, ", options_.in_channels, ", H >= 4, W >= 4], got ",
                     shape_str(x.shape()));
  const Tensor features = (*features_)(x);  // unit by unit, the chosen ones checkpointed
  return (*classifier_)(F::flatten(F::adaptive_avg_pool2d(features, {1, 1}), 1));
}

}  // namespace frugal::models
