// Fused optimizer steps: SGD (momentum, dampening, nesterov, weight decay) and AdamW (decoupled
// weight decay, bias correction), each updating a whole list of parameters and their state in
// place, many tensors per kernel launch. The arithmetic follows torch.optim (kernels/optimizer_ops.h).
// Every tensor of one call shares a device and a floating dtype and is contiguous; state tensors
// have their parameter's shape and dtype. The nn optimizers (nn/optim.h) group parameters so.
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

}  // namespace frugal
