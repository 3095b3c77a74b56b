// Differentiable ops: the kernels of kernels/ recorded for autograd (nn/function.h), in the spirit of
// torch.nn.functional. Same names and arguments as the kernels; each saves exactly what its backward
// reads (documented per op where it is a choice that costs memory). Broadcasting ops reduce their
// gradients back to each operand's shape.
// Not here: the kernels (kernels/), modules with parameters (nn/layers.h).
#pragma once

#include "core/random.h"
#include "kernels/batch_norm.h"
#include "kernels/conv.h"
#include "kernels/loss.h"
#include "kernels/pool.h"
#include "nn/saved_activations.h"

namespace frugal::functional {

// ---- elementwise (broadcasting)
Tensor add(const Tensor& a, const Tensor& b);
// a + b, whose result backward makes again from a and b instead of keeping it, when an addend is
// itself rebuilt (a BatchNorm output saved as x-hat, nn/saved_activations.h) and the shapes match;
// otherwise exactly add (no addend is rebuilt unless BatchNorm saved from its output). For a residual
// block's sum, which can call it whatever the saving mode.
Tensor add_rebuilt(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);  // saves a and b
Tensor div(const Tensor& a, const Tensor& b);  // saves a and b
Tensor add(const Tensor& x, double s);
Tensor mul(const Tensor& x, double s);
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);   // saves its output
Tensor log(const Tensor& x);   // saves x
Tensor sqrt(const Tensor& x);  // saves its output
Tensor pow(const Tensor& x, double p);  // saves x
// ReLU and ReLU6 save their output (relu(x) > 0 exactly where x > 0; 0 < y < 6 exactly where
// 0 < x < 6). `saving` says what is kept (nn/saved_activations.h): standard by default; with
// bit_masks, the mask 0 < y < top as 1 bit per element instead of the output (the same gradient).
Tensor relu(const Tensor& x, const nn::ActivationSaving& saving = {});
Tensor relu6(const Tensor& x, const nn::ActivationSaving& saving = {});
Tensor sigmoid(const Tensor& x);  // saves its output
Tensor tanh(const Tensor& x);     // saves its output
// In place, as torchvision's ReLU6(inplace=True): x's memory is reused, so the op before it need
// not keep a separate output. ValueError for a leaf that requires grad. Saves the result (which
// is x), so modifying x again before backward is caught by the version check; with bit_masks, the
// mask as bits, as the out-of-place ops.
Tensor& relu_(Tensor& x, const nn::ActivationSaving& saving = {});
Tensor& relu6_(Tensor& x, const nn::ActivationSaving& saving = {});

// ---- reductions
Tensor sum(const Tensor& x, std::vector<std::int64_t> dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, std::vector<std::int64_t> dims = {}, bool keepdim = false);

// ---- dtype (the gradient is cast back to the input's dtype)
Tensor to(const Tensor& x, DType dtype);

// ---- shapes (views of their input; gradients are reshaped back)
Tensor reshape(const Tensor& x, Shape shape);
Tensor flatten(const Tensor& x, std::int64_t start_dim = 0);  // dims from start_dim on merged into one
Tensor permute(const Tensor& x, std::vector<std::int64_t> dims);
Tensor transpose(const Tensor& x, std::int64_t dim0, std::int64_t dim1);

// ---- linear algebra and convolution (under nn::AutocastGuard: computed in f16/bf16, nn/amp.h)
Tensor matmul(const Tensor& a, const Tensor& b);  // saves a and b
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());  // saves x and weight
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Conv2dOptions& options = {});

// ---- pooling (max pooling saves its indices, not its input)
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& options);
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& options);
Tensor adaptive_avg_pool2d(const Tensor& x, std::array<std::int64_t, 2> output_size);

// ---- normalisation, dropout, softmax (softmax and the losses: in f32 under autocast)
// Batch norm as torch.nn.functional.batch_norm; in training, running statistics (if given) are
// updated in place and the batch statistics saved for backward. fuse_relu6 applies ReLU6 in the
// same pass and saves the output instead of a separate activation. `saving` says what is kept for
// backward (nn/saved_activations.h): standard by default; with bn_from_output, x-hat alone, and the
// output carries how to rebuild it; with bit_masks, a fused ReLU6's mask as bits. `backend` picks
// the kernels (kernels/batch_norm.h), for the forward and its backward.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps, bool fuse_relu6 = false,
                  const nn::ActivationSaving& saving = {}, const BatchNormBackend& backend = batch_norm_backend());
// Dropout saves no tensor for backward, only its draw's (seed, offset): the backward recomputes the mask.
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* generator = nullptr);
Tensor log_softmax(const Tensor& x, std::int64_t dim);  // saves its output
Tensor softmax(const Tensor& x, std::int64_t dim);      // saves its output

// ---- losses
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options = {});
Tensor mse_loss(const Tensor& input, const Tensor& target, LossReduction reduction = LossReduction::mean);

}  // namespace frugal::functional
