// nn/fold_batch_norm.h: the conditions and the folded weights (Note [BatchNorm folded into the
// convolution]).
#include "nn/fold_batch_norm.h"

#include "kernels/elementwise.h"
#include "nn/amp.h"
#include "nn/autograd.h"

namespace frugal::nn {

bool folds_batch_norm(const BatchNorm2d& norm) {
  return !norm.is_training() && norm.running_mean().defined() && !autograd::grad_mode_enabled() &&
         !autocast_dtype().has_value() && !module_calls_observed();
}

Tensor conv_batch_norm_folded(const Conv2d& conv, const BatchNorm2d& norm, const Tensor& x, ConvActivation activation) {
  FRUGAL_CHECK_VALUE(folds_batch_norm(norm), "conv_batch_norm_folded: BatchNorm can be folded only in eval mode with "
                     "running statistics, autograd and autocast off and no module call observer");
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
