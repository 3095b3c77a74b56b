// CPU fused cross-entropy (kernels/loss_backends.h): one row per parallel_for iteration, one pass
// over the row for its LogSumExp and logit sum (kernels/loss_ops.h), then the loss, or a second pass
// writing the row's gradient. A bad target cannot throw out of the parallel loop: the loop skips
// bad rows, and the first one is found afterwards by a pass over the targets and returned, as the
// CUDA kernels return it through their flag.
// Not here: the checks and the IndexError (kernels/loss.cpp).
#include <algorithm>

#include "core/convert.h"
#include "core/cpu/parallel.h"
#include "kernels/loss_backends.h"
#include "kernels/visit_floating.h"

namespace frugal::cpu {

namespace {

// The counted rows' total: their losses from `row_losses`, or (null) only how many there are.
LossTotal total_of(const CrossEntropyArgs& a, const double* row_losses) {
  LossTotal total;
  for (std::int64_t r = 0; r < a.rows; ++r)
    if (classify_target(a.targets[r * a.target_stride], a.cols, a.options.ignore_index) == TargetKind::counted)
      total.add(row_losses ? row_losses[r] : 0.0);
  return total;
}

// The first row whose target is out of range, or -1.
std::int64_t first_bad_row(const CrossEntropyArgs& a) {
  for (std::int64_t r = 0; r < a.rows; ++r)
    if (classify_target(a.targets[r * a.target_stride], a.cols, a.options.ignore_index) == TargetKind::out_of_range)
      return r;
  return -1;
}

}  // namespace

std::int64_t cross_entropy_rows(DType dtype, const CrossEntropyArgs& a, void* out) {
  return visit_floating(dtype, "cross_entropy", [&]<typename T, typename C>() {
    const T* logits = static_cast<const T*>(a.logits);
    T* result = static_cast<T*>(out);
    const C smoothing = static_cast<C>(a.options.label_smoothing);
    parallel_for(a.rows, a.rows * a.cols, [&](std::int64_t r) {
      const std::int64_t target = a.targets[r * a.target_stride];
      const TargetKind kind = classify_target(target, a.cols, a.options.ignore_index);
      C loss = C(0);
      if (kind == TargetKind::counted) {
        const T* row = logits + r * a.cols;
        CrossEntropyRow<C> acc;
        for (std::int64_t c = 0; c < a.cols; ++c) acc.add(convert<C>(row[c]));
        loss = cross_entropy_loss(acc, convert<C>(row[target]), a.cols, smoothing);
      }
      if (a.options.reduction == LossReduction::none) result[r] = convert<T>(loss);
      else a.workspace.row_losses[r] = static_cast<double>(loss);
    });
    if (a.options.reduction != LossReduction::none)
      result[0] = convert<T>(total_of(a, a.workspace.row_losses).value(a.options.reduction));
    return first_bad_row(a);
  });
}

std::int64_t cross_entropy_backward_rows(DType dtype, const CrossEntropyArgs& a, const void* grad, std::int64_t grad_stride,
                                         void* grad_logits) {
  const double counted = a.options.reduction == LossReduction::mean ? total_of(a, nullptr).count : 1.0;
  return visit_floating(dtype, "cross_entropy_backward", [&]<typename T, typename C>() {
    const T* logits = static_cast<const T*>(a.logits);
    const T* g = static_cast<const T*>(grad);
    T* result = static_cast<T*>(grad_logits);
    const C smoothing = static_cast<C>(a.options.label_smoothing);
    parallel_for(a.rows, a.rows * a.cols, [&](std::int64_t r) {
      const std::int64_t target = a.targets[r * a.target_stride];
      const TargetKind kind = classify_target(target, a.cols, a.options.ignore_index);
      const T* row = logits + r * a.cols;
      T* out = result + r * a.cols;
      if (kind != TargetKind::counted) {
        std::fill(out, out + a.cols, convert<T>(0.0));
        return;
      }
      LogSumExp<C> acc;
      for (std::int64_t c = 0; c < a.cols; ++c) acc.add(convert<C>(row[c]));
      const SoftmaxRow<C> p(acc);
      const C scale = row_scale(convert<C>(g[r * grad_stride]), a.options.reduction, counted);
      for (std::int64_t c = 0; c < a.cols; ++c)
        out[c] = convert<T>(cross_entropy_grad(p, convert<C>(row[c]), c == target, a.cols, smoothing, scale));
    });
    return first_bad_row(a);
  });
}

}  // namespace frugal::cpu
