// Layers with torch.nn's constructors, defaults, parameter names and default initialisation, built on
// the differentiable ops of nn/functional.h. Parameters are created on the CPU in f32 under
// MemoryTag::param and initialised from a Generator (core/random.h; nullptr means the default
// generator): move a model with Module::to afterwards.
//
//   Linear     y = x W^T + b;  weight [out, in], bias [out]
//   Conv2d     NCHW;  weight [out, in / groups, KH, KW], bias [out]
//   BatchNorm2d  per-channel statistics over N, H, W;  weight, bias, running_mean, running_var [C],
//              num_batches_tracked (i64, 0-dim)
//
// Default initialisation, as PyTorch: Linear and Conv2d weights kaiming_uniform_(a = sqrt(5)), that
// is uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)), and their biases uniform over the same bound;
// batch norm weight 1, bias 0, running_mean 0, running_var 1.
// Not here: the ops (nn/functional.h), losses (nn/losses.h), other layer kinds.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>

#include "core/random.h"
#include "kernels/conv.h"
#include "kernels/pool.h"
#include "nn/module.h"

namespace frugal::nn {

// A size given once for both height and width (3) or per dimension ({3, 1}), as PyTorch's
// int-or-tuple arguments.
struct Size2 {
  Size2(std::int64_t both) : value{both, both} {}  // implicit on purpose: 3 means {3, 3}
  Size2(std::int64_t height, std::int64_t width) : value{height, width} {}
  std::array<std::int64_t, 2> value;
};

class Linear : public Module {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, bool bias = true, Generator* generator = nullptr);
  Tensor forward(const Tensor& x) override;  // x [..., in] -> [..., out]
  void reset_parameters(Generator* generator = nullptr);
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined without bias

 private:
  Tensor weight_, bias_;
};

// Conv2d's arguments after the channels, by name, for a model's table to read as torchvision's:
// Conv2d(in, out, {.kernel = 3, .stride = 2, .padding = 1, .bias = false}). Defaults as torch.nn's,
// with a 1x1 kernel.
struct Conv2dArgs {
  Size2 kernel = 1;
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 dilation = 1;
  std::int64_t groups = 1;
  bool bias = true;
  Generator* generator = nullptr;  // the initial weights'; nullptr is the default generator
};

class Conv2d : public Module {
 public:
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, Size2 kernel_size, Size2 stride = 1, Size2 padding = 0,
         Size2 dilation = 1, std::int64_t groups = 1, bool bias = true, Generator* generator = nullptr);
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, const Conv2dArgs& args)
      : Conv2d(in_channels, out_channels, args.kernel, args.stride, args.padding, args.dilation, args.groups, args.bias,
               args.generator) {}
  Tensor forward(const Tensor& x) override;
  void reset_parameters(Generator* generator = nullptr);
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  const Conv2dOptions& options() const { return options_; }

 private:
  Conv2dOptions options_;
  Tensor weight_, bias_;
};

// momentum: running = (1 - momentum) running + momentum batch; std::nullopt gives the cumulative
// moving average (momentum 1 / num_batches_tracked), as PyTorch's momentum=None. running_var uses
// the unbiased batch variance. Training with track_running_stats = false keeps no buffers and
// normalises with the batch statistics in eval mode too.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(std::int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true);
  Tensor forward(const Tensor& x) override;  // x [N, C, H, W]
  // forward(x) then ReLU6, in one pass over the data and one saved output (F::batch_norm's
  // fuse_relu6), seen by module call observers as this layer's call: what MobileNetV2's
  // Conv2dNormActivation runs instead of this layer followed by ReLU6(inplace = true).
  Tensor forward_relu6(const Tensor& x);
  const Tensor& weight() const { return weight_; }              // undefined unless affine
  const Tensor& bias() const { return bias_; }                  // undefined unless affine
  const Tensor& running_mean() const { return running_mean_; }  // undefined unless track_running_stats
  const Tensor& running_var() const { return running_var_; }
  const Tensor& num_batches_tracked() const { return num_batches_tracked_; }
  double eps() const { return eps_; }

 private:
  Tensor normalize(const Tensor& x, bool fuse_relu6);

  std::int64_t num_features_;
  double eps_;
  std::optional<double> momentum_;
  Tensor weight_, bias_, running_mean_, running_var_, num_batches_tracked_;
};

// inplace: the input's memory is overwritten with the result and returned (the caller's tensor
// changes, and takes the op's history), saving one activation, as torchvision's ReLU6(inplace=True).
class ReLU : public Module {
 public:
  explicit ReLU(bool inplace = false) : Module("ReLU"), inplace_(inplace) {}
  Tensor forward(const Tensor& x) override;

 private:
  bool inplace_;
};

class ReLU6 : public Module {
 public:
  explicit ReLU6(bool inplace = false) : Module("ReLU6"), inplace_(inplace) {}
  Tensor forward(const Tensor& x) override;

 private:
  bool inplace_;
};

// Zeroes each element with probability p in training (scaling the rest by 1 / (1 - p)); the
// identity in eval mode.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, Generator* generator = nullptr);
  Tensor forward(const Tensor& x) override;

 private:
  double p_;
  Generator* generator_;
};

// stride 0 (the default) means the kernel size, as PyTorch's stride=None.
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Size2 kernel_size, Size2 stride = 0, Size2 padding = 0, Size2 dilation = 1, bool ceil_mode = false);
  Tensor forward(const Tensor& x) override;
  const Pool2dOptions& options() const { return options_; }

 private:
  Pool2dOptions options_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Size2 kernel_size, Size2 stride = 0, Size2 padding = 0, bool ceil_mode = false,
                     bool count_include_pad = true);
  Tensor forward(const Tensor& x) override;
  const Pool2dOptions& options() const { return options_; }

 private:
  Pool2dOptions options_;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size) : Module("AdaptiveAvgPool2d"), output_size_(output_size.value) {}
  Tensor forward(const Tensor& x) override;

 private:
  std::array<std::int64_t, 2> output_size_;
};

// Merges dims start_dim.. into one: [N, C, H, W] -> [N, C H W] by default.
class Flatten : public Module {
 public:
  explicit Flatten(std::int64_t start_dim = 1) : Module("Flatten"), start_dim_(start_dim) {}
  Tensor forward(const Tensor& x) override;

 private:
  std::int64_t start_dim_;
};

class Identity : public Module {
 public:
  Identity() : Module("Identity") {}
  Tensor forward(const Tensor& x) override { return x; }
};

// Runs its children in order; they are named "0", "1", ... as in PyTorch.
class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  template <typename M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    return register_module(std::to_string(size()), std::move(module));
  }
  std::size_t size() const { return named_children().size(); }
  const std::shared_ptr<Module>& operator[](std::size_t index) const;  // IndexError past the end
  Tensor forward(const Tensor& x) override;

 protected:
  // For containers that are a Sequential under another name, as torchvision's Conv2dNormActivation.
  explicit Sequential(std::string type_name) : Module(std::move(type_name)) {}
};

}  // namespace frugal::nn
