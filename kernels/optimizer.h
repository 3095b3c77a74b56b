// Fused optimizer steps: SGD (momentum, dampening, nesterov, weight decay), AdamW (decoupled
// weight decay, bias correction) and AdamW with 8-bit moments, each updating a whole list of
// parameters and their state in place, many tensors per kernel launch. The arithmetic follows
// torch.optim (kernels/optimizer_ops.h). Every tensor of one call shares a device and a floating
// dtype and is contiguous; state tensors have their parameter's shape and dtype, except the 8-bit
// moments' codes and scales (adamw8bit_step). The nn optimizers (nn/optim.h) group parameters so.
#pragma once

#include <span>

#include "core/tensor.h"
#include "kernels/optimizer_ops.h"

namespace frugal {

// momentum_buffers may be empty when config.momentum is 0.
void sgd_step(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> momentum_buffers,
              const SgdConfig& config);
void adamw_step(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> exp_avg,
                std::span<const Tensor> exp_avg_sq, const AdamWConfig& config);
// AdamW over f32 parameters whose moments are 8-bit codes (u8, one per element) with one f32 scale
// per kQuantBlock elements (Note [8-bit moments], kernels/optimizer_ops.h): the same update as
// adamw_step on the decoded moments, which are coded again afterwards.
void adamw8bit_step(std::span<const Tensor> params, std::span<const Tensor> grads, std::span<const Tensor> exp_avg_codes,
                    std::span<const Tensor> exp_avg_sq_codes, std::span<const Tensor> exp_avg_scales,
                    std::span<const Tensor> exp_avg_sq_scales, const AdamWConfig& config);
// The scales a state tensor of `numel` elements keeps: one per kQuantBlock, the last block partial.
inline std::int64_t quant_blocks(std::int64_t numel) { return (numel + optimizer::kQuantBlock - 1) / optimizer::kQuantBlock; }

}  // namespace frugal
