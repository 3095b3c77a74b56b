// Parameter initialisation, as torch.nn.init: the same formulas, in place, with nothing recorded
// for autograd. Tensor is a handle (core/tensor.h), so each function takes one by value, writes
// into its memory, and returns it: init::kaiming_normal_(conv->weight(), 0, FanMode::fan_out, "relu").
// Random draws come from a Generator (core/random.h; nullptr means the default generator).
//
// Fans of a weight [out, in, k...]: fan_in = in * prod(k), fan_out = out * prod(k).
// Not here: the layers' default initialisation (nn/layers.cpp calls these), xavier and orthogonal
// initialisers (no model here uses them).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/random.h"

namespace frugal::nn::init {

struct Fans {
  std::int64_t fan_in = 0;
  std::int64_t fan_out = 0;
};
// ValueError for tensors of fewer than 2 dims, as PyTorch.
Fans calculate_fan_in_and_fan_out(const Tensor& tensor);

// The gain that keeps activations' variance through a nonlinearity: "linear", "conv1d", "conv2d",
// "conv3d", "sigmoid" 1; "tanh" 5/3; "relu" sqrt(2); "leaky_relu" sqrt(2 / (1 + slope^2)) with
// slope = param (0.01 if none); "selu" 3/4. ValueError for any other name.
double calculate_gain(std::string_view nonlinearity, std::optional<double> param = std::nullopt);

enum class FanMode : std::uint8_t { fan_in, fan_out };  // fan_in keeps forward variance, fan_out backward

Tensor uniform_(Tensor tensor, double low = 0.0, double high = 1.0, Generator* generator = nullptr);
Tensor normal_(Tensor tensor, double mean = 0.0, double std = 1.0, Generator* generator = nullptr);
Tensor constant_(Tensor tensor, double value);
Tensor zeros_(Tensor tensor);
Tensor ones_(Tensor tensor);

// He initialisation: std = gain(nonlinearity, a) / sqrt(fan); a is leaky_relu's negative slope.
// Uniform over +-sqrt(3) std, or normal(0, std).
Tensor kaiming_uniform_(Tensor tensor, double a = 0.0, FanMode mode = FanMode::fan_in,
                        std::string_view nonlinearity = "leaky_relu", Generator* generator = nullptr);
Tensor kaiming_normal_(Tensor tensor, double a = 0.0, FanMode mode = FanMode::fan_in,
                       std::string_view nonlinearity = "leaky_relu", Generator* generator = nullptr);

}  // namespace frugal::nn::init
