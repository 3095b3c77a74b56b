// nn/fold_batch_norm.h: the conditions and the folded weights (Note [BatchNorm folded into the
// convolution]).
#include "nn/fold_batch_norm.h"

#include "kernels/elementwise.h"
#include "nn/amp.h"
#include "nn/autograd.h"
#include "nn/checkpoint.h"

namespace frugal::nn {

bool folds_batch_norm(const Conv2d& conv, const BatchNorm2d& norm, const Tensor& x) {
  return !norm.is_training() && norm.running_mean().defined() && norm.running_mean().dtype() == DType::f32 &&
         conv.weight().dtype() == DType::f32 && x.dtype() == DType::f32 && x.device().is_cpu() &&
         conv.weight().device().is_cpu() && !autograd::grad_mode_enabled() && !checkpoint_first_run() &&
         !autocast_dtype().has_value() && !module_calls_observed();
}

Tensor conv_batch_norm_folded(const Conv2d& conv, const BatchNorm2d& norm, const Tensor& x, ConvActivation activation) {
  FRUGAL_CHECK_VALUE(folds_batch_norm(conv, norm, x), "conv_batch_norm_folded: BatchNorm can be folded only in eval "
                     "mode with running statistics, in f32 on the CPU, with autograd, autocast and module call "
                     "observers off and outside a checkpoint's first run");
  // s = gamma / sqrt(var + eps), t = beta - mean * s (gamma 1 and beta 0 without affine parameters),
  // and a convolution's own bias b scaled too: (v + b) * s + t = v * s + (b * s + t).
  Tensor scale = rsqrt(add(norm.running_var(), norm.eps()));
  if (norm.weight().defined()) scale = mul(scale, norm.weight());
  Tensor shift = neg(mul(norm.running_mean(), scale));
  if (norm.bias().defined()) shift = add(shift, norm.bias());
  if (conv.bias().defined()) shift = add(shift, mul(conv.bias(), scale));
  return conv2d(x, conv.weight(), shift, conv.options(), {.scale = scale, .activation = activation});
}

}  // namespace frugal::nn
