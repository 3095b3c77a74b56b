// nn/init.h: torch.nn.init's formulas over core/random.h's in-place draws.
#include "nn/init.h"

#include <cmath>
#include <string>

namespace frugal::nn::init {

Fans calculate_fan_in_and_fan_out(const Tensor& tensor) {
  FRUGAL_CHECK_VALUE(tensor.dim() >= 2, "calculate_fan_in_and_fan_out: fans need a tensor of 2 or more dims, got shape ",
                     shape_str(tensor.shape()));
  std::int64_t receptive_field = 1;  // the kernel's taps, for convolution weights
  for (std::int64_t d = 2; d < tensor.dim(); ++d) receptive_field *= tensor.size(d);
  return {.fan_in = tensor.size(1) * receptive_field, .fan_out = tensor.size(0) * receptive_field};
}

double calculate_gain(std::string_view nonlinearity, std::optional<double> param) {
  if (nonlinearity == "linear" || nonlinearity == "conv1d" || nonlinearity == "conv2d" || nonlinearity == "conv3d" ||
      nonlinearity == "sigmoid")
    return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3.0;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") {
    const double slope = param.value_or(0.01);  // PyTorch's default negative slope
    return std::sqrt(2.0 / (1.0 + slope * slope));
  }
  if (nonlinearity == "selu") return 0.75;  // PyTorch's choice for self-normalising networks
  FRUGAL_THROW(ValueError, "calculate_gain: unsupported nonlinearity \"", std::string(nonlinearity), "\"");
}

Tensor uniform_(Tensor tensor, double low, double high, Generator* generator) {
  frugal::uniform_(tensor, low, high, generator);
  return tensor;
}

Tensor normal_(Tensor tensor, double mean, double std, Generator* generator) {
  frugal::normal_(tensor, mean, std, generator);
  return tensor;
}

Tensor constant_(Tensor tensor, double value) { return tensor.fill_(value); }
Tensor zeros_(Tensor tensor) { return tensor.fill_(0.0); }
Tensor ones_(Tensor tensor) { return tensor.fill_(1.0); }

namespace {
double kaiming_std(const Tensor& tensor, double a, FanMode mode, std::string_view nonlinearity) {
  const Fans fans = calculate_fan_in_and_fan_out(tensor);
  const std::int64_t fan = mode == FanMode::fan_in ? fans.fan_in : fans.fan_out;
  FRUGAL_CHECK_VALUE(fan > 0, "kaiming init: the fan of shape ", shape_str(tensor.shape()), " is zero");
  return calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan));
}
}  // namespace

Tensor kaiming_uniform_(Tensor tensor, double a, FanMode mode, std::string_view nonlinearity, Generator* generator) {
  const double bound = std::sqrt(3.0) * kaiming_std(tensor, a, mode, nonlinearity);  // uniform(-b, b) has std b / sqrt(3)
  return init::uniform_(tensor, -bound, bound, generator);
}

Tensor kaiming_normal_(Tensor tensor, double a, FanMode mode, std::string_view nonlinearity, Generator* generator) {
  return init::normal_(tensor, 0.0, kaiming_std(tensor, a, mode, nonlinearity), generator);
}

}  // namespace frugal::nn::init
