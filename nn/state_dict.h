// The ordered name -> tensor list that modules, optimizers and the gradient scaler save and load
// (the order of registration, as PyTorch's OrderedDict), and that safetensors files hold.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace frugal::nn {

using StateDict = std::vector<std::pair<std::string, Tensor>>;

}  // namespace frugal::nn
