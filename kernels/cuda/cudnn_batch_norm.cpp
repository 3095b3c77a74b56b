// The library batch norm on a GPU (BatchNormImpl::cudnn): cuDNN's legacy API (deprecated in v9 but
// kept: cudnnBatchNormalizationForwardTraining, ...ForwardInference, ...Backward) in
// CUDNN_BATCHNORM_SPATIAL mode, statistics per channel over N and every spatial position.
// cuDNN's save outputs are the same mean and 1 / sqrt(biased var + eps) as frugal's kernels', and
// its running variance is updated with the unbiased variance, as frugal's is, so the two
// implementations can be mixed between forward and backward.
// Not here, done around it by kernels/batch_norm.cpp: a fused ReLU6 (the legacy API fuses only
// ReLU, in its Ex variants), the eval-mode backward (the legacy API has none), absent weight and
// bias (cuDNN always scales and shifts). Not emulated: this needs a GPU.
#include <array>

#include "kernels/cuda/library_check.h"
#include "kernels/batch_norm_backends.h"
#include "kernels/cuda/cudnn_support.h"

namespace frugal::cuda {

namespace {
constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL;

// The data as [N, C, S, 1] (spatial mode folds every dim after C alike) and the per-channel
// tensors as [1, C, 1, 1] in the statistics dtype: float for f16/bf16/f32 data, double for f64,
// which is what cuDNN wants for bnScaleBiasMeanVarDesc.
struct Descriptors {
  static constexpr std::int64_t kOne = 1;
  Descriptors(DType dtype, const BatchNormShape& s)
      : data(dtype, std::array{s.batch, s.channels, s.spatial, kOne},
             std::array{s.channels * s.spatial, s.spatial, kOne, kOne}),
        per_channel(dtype == DType::f64 ? DType::f64 : DType::f32, std::array{kOne, s.channels, kOne, kOne},
                    std::array{s.channels, kOne, kOne, kOne}) {}
  CudnnTensor data, per_channel;
};

// cuDNN's blend factors (result = alpha * computed + beta * destination) are host scalars, double
// for f64 data and float otherwise. alpha = 1, beta = 0: overwrite.
const void* one(DType dtype) {
  static const float f = 1.0f;
  static const double d = 1.0;
  return dtype == DType::f64 ? static_cast<const void*>(&d) : &f;
}
const void* zero(DType dtype) {
  static const float f = 0.0f;
  static const double d = 0.0;
  return dtype == DType::f64 ? static_cast<const void*>(&d) : &f;
}

void check_eps(double eps) {
  FRUGAL_CHECK_VALUE(eps >= CUDNN_BN_MIN_EPSILON, "batch norm (cuDNN): eps ", eps, " is below CUDNN_BN_MIN_EPSILON (",
                     CUDNN_BN_MIN_EPSILON, ")");
}
}  // namespace

void cudnn_batch_norm_train(DType dtype, const void* x, const BatchNormShape& shape, const void* weight,
                            const void* bias, double momentum, double eps, void* running_mean, void* running_var,
                            void* y, void* save_mean, void* save_invstd) {
  check_eps(eps);
  const Descriptors d(dtype, shape);
  // Null running statistics (both, as here) tell cuDNN not to track them.
  FRUGAL_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      cudnn_handle(), kMode, one(dtype), zero(dtype), d.data.get(), x, d.data.get(), y, d.per_channel.get(), weight, bias,
      momentum, running_mean, running_var, eps, save_mean, save_invstd));
}

void cudnn_batch_norm_eval(DType dtype, const void* x, const BatchNormShape& shape, const void* weight, const void* bias,
                           const void* running_mean, const void* running_var, double eps, void* y) {
  check_eps(eps);
  const Descriptors d(dtype, shape);
  FRUGAL_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(cudnn_handle(), kMode, one(dtype), zero(dtype), d.data.get(),
                                                             x, d.data.get(), y, d.per_channel.get(), weight, bias,
                                                             running_mean, running_var, eps));
}

void cudnn_batch_norm_backward(DType dtype, const void* grad, const void* x, const BatchNormShape& shape,
                               const void* weight, const void* save_mean, const void* save_invstd, void* grad_input,
                               void* grad_weight, void* grad_bias) {
  const Descriptors d(dtype, shape);
  // With the saved mean and invstd given, cuDNN does not recompute the statistics, so eps (already
  // inside save_invstd) is unused; the smallest value it accepts is passed.
  FRUGAL_CUDNN_CHECK(cudnnBatchNormalizationBackward(cudnn_handle(), kMode, one(dtype), zero(dtype), one(dtype), zero(dtype),
                                                     d.data.get(), x, d.data.get(), grad, d.data.get(), grad_input,
                                                     d.per_channel.get(), weight, grad_weight, grad_bias,
                                                     CUDNN_BN_MIN_EPSILON, save_mean, save_invstd));
}

}  // namespace frugal::cuda
