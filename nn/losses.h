// Losses as torch.nn's loss modules: the options held once, the call forwarded to nn/functional.h.
// They take (input, target), so they are callables rather than Modules (whose forward takes one
// tensor), and they hold no parameters or buffers.
// Not here: the loss kernels (kernels/loss.h) and their gradients (nn/functional.cpp).
#pragma once

#include <cstdint>

#include "nn/functional.h"

namespace frugal::nn {

// logits [N, C], targets [N] i64 class indices; see kernels/loss.h for the formula.
class CrossEntropyLoss {
 public:
  explicit CrossEntropyLoss(LossReduction reduction = LossReduction::mean, double label_smoothing = 0.0,
                            std::int64_t ignore_index = -100)
      : options_{.reduction = reduction, .label_smoothing = label_smoothing, .ignore_index = ignore_index} {
    FRUGAL_CHECK_VALUE(label_smoothing >= 0.0 && label_smoothing <= 1.0,
                       "CrossEntropyLoss: label_smoothing must be in [0, 1], got ", label_smoothing);
  }
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return functional::cross_entropy(input, target, options_);
  }
  const CrossEntropyOptions& options() const { return options_; }

 private:
  CrossEntropyOptions options_;
};

// (input - target)^2, reduced; input and target of the same shape.
class MSELoss {
 public:
  explicit MSELoss(LossReduction reduction = LossReduction::mean) : reduction_(reduction) {}
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return functional::mse_loss(input, target, reduction_);
  }

 private:
  LossReduction reduction_;
};

}  // namespace frugal::nn
