// nn/layers.h: each layer's parameters, default initialisation and forward (one nn/functional.h call).
#include "nn/layers.h"

#include <cmath>

#include "kernels/batch_norm.h"
#include "kernels/elementwise.h"
#include "nn/checkpoint.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "nn/saved_activations.h"

namespace frugal::nn {

namespace F = frugal::functional;

namespace {
// PyTorch's default for Linear and Conv2d: kaiming_uniform_(a = sqrt(5)), which is
// uniform(+-1/sqrt(fan_in)) (gain sqrt(1/3) times sqrt(3)), and the bias uniform over the same bound.
void reset_weight_and_bias(const Tensor& weight, const Tensor& bias, Generator* generator) {
  init::kaiming_uniform_(weight, std::sqrt(5.0), init::FanMode::fan_in, "leaky_relu", generator);
  if (!bias.defined()) return;
  const double bound = 1.0 / std::sqrt(static_cast<double>(init::calculate_fan_in_and_fan_out(weight).fan_in));
  init::uniform_(bias, -bound, bound, generator);
}
}  // namespace

// ---- Linear

Linear::Linear(std::int64_t in_features, std::int64_t out_features, bool bias, Generator* generator) : Module("Linear") {
  FRUGAL_CHECK_VALUE(in_features > 0 && out_features > 0, "Linear: sizes must be positive, got in_features ", in_features,
                     ", out_features ", out_features);
  MemoryTagScope scope(MemoryTag::param);
  weight_ = register_parameter("weight", empty({out_features, in_features}));
  if (bias) bias_ = register_parameter("bias", empty({out_features}));
  reset_parameters(generator);
}

void Linear::reset_parameters(Generator* generator) { reset_weight_and_bias(weight_, bias_, generator); }

Tensor Linear::forward(const Tensor& x) { return F::linear(x, weight_, bias_); }

// ---- Conv2d

Conv2d::Conv2d(std::int64_t in_channels, std::int64_t out_channels, Size2 kernel_size, Size2 stride, Size2 padding,
               Size2 dilation, std::int64_t groups, bool bias, Generator* generator)
    : Module("Conv2d"),
      options_{.stride = stride.value, .padding = padding.value, .dilation = dilation.value, .groups = groups} {
  FRUGAL_CHECK_VALUE(in_channels > 0 && out_channels > 0 && groups > 0 && in_channels % groups == 0 &&
                         out_channels % groups == 0,
                     "Conv2d: channels must be positive and divisible by groups, got in ", in_channels, ", out ",
                     out_channels, ", groups ", groups);
  const auto [kh, kw] = kernel_size.value;
  const bool positive = kh > 0 && kw > 0 && stride.value[0] > 0 && stride.value[1] > 0 && dilation.value[0] > 0 &&
                        dilation.value[1] > 0 && padding.value[0] >= 0 && padding.value[1] >= 0;
  FRUGAL_CHECK_VALUE(positive, "Conv2d: kernel ", kh, "x", kw, ", stride ", stride.value[0], "x", stride.value[1],
                     " and dilation ", dilation.value[0], "x", dilation.value[1], " must be positive, padding ",
                     padding.value[0], "x", padding.value[1], " non-negative");
  MemoryTagScope scope(MemoryTag::param);
  weight_ = register_parameter("weight", empty({out_channels, in_channels / groups, kh, kw}));
  if (bias) bias_ = register_parameter("bias", empty({out_channels}));
  reset_parameters(generator);
}

void Conv2d::reset_parameters(Generator* generator) { reset_weight_and_bias(weight_, bias_, generator); }

Tensor Conv2d::forward(const Tensor& x) { return F::conv2d(x, weight_, bias_, options_); }

// ---- BatchNorm2d

BatchNorm2d::BatchNorm2d(std::int64_t num_features, double eps, std::optional<double> momentum, bool affine,
                         bool track_running_stats)
    : Module("BatchNorm2d"), num_features_(num_features), eps_(eps), momentum_(momentum) {
  FRUGAL_CHECK_VALUE(num_features > 0, "BatchNorm2d: num_features must be positive, got ", num_features);
  FRUGAL_CHECK_VALUE(eps > 0.0, "BatchNorm2d: eps must be positive, got ", eps);
  FRUGAL_CHECK_VALUE(!momentum || (*momentum >= 0.0 && *momentum <= 1.0), "BatchNorm2d: momentum must be in [0, 1], got ",
                     momentum.value_or(0.0));
  MemoryTagScope scope(MemoryTag::param);
  if (affine) {
    weight_ = register_parameter("weight", ones({num_features}));
    bias_ = register_parameter("bias", zeros({num_features}));
  }
  if (track_running_stats) {
    running_mean_ = register_buffer("running_mean", zeros({num_features}));
    running_var_ = register_buffer("running_var", ones({num_features}));
    num_batches_tracked_ = register_buffer("num_batches_tracked", zeros({}, {.dtype = DType::i64}));
  }
}

Tensor BatchNorm2d::forward(const Tensor& x) { return normalize(x, false); }

Tensor BatchNorm2d::forward_relu6(const Tensor& x) {
  return observed_call([&] { return normalize(x, true); });
}

Tensor BatchNorm2d::normalize(const Tensor& x, bool fuse_relu6) {
  FRUGAL_CHECK_SHAPE(x.dim() == 4 && x.size(1) == num_features_, "BatchNorm2d(", num_features_, "): expected [N, ",
                     num_features_, ", H, W], got ", shape_str(x.shape()));
  // A checkpointed block recomputed during backward (nn/checkpoint.h) already updated the running
  // statistics in its forward: in training it then normalises with the batch statistics again but
  // leaves the running ones (and the batch count) alone. checkpoint_recomputing() is set by
  // nn::checkpoint's backward (nn/checkpoint.cpp), which a CheckpointedSequential's marked children
  // run through (the models mark them at construction, from their options).
  const bool update_running = is_training() && running_mean_.defined() && !checkpoint_recomputing();
  double momentum = momentum_.value_or(0.0);
  if (update_running) {
    // num_batches_tracked += 1 on its own device. The elementwise kernels are floating only; counts
    // below 2^53 are exact in f64.
    num_batches_tracked_.copy_(frugal::add(num_batches_tracked_.to(DType::f64), 1.0));
    if (!momentum_) momentum = 1.0 / num_batches_tracked_.item<double>();  // cumulative average (reads the count back)
  }
  // Batch statistics in training, and in eval mode too when there are no running statistics.
  const bool batch_statistics = is_training() || !running_mean_.defined();
  const bool pass_running = update_running || !is_training();
  // What backward keeps (x-hat alone, masks as bits, compressed) is the run's ActivationSaving, set
  // around forward and backward by the training step's ActivationSavingGuard (train/step.cpp). The
  // kernels are the process's batch_norm_backend() (kernels/batch_norm.h: cuDNN on CUDA, the fast
  // loops on the CPU, unless a benchmark or a test set another).
  return F::batch_norm(x, pass_running ? running_mean_ : Tensor(), pass_running ? running_var_ : Tensor(), weight_, bias_,
                       batch_statistics, momentum, eps_, fuse_relu6, activation_saving(), batch_norm_backend());
}

// ---- activations, dropout

// Whether the mask is kept as bits is the run's ActivationSaving (bit_masks), set around forward and
// backward by the training step's ActivationSavingGuard (train/step.cpp); standard outside it.
Tensor ReLU::forward(const Tensor& x) {
  if (!inplace_) return F::relu(x, activation_saving());
  Tensor y = x;  // a handle on the caller's tensor: its memory is overwritten
  return F::relu_(y, activation_saving());
}

Tensor ReLU6::forward(const Tensor& x) {  // as ReLU's
  if (!inplace_) return F::relu6(x, activation_saving());
  Tensor y = x;
  return F::relu6_(y, activation_saving());
}

Dropout::Dropout(double p, Generator* generator) : Module("Dropout"), p_(p), generator_(generator) {
  FRUGAL_CHECK_VALUE(p >= 0.0 && p < 1.0, "Dropout: p must be in [0, 1), got ", p);
}

Tensor Dropout::forward(const Tensor& x) { return F::dropout(x, p_, is_training(), generator_); }

// ---- pooling, reshaping

MaxPool2d::MaxPool2d(Size2 kernel_size, Size2 stride, Size2 padding, Size2 dilation, bool ceil_mode)
    : Module("MaxPool2d"),
      options_{.kernel = kernel_size.value, .stride = stride.value, .padding = padding.value, .dilation = dilation.value,
               .ceil_mode = ceil_mode} {}

Tensor MaxPool2d::forward(const Tensor& x) { return F::max_pool2d(x, options_); }

AvgPool2d::AvgPool2d(Size2 kernel_size, Size2 stride, Size2 padding, bool ceil_mode, bool count_include_pad)
    : Module("AvgPool2d"),
      options_{.kernel = kernel_size.value, .stride = stride.value, .padding = padding.value, .ceil_mode = ceil_mode,
               .count_include_pad = count_include_pad} {}

Tensor AvgPool2d::forward(const Tensor& x) { return F::avg_pool2d(x, options_); }

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) { return F::adaptive_avg_pool2d(x, output_size_); }

Tensor Flatten::forward(const Tensor& x) { return F::flatten(x, start_dim_); }

// ---- Sequential

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) : Sequential() {
  for (const std::shared_ptr<Module>& module : modules) push_back(module);
}

const std::shared_ptr<Module>& Sequential::operator[](std::size_t index) const {
  FRUGAL_CHECK_INDEX(index < size(), "Sequential: index ", index, " is out of range for ", size(), " modules");
  return named_children()[index].second;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& [name, module] : named_children()) y = (*module)(y);
  return y;
}

}  // namespace frugal::nn
