// The batch norm kernels each backend implements under one name: cpu::, cuda:: and cuda_emulated::,
// plus cuDNN on the GPU; on the CPU the dispatcher runs cpu::fast::, checked against the reference
// cpu::. No CUDA types here.
// Every backend sees the operands kernels/batch_norm.cpp prepares:
//   x, y, grad, fused_output   the input's dtype, contiguous [N, C, S] (BatchNormShape)
//   per-channel arrays [C]     the statistics dtype, contiguous: f64 for f64 input, else f32
//                              (mean, invstd, weight, bias, running statistics, the two sums)
// weight and bias are both null when not affine, the running statistics both null when not
// tracked, fused_output null unless a ReLU6 was fused into the forward. The dispatcher calls no
// kernel on an empty input.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/half.h"
#include "kernels/batch_norm_ops.h"

namespace frugal {

// statistics:      save_mean, save_invstd from the batch, and the running statistics updated
// normalize:       y = (x - mean) * invstd * weight + bias, then ReLU6 when asked
// backward_sums:   sum_dy = sum(dy), sum_dy_xhat = sum(dy * xhat) per channel (dy gated by the
//                  fused ReLU6 when fused_output is set)
// backward_input:  grad_input (training: with the batch statistics' terms; eval: without)
#define FRUGAL_BATCH_NORM_KERNELS                                                                                     \
  void batch_norm_statistics(DType dtype, const void* x, const BatchNormShape& shape, double momentum, double eps,    \
                             void* save_mean, void* save_invstd, void* running_mean, void* running_var);             \
  void batch_norm_normalize(DType dtype, const void* x, const BatchNormShape& shape, const void* mean,                \
                            const void* invstd, const void* weight, const void* bias, bool relu6, void* y);          \
  void batch_norm_backward_sums(DType dtype, const void* grad, const void* x, const void* fused_output,              \
                                const BatchNormShape& shape, const void* mean, const void* invstd, void* sum_dy,     \
                                void* sum_dy_xhat);                                                                  \
  void batch_norm_backward_input(DType dtype, const void* grad, const void* x, const void* fused_output,             \
                                 const BatchNormShape& shape, const void* mean, const void* invstd,                  \
                                 const void* weight, const void* sum_dy, const void* sum_dy_xhat, bool training,     \
                                 void* grad_input);

// The kernels that work from a saved xhat (Note [One saved tensor per BN-ReLU6], batch_norm_ops.h),
// operands as above plus xhat (the input's dtype, [N, C, S]).
// normalize_saving:          xhat = (x - mean) * invstd stored, then y from the stored xhat
// affine:                    y = weight * xhat + bias, then ReLU6 when asked: normalize_saving's y
// backward_sums_from_xhat:   sum_dy, sum_dy_xhat; with relu6, dy gated by the y recomputed from xhat
// backward_input_from_xhat:  grad_input = weight * invstd * (dy - ...), as backward_input
#define FRUGAL_BATCH_NORM_XHAT_KERNELS                                                                                \
  void batch_norm_normalize_saving(DType dtype, const void* x, const BatchNormShape& shape, const void* mean,         \
                                   const void* invstd, const void* weight, const void* bias, bool relu6, void* xhat, \
                                   void* y);                                                                         \
  void batch_norm_affine(DType dtype, const void* xhat, const BatchNormShape& shape, const void* weight,              \
                         const void* bias, bool relu6, void* y);                                                     \
  void batch_norm_backward_sums_from_xhat(DType dtype, const void* grad, const void* xhat,                           \
                                          const BatchNormShape& shape, const void* weight, const void* bias,         \
                                          bool relu6, void* sum_dy, void* sum_dy_xhat);                              \
  void batch_norm_backward_input_from_xhat(DType dtype, const void* grad, const void* xhat,                          \
                                           const BatchNormShape& shape, const void* invstd, const void* weight,      \
                                           const void* bias, bool relu6, const void* sum_dy,                         \
                                           const void* sum_dy_xhat, bool training, void* grad_input);

// the readable reference (kernels/cpu/batch_norm.cpp)
namespace cpu { FRUGAL_BATCH_NORM_KERNELS FRUGAL_BATCH_NORM_XHAT_KERNELS }
namespace cpu::fast { FRUGAL_BATCH_NORM_KERNELS }     // f32 vectorised (cpu/batch_norm_fast.cpp)
namespace cuda { FRUGAL_BATCH_NORM_KERNELS FRUGAL_BATCH_NORM_XHAT_KERNELS }  // hand-written (BatchNormImpl::native)
namespace cuda_emulated { FRUGAL_BATCH_NORM_KERNELS FRUGAL_BATCH_NORM_XHAT_KERNELS }  // the same, in the emulator

// The CPU's training forward and backward (kernels/cpu/batch_norm_fast.cpp), what its dispatcher
// runs: the statistics then normalize, and the sums then the input gradient; for f32 the
// statistics and the sums read the tensors in memory order (Note [Sums in memory order]), other
// dtypes run the reference's kernels. batch_norm_backward computes the sums only when sum_dy is set
// (null both when not needed). With mask_from_input, on planes of at least 16 floats, it recomputes
// the fused ReLU6's output from x with the forward's mean, invstd, weight and bias
// (Note [The ReLU6 mask from the input]) instead of reading fused_output, which must still be
// given: smaller planes read it. relu6_mask_from_input_pays says where that is worth its arithmetic:
// tensors too large to still be in cache.
namespace cpu::fast {
bool relu6_mask_from_input_pays(const BatchNormShape& shape);
void batch_norm_train_forward(DType dtype, const void* x, const BatchNormShape& shape, double momentum, double eps,
                              const void* weight, const void* bias, bool relu6, void* save_mean, void* save_invstd,
                              void* running_mean, void* running_var, void* y);
void batch_norm_backward(DType dtype, const void* grad, const void* x, const void* fused_output,
                         const BatchNormShape& shape, const void* mean, const void* invstd, const void* weight,
                         const void* bias, bool mask_from_input, bool training, void* sum_dy, void* sum_dy_xhat,
                         void* grad_input);

// The kernels from a saved xhat for f32 (other dtypes run the reference's): normalize_saving and
// affine by planes, the training forward and the backward a channel at a time (per-channel sweeps).
void batch_norm_train_forward_saving(DType dtype, const void* x, const BatchNormShape& shape, double momentum,
                                     double eps, const void* weight, const void* bias, bool relu6, void* save_mean,
                                     void* save_invstd, void* running_mean, void* running_var, void* xhat, void* y);
void batch_norm_normalize_saving(DType dtype, const void* x, const BatchNormShape& shape, const void* mean,
                                 const void* invstd, const void* weight, const void* bias, bool relu6, void* xhat,
                                 void* y);
void batch_norm_affine(DType dtype, const void* xhat, const BatchNormShape& shape, const void* weight, const void* bias,
                       bool relu6, void* y);
void batch_norm_backward_from_xhat(DType dtype, const void* grad, const void* xhat, const BatchNormShape& shape,
                                   const void* invstd, const void* weight, const void* bias, bool relu6, bool training,
                                   void* sum_dy, void* sum_dy_xhat, void* grad_input);

// The same with xhat kept compact for f32 input: in bf16, and with relu6 the mask 0 < y < 6 as bits
// (pack_mask_between's layout) when `mask` is set, written by the forward's own pass and read by the
// backward's (Note [Compact xhat in the same pass]): the same bits as casting xhat and packing,
// widening and applying the mask as separate passes. keeps_compact_xhat says for which shapes (planes
// of at least 16 elements, a multiple of 8 with a mask); the others take the separate passes. With a
// mask, the backward gates dy by its bits instead of recomputing y.
bool keeps_compact_xhat(DType dtype, const BatchNormShape& shape, bool mask);
void batch_norm_train_forward_compact(const float* x, const BatchNormShape& shape, double momentum, double eps,
                                      const float* weight, const float* bias, bool relu6, float* save_mean,
                                      float* save_invstd, float* running_mean, float* running_var, BFloat16* xhat,
                                      std::uint8_t* mask, float* y);
void batch_norm_normalize_compact(const float* x, const BatchNormShape& shape, const float* mean, const float* invstd,
                                  const float* weight, const float* bias, bool relu6, BFloat16* xhat,
                                  std::uint8_t* mask, float* y);
void batch_norm_affine_compact(const BFloat16* xhat, const BatchNormShape& shape, const float* weight,
                               const float* bias, bool relu6, float* y);
void batch_norm_backward_from_compact_xhat(const float* grad, const BFloat16* xhat, const std::uint8_t* mask,
                                           const BatchNormShape& shape, const float* invstd, const float* weight,
                                           const float* bias, bool relu6, bool training, float* sum_dy,
                                           float* sum_dy_xhat, float* grad_input);
// The backward from an f32 xhat with the ReLU6 mask as bits (an xhat decoded from 8-bit codes), dy
// gated by the bits in registers as the compact backward gates it:
// the same bits as apply_packed_mask and then the backward from xhat without ReLU6, without the
// gated copy of dy that those separate passes allocate. For the shapes keeps_compact_xhat(f32,
// shape, true) accepts.
void batch_norm_backward_from_xhat_bits(const float* grad, const float* xhat, const std::uint8_t* mask,
                                        const BatchNormShape& shape, const float* invstd, const float* weight,
                                        bool training, float* sum_dy, float* sum_dy_xhat, float* grad_input);
}  // namespace cpu::fast

namespace cuda {
// The library implementation (BatchNormImpl::cudnn, kernels/cuda/cudnn_batch_norm.cpp). cuDNN needs
// weight and bias (the dispatcher passes ones and zeros when not affine) and cannot run in the
// emulator, so it is declared apart. Backward: training mode only, on an already gated gradient.
void cudnn_batch_norm_train(DType dtype, const void* x, const BatchNormShape& shape, const void* weight,
                            const void* bias, double momentum, double eps, void* running_mean, void* running_var,
                            void* y, void* save_mean, void* save_invstd);
void cudnn_batch_norm_eval(DType dtype, const void* x, const BatchNormShape& shape, const void* weight, const void* bias,
                           const void* running_mean, const void* running_var, double eps, void* y);
void cudnn_batch_norm_backward(DType dtype, const void* grad, const void* x, const BatchNormShape& shape,
                               const void* weight, const void* save_mean, const void* save_invstd, void* grad_input,
                               void* grad_weight, void* grad_bias);
}  // namespace cuda

#undef FRUGAL_BATCH_NORM_KERNELS
#undef FRUGAL_BATCH_NORM_XHAT_KERNELS

}  // namespace frugal
