// The per-row arithmetic of cross-entropy, written once as FRUGAL_HOST_DEVICE code for the CPU loop
// and the CUDA kernels. For logits x of a row, its target t and label smoothing eps over C classes
// (torch.nn.functional.cross_entropy with class-index targets):
//   loss  = (1 - eps) * (-log p_t) + eps / C * sum_c (-log p_c),      p = softmax(x)
//   dloss/dx_c = p_c - (1 - eps) * [c == t] - eps / C
// With -log p_c = max + log(sum) - x_c (kernels/softmax_ops.h), the loss needs only the row's
// LogSumExp, the sum of its logits and x_t: one pass over the row, and log-softmax never stored.
// Rows whose target is ignore_index count for nothing: loss 0, gradient 0, and not in the mean's
// denominator. Not here: loops, launches or checks (kernels/loss.cpp).
#pragma once

#include <cstdint>

#include "core/host_device.h"
#include "kernels/softmax_ops.h"

namespace frugal {

enum class LossReduction : std::uint8_t { none, mean, sum };

struct CrossEntropyOptions {
  LossReduction reduction = LossReduction::mean;
  double label_smoothing = 0.0;      // eps, in [0, 1]
  std::int64_t ignore_index = -100;  // PyTorch's default: never a class
};

enum class TargetKind : std::uint8_t { counted, ignored, out_of_range };

// ignore_index wins even when it names a real class, as in PyTorch.
FRUGAL_HOST_DEVICE inline TargetKind classify_target(std::int64_t target, std::int64_t cols, std::int64_t ignore_index) {
  if (target == ignore_index) return TargetKind::ignored;
  return target >= 0 && target < cols ? TargetKind::counted : TargetKind::out_of_range;
}

// One row's pass: its LogSumExp, and the sum of its logits for the smoothing term.
template <typename C>
struct CrossEntropyRow {
  LogSumExp<C> lse;
  C logit_sum = C(0);
  FRUGAL_HOST_DEVICE void add(C x) {
    lse.add(x);
    logit_sum += x;
  }
  FRUGAL_HOST_DEVICE void merge(const CrossEntropyRow& other) {
    lse.merge(other.lse);
    logit_sum += other.logit_sum;
  }
};

template <typename C>
FRUGAL_HOST_DEVICE inline C cross_entropy_loss(const CrossEntropyRow<C>& row, C target_logit, std::int64_t cols, C smoothing) {
  const SoftmaxRow<C> p(row.lse);
  const C nll = -p.log_softmax(target_logit);
  // Without smoothing the mean term is not computed at all, so a -inf logit elsewhere in the row
  // (a masked class) leaves the loss finite, as in PyTorch.
  if (smoothing == C(0)) return nll;
  const C mean_nll = p.log_sum - (row.logit_sum / static_cast<C>(cols) - p.max);  // mean_c(-log p_c)
  return (C(1) - smoothing) * nll + smoothing * mean_nll;
}

// One element of d loss / d logits, times the row's scale (see row_scale).
template <typename C>
FRUGAL_HOST_DEVICE inline C cross_entropy_grad(const SoftmaxRow<C>& row, C x, bool is_target, std::int64_t cols, C smoothing,
                                               C scale) {
  const C target_part = is_target ? C(1) - smoothing : C(0);
  return (row.softmax(x) - target_part - smoothing / static_cast<C>(cols)) * scale;
}

// The factor a row's gradient carries: the upstream gradient of its loss (its own for reduction
// none, the one scalar otherwise), divided by the number of counted rows for the mean.
template <typename C>
FRUGAL_HOST_DEVICE inline C row_scale(C grad, LossReduction reduction, double counted) {
  return reduction == LossReduction::mean ? grad / static_cast<C>(counted) : grad;
}

// The counted rows' losses summed, and how many there are, in double whatever the logits' dtype.
// The mean of no counted rows is 0 / 0 = NaN, as in PyTorch.
struct LossTotal {
  double sum = 0.0, count = 0.0;
  FRUGAL_HOST_DEVICE void add(double loss) {
    sum += loss;
    count += 1.0;
  }
  FRUGAL_HOST_DEVICE void merge(const LossTotal& other) {
    sum += other.sum;
    count += other.count;
  }
  FRUGAL_HOST_DEVICE double value(LossReduction reduction) const { return reduction == LossReduction::mean ? sum / count : sum; }
};

}  // namespace frugal
