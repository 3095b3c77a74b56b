// The weight initialisation torchvision's classification models share, applied after construction
// over every submodule (as their `for m in self.modules()` loops): convolutions kaiming-normal with
// mode fan_out (std sqrt(2 / fan_out), fan_out = out_channels * kh * kw, not divided by groups) and
// zero biases; batch norms weight 1 and bias 0. What differs per model (MobileNetV2 re-draws its
// Linear layers, ResNet keeps Linear's default) stays in that model's source.
#pragma once

#include "core/random.h"
#include "nn/module.h"

namespace frugal::models {

void init_convolutions_and_norms(nn::Module& root, Generator* generator);

}  // namespace frugal::models
