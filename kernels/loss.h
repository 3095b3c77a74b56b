// Cross-entropy for classification, fused: log-softmax and the negative log-likelihood in one pass
// over each row of logits, as torch.nn.functional.cross_entropy with class-index targets:
//   loss_i = (1 - eps) * (-log p_i[t_i]) + eps / C * sum_c (-log p_i[c]),   p_i = softmax(logits_i)
// Shapes (N rows, C classes): logits [N, C] in any floating dtype (f16/bf16 accumulate in float, the
// result is in the logits' dtype), targets [N] i64 on the same device.
//   reduction none: [N], 0 for rows whose target is ignore_index;
//   mean: 0-dim, over the rows that count (NaN when none does); sum: 0-dim.
// A target neither in [0, C) nor ignore_index is an IndexError naming its row, on every device; on
// CUDA finding out costs a synchronisation per call (kernels/cuda/loss.cu).
// Kernels: kernels/cpu/loss.cpp, kernels/cuda/loss.cu; the per-row arithmetic: kernels/loss_ops.h.
// Not here: logits with spatial dims ([N, C, d...]), class weights, probability targets.
#pragma once

#include "core/tensor.h"
#include "kernels/loss_ops.h"

namespace frugal {

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const CrossEntropyOptions& options = {});

// d loss / d logits, [N, C] in the logits' dtype. grad_loss has the forward result's shape ([N] for
// reduction none, 0-dim otherwise) and dtype. Per element:
//   (softmax - (1 - eps) * onehot(t) - eps / C) * grad   (divided by the counted rows for the mean),
// and 0 on rows whose target is ignore_index.
Tensor cross_entropy_backward(const Tensor& grad_loss, const Tensor& logits, const Tensor& targets,
                              const CrossEntropyOptions& options = {});

// How many rows' argmax (the first, on ties) equals their target, as a 0-dim i64 tensor: the
// numerator of accuracy. A target outside [0, C), such as the default ignore_index -100, never
// matches. Composed from argmax and elementwise ops.
Tensor count_correct(const Tensor& logits, const Tensor& targets);

}  // namespace frugal
