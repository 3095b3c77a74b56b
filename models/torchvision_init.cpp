// models/torchvision_init.h: one pass over the module tree, by layer type.
#include "models/torchvision_init.h"

#include "nn/init.h"
#include "nn/layers.h"

namespace frugal::models {

void init_convolutions_and_norms(nn::Module& root, Generator* generator) {
  for (const auto& [name, module] : root.named_modules()) {
    if (const auto* conv = dynamic_cast<const nn::Conv2d*>(module)) {
      nn::init::kaiming_normal_(conv->weight(), 0.0, nn::init::FanMode::fan_out, "relu", generator);
      if (conv->bias().defined()) nn::init::zeros_(conv->bias());
    } else if (const auto* norm = dynamic_cast<const nn::BatchNorm2d*>(module)) {
      if (norm->weight().defined()) nn::init::ones_(norm->weight());
      if (norm->bias().defined()) nn::init::zeros_(norm->bias());
    }
  }
}

}  // namespace frugal::models
