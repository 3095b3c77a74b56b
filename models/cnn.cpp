// models/cnn.h: the layers in the order the header draws them, and the units they form.
#include "models/cnn.h"

#include "nn/functional.h"

namespace frugal::models {

namespace F = frugal::functional;

SmallCnn::SmallCnn(const SmallCnnOptions& options) : nn::Module("SmallCnn"), options_(options) {
  FRUGAL_CHECK_VALUE(options.num_classes > 0 && options.in_channels > 0, "SmallCnn: num_classes (",
                     options.num_classes, ") and in_channels (", options.in_channels, ") must be positive");
  Generator* generator = options.generator;
  constexpr std::int64_t kWidths[] = {32, 64, 128};
  features_ = register_module("features", std::make_shared<nn::Sequential>());
  std::int64_t channels = options.in_channels;
  for (std::size_t i = 0; i < std::size(kWidths); ++i) {
    const std::size_t first = features_->size();
    features_->push_back(std::make_shared<nn::Conv2d>(channels, kWidths[i], 3, 1, 1, 1, 1, true, generator));
    features_->push_back(std::make_shared<nn::ReLU>(options.inplace_activations));
    if (i + 1 < std::size(kWidths)) features_->push_back(std::make_shared<nn::MaxPool2d>(2));
    units_.push_back([features = features_, first, end = features_->size()](const Tensor& input) {
      Tensor y = input;
      for (std::size_t layer = first; layer < end; ++layer) y = (*(*features)[layer])(y);
      return y;
    });
    channels = kWidths[i];
  }
  classifier_ = register_module("classifier", std::make_shared<nn::Sequential>());
  classifier_->push_back(std::make_shared<nn::Linear>(channels, options.num_classes, true, generator));
}

Tensor SmallCnn::forward(const Tensor& x) {
  FRUGAL_CHECK_SHAPE(x.dim() == 4 && x.size(1) == options_.in_channels && x.size(2) >= 4 && x.size(3) >= 4,
                     "SmallCnn: expected input [N, ", options_.in_channels, ", H >= 4, W >= 4], got ",
                     shape_str(x.shape()));
  Tensor y = x;
  for (const Block& unit : units_) y = run_block(unit, y, options_.checkpoint_activations);
  return (*classifier_)(F::flatten(F::adaptive_avg_pool2d(y, {1, 1}), 1));
}

}  // namespace frugal::models
