// Batch normalisation with PyTorch's semantics (torch.nn.functional.batch_norm), its backward, and
// an optional fused ReLU6 (MobileNetV2's conv-BN-ReLU6 blocks). Kernels: kernels/cpu/batch_norm_fast.cpp
// (f32) beside the reference kernels/cpu/batch_norm.cpp (every dtype), kernels/cuda/batch_norm.cu
// (hand-written), kernels/cuda/cudnn_batch_norm.cpp (cuDNN).
// Not here: the module that owns the parameters and chooses train or eval (nn/).
//
// Shapes: x [N, C] or [N, C, *] (images: [N, C, H, W]); statistics per channel over every other dim.
// weight, bias [C], both or neither (affine); running_mean, running_var [C], both or neither
// (track_running_stats). They share x's dtype, or are f32 for f16/bf16 x (mixed precision keeps BN
// parameters in f32). Statistics accumulate in double; save_mean and save_invstd are f64 for f64
// input and f32 otherwise. The output is contiguous; a strided x is read through a contiguous copy.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/cuda_status.h"
#include "core/tensor.h"

namespace frugal {

// The implementation on CUDA: cuDNN (the default, until a GPU measurement says the hand-written
// kernels are as fast) or frugal's own kernels.
enum class BatchNormImpl : std::uint8_t { native, cudnn };
std::string_view batch_norm_impl_name(BatchNormImpl impl);

// Which kernels a call runs; every function below takes one, last. On the CPU, f32 runs the fast
// loops (kernels/cpu/batch_norm_fast.cpp) unless cpu_reference asks for the readable reference,
// which every other dtype runs: for comparisons that must hold to the bit across dtypes (the
// reference sums differently from the fast loops).
struct BatchNormBackend {
  BatchNormImpl cuda = kCudaLibraries ? BatchNormImpl::cudnn : BatchNormImpl::native;  // core/cuda_status.h
  bool cpu_reference = false;
};

// The process's choice, the default of every function below and what nn::BatchNorm2d passes: the
// defaults above unless a benchmark or a test comparing implementations sets it here.
BatchNormBackend batch_norm_backend();
void set_batch_norm_impl(BatchNormImpl impl);
BatchNormImpl batch_norm_impl();
void set_batch_norm_cpu_reference(bool on);
bool batch_norm_cpu_reference();

struct BatchNormOutput {
  Tensor output;                 // x's shape and dtype
  Tensor save_mean, save_invstd;  // [C], for the backward: batch mean and 1 / sqrt(biased var + eps)
};

// Training mode: normalises with the batch's mean and biased variance, and updates the running
// statistics in place (bumping their version): running = (1 - momentum) * running + momentum * batch,
// with the unbiased variance for running_var. ValueError unless each channel has more than one value.
// fuse_relu6 clamps the output to [0, 6] in the same pass.
BatchNormOutput batch_norm_train(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                                 const Tensor& running_var, double momentum, double eps, bool fuse_relu6 = false,
                                 const BatchNormBackend& backend = batch_norm_backend());

// Eval mode: normalises with the running statistics (both required).
Tensor batch_norm_eval(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                       const Tensor& running_var, double eps, bool fuse_relu6 = false,
                       const BatchNormBackend& backend = batch_norm_backend());

// 1 / sqrt(running_var + eps) in the statistics dtype: the save_invstd of an eval-mode forward, for
// batch_norm_backward(..., save_mean = running_mean, save_invstd = this, training = false).
Tensor batch_norm_invstd(const Tensor& running_var, double eps);

struct BatchNormGrads {
  Tensor input;         // x's shape and dtype
  Tensor weight, bias;  // weight's dtype; undefined when not affine (weight undefined)
};

// The gradients of either forward. training: the batch statistics depend on x (save_mean and
// save_invstd from batch_norm_train); eval: they are constants (running_mean and batch_norm_invstd).
// fused_output: the output of a forward run with fuse_relu6, whose ReLU6 the gradient goes back
// through first (passing only where 0 < output < 6); undefined otherwise. bias: the forward's bias,
// optional; given with fused_output, the CPU's f32 backward recomputes the output from x with the
// forward's arithmetic where reading it would come from memory (tensors of 12 MiB and more), the
// same mask (Note [The ReLU6 mask from the input], kernels/cpu/batch_norm_fast.cpp).
BatchNormGrads batch_norm_backward(const Tensor& grad_output, const Tensor& x, const Tensor& weight,
                                   const Tensor& save_mean, const Tensor& save_invstd, bool training,
                                   const Tensor& fused_output = Tensor(),
                                   const BatchNormBackend& backend = batch_norm_backend(), const Tensor& bias = Tensor());

// ---- Saving xhat alone (Note [One saved tensor per BN-ReLU6], kernels/batch_norm_ops.h)
// A BN-ReLU6 block may keep only xhat = (x - mean) * invstd for its backward: the output y, the
// ReLU6 mask 0 < y < 6 and the next layer's input are recomputed from it by batch_norm_affine, the
// same bits as the forward's, since the forward computes y from xhat as stored. On CUDA these run
// frugal's kernels whatever the backend's cuda says (cuDNN does not return xhat), so the statistics
// are batch_norm_train's to the bit under BatchNormImpl::native, and to rounding under cudnn.
struct BatchNormNormalizedOutput {
  Tensor output;                  // weight * xhat + bias (clamped to [0, 6] with fuse_relu6), x's dtype
  Tensor normalized;              // xhat, x's shape, contiguous; x's dtype, or bf16 when NormalizedForm asks
  Tensor save_mean, save_invstd;  // as BatchNormOutput's (eval: a copy of running_mean, batch_norm_invstd(running_var))
  Tensor mask;                    // u8 bits of 0 < output < 6 (pack_mask_between's layout) when asked, else undefined
};

// How xhat is kept for backward when the graph saves below the minimum (nn/saved_activations.h).
// The output is always computed from the f32 xhat: only what is kept changes. On the CPU, for f32
// planes of at least 16 elements (a multiple of 8 with the mask), the forward's own pass writes both
// (Note [Compact xhat in the same pass], kernels/cpu/batch_norm_fast.cpp); elsewhere xhat is cast and
// the mask packed after it, the same bits.
struct NormalizedForm {
  bool bf16 = false;        // xhat rounded to bf16 (f32 input only: DTypeError otherwise)
  bool relu6_mask = false;  // with fuse_relu6: the mask as bits, in BatchNormNormalizedOutput::mask
};

// batch_norm_train (the same statistics, running-statistics update and errors) that also returns xhat.
BatchNormNormalizedOutput batch_norm_train_normalized(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                                      const Tensor& running_mean, const Tensor& running_var,
                                                      double momentum, double eps, bool fuse_relu6 = false,
                                                      NormalizedForm form = {},
                                                      const BatchNormBackend& backend = batch_norm_backend());

// batch_norm_eval that also returns xhat, normalised with the running statistics.
BatchNormNormalizedOutput batch_norm_eval_normalized(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                                     const Tensor& running_mean, const Tensor& running_var, double eps,
                                                     bool fuse_relu6 = false, NormalizedForm form = {},
                                                     const BatchNormBackend& backend = batch_norm_backend());

// y = weight * normalized + bias per channel (clamped to [0, 6] with fuse_relu6): the forward's
// output, bit for bit, given the forward's `normalized`, weight and bias. y is in output_dtype
// (default: normalized's); a bf16 xhat may give an f32 y, from xhat widened exactly.
Tensor batch_norm_affine(const Tensor& normalized, const Tensor& weight, const Tensor& bias, bool fuse_relu6 = false,
                         std::optional<DType> output_dtype = std::nullopt,
                         const BatchNormBackend& backend = batch_norm_backend());

// batch_norm_backward from xhat: with fuse_relu6 the gradient passes where 0 < y < 6, y recomputed
// as batch_norm_affine does, or read from relu6_mask's bits when given (pack_mask_between's layout
// over the output; fuse_relu6 must be set). weight and bias both or neither (not affine: gamma 1,
// beta 0); save_invstd from the forward. normalized in grad_output's dtype, or bf16 for an f32
// gradient (widened exactly). The sums run in double, as batch_norm_backward's.
BatchNormGrads batch_norm_backward_normalized(const Tensor& grad_output, const Tensor& normalized, const Tensor& weight,
                                              const Tensor& bias, const Tensor& save_invstd, bool training,
                                              bool fuse_relu6 = false, const Tensor& relu6_mask = Tensor(),
                                              const BatchNormBackend& backend = batch_norm_backend());

}  // namespace frugal
